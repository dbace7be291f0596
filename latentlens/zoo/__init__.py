"""The model zoo: converged latentlens models that ship inside the package.

Each entry is a folder ``models/<group>/<variant>/<seed>`` holding the model's weights
(``weights.safetensors``: the state dict alone, float32), its training curve
(``metrics.jsonl``) and a model card (``card.json``): the run's full config (model, task and
its split, training), how it was trained (command, steps, wall time, machine, latentlens
version and commit), its metrics with their standard errors on a fixed evaluation set, and
the SHA-256 of the weights file. ``models/MANIFEST.json``, shipped with them, holds the
SHA-256 of every file of every entry: each load checks the entry's files against it, so an
edited card (its split, steps or metrics) is refused like damaged weights, and only entries
it lists, inside the package's folder, are entries at all. The run directory a load builds
in the cache is checked against the card each time (its config, and its checkpoint's
digest, recorded when it was built) and built again where it differs.

    model, task = latentlens.zoo.load("fuzzy-logic-a1/hyla/s0")
    run = latentlens.zoo.run_directory("fuzzy-logic-a1/hyla/s0")  # for Trainer.load, probes

Every CLI command that reads a run directory takes ``zoo:NAME`` instead
(``latentlens probe zoo:fuzzy-logic-a1/hyla/s0``); ``latentlens zoo`` lists the entries.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latentlens.cache import cache_base, file_sha256

if TYPE_CHECKING:
    from latentlens.models import HookedModel
    from latentlens.tasks import Task

MODELS = Path(__file__).resolve().parent / "models"
PREFIX = "zoo:"
WEIGHTS, CARD, METRICS = "weights.safetensors", "card.json", "metrics.jsonl"
ENTRY_FILES = (CARD, WEIGHTS, METRICS)
MANIFEST = "MANIFEST.json"
# In a zoo run directory: the card's weights digest, config and checkpoint digest it was
# built from, as JSON.
STAMP = ".zoo-stamp.json"


def manifest() -> dict[str, dict[str, str]]:
    """``{entry name: {file name: SHA-256}}`` of the shipped zoo (empty without one)."""
    path = MODELS / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise ValueError(f"{path} is damaged; reinstall latentlens to restore the zoo") from None


def names() -> list[str]:
    """Every zoo entry's name (``group/variant/seed``), sorted: the manifest's entries
    whose folder lies inside the package's (a folder linked from elsewhere is none)."""
    if not MODELS.is_dir():
        return []
    root = MODELS.resolve()
    return sorted(name for name in manifest() if (MODELS / name).resolve().is_relative_to(root))


def entry_path(name: str) -> Path:
    """The folder of entry ``name``; a one-line error listing the entries when there is
    none of that name."""
    name = name.removeprefix(PREFIX)
    known = names()
    if name not in known:
        shown = ", ".join(known) if known else "none"
        raise ValueError(f"no zoo model named {name!r}; the zoo holds: {shown}")
    return MODELS / name


def verified_entry(name: str) -> Path:
    """Entry ``name``'s folder, once each of its files matches the manifest's SHA-256: a
    missing, damaged or edited file is refused with a one-line error."""
    folder = entry_path(name)
    expected = manifest()[name.removeprefix(PREFIX)]
    for file in ENTRY_FILES:
        path = folder / file
        if not path.is_file() or path.is_symlink():
            raise ValueError(f"{path} is missing; reinstall latentlens to restore the zoo")
        if file_sha256(path) != expected.get(file):
            what = "its model card" if file == WEIGHTS else "the zoo's manifest"
            raise ValueError(
                f"{path} does not match the SHA-256 on {what} (damaged or replaced); "
                "reinstall latentlens to restore it"
            )
    return folder


def card(name: str) -> dict[str, Any]:
    """Entry ``name``'s model card (``card.json``), checked against the manifest and read
    whole: a card without what a load needs is named."""
    path = verified_entry(name) / CARD
    try:
        info = json.loads(path.read_text())
        steps = info["training"]["steps"]
        ok = isinstance(info["sha256"], str) and isinstance(info["config"], dict)
        ok = ok and isinstance(steps, int) and not isinstance(steps, bool)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ValueError(
            f"{path} is malformed: a card holds config, sha256 and training.steps; "
            "reinstall latentlens to restore it"
        )
    return info


def verified_weights(name: str) -> Path:
    """Entry ``name``'s weights file, after checking it against its card's SHA-256 (and
    every file of the entry against the manifest's)."""
    weights = verified_entry(name) / WEIGHTS
    if file_sha256(weights) != card(name)["sha256"]:
        raise ValueError(
            f"{weights} does not match the SHA-256 on its model card (damaged or replaced); "
            "reinstall latentlens to restore it"
        )
    return weights


def cache_root() -> Path:
    """Where the zoo's run directories are built: ``$LATENTLENS_CACHE/zoo``, else
    ``~/.cache/latentlens/zoo``."""
    return cache_base() / "zoo"


def run_directory(name: str) -> Path:
    """A run directory of entry ``name`` (config.json, metrics.jsonl and one checkpoint of
    the card's step holding the zoo's weights and a fresh optimiser), which every command
    and :meth:`latentlens.training.Trainer.load` read like a trained run; built once per
    weights file in the cache (:func:`cache_root`), checked against the card every time.
    Analyses write into it (``probes/``, ``figures/``), never into the package."""
    from safetensors.torch import load_file

    from latentlens.training import RunDirectory, Trainer

    weights = verified_weights(name)
    name = name.removeprefix(PREFIX)
    info = card(name)
    target = cache_root() / name
    if built_from(target, info):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        (building / "config.json").write_text(json.dumps(info["config"], indent=1) + "\n")
        shutil.copyfile(entry_path(name) / METRICS, building / METRICS)
        trainer = Trainer(RunDirectory(building), info["config"], device="cpu", quiet=True)
        trainer.model.load_state_dict(load_file(str(weights)))
        trainer.step = info["training"]["steps"]
        trainer.checkpoint(evaluate=False)
        (building / STAMP).write_text(json.dumps(stamp_of(building, info)))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def stamp_of(run: Path, info: dict[str, Any]) -> dict[str, Any]:
    """What a zoo run directory was built from: the card's weights digest and config, and
    the digest of every checkpoint it holds."""
    checkpoints = sorted((run / "checkpoints").glob("*.safetensors"))
    return {"weights": info["sha256"], "config": info["config"],
            "checkpoints": {p.name: file_sha256(p) for p in checkpoints}}  # fmt: skip


def built_from(run: Path, info: dict[str, Any]) -> bool:
    """Whether the cached run directory ``run`` is the card's, unchanged: its stamp, its
    config.json and its checkpoints (an edited config or zeroed weights are not)."""
    stamp, config = run / STAMP, run / "config.json"
    if run.is_symlink() or not stamp.is_file() or not config.is_file():
        return False
    try:
        recorded = json.loads(stamp.read_text())
        unchanged = json.loads(config.read_text()) == info["config"]
    except ValueError:
        return False
    return unchanged and recorded == stamp_of(run, info)


def load(name: str, device: str = "auto") -> tuple[HookedModel, Task]:
    """Entry ``name``'s hooked model (eval mode, on ``device``) and its task (the split it
    was trained on), after checking its weights against the card."""
    from latentlens.training import Trainer

    trainer = Trainer.load(run_directory(name), device=device)
    return trainer.model, trainer.task


def resolve_run(argument: str | Path) -> Path:
    """A command's run-directory argument: ``zoo:NAME`` becomes that entry's run directory
    (:func:`run_directory`); anything else is a path."""
    text = str(argument)
    return run_directory(text) if text.startswith(PREFIX) else Path(argument)

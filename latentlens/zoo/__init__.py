"""The model zoo: converged latentlens models that ship inside the package.

Each entry is a folder ``models/<group>/<variant>/<seed>`` holding the model's weights
(``weights.safetensors``: the state dict alone, float32), its training curve
(``metrics.jsonl``) and a model card (``card.json``): the run's full config (model, task and
its split, training), how it was trained (command, steps, wall time, machine, latentlens
version and commit), its metrics with their standard errors on a fixed evaluation set, and
the SHA-256 of the weights file, which every load checks.

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
# In a zoo run directory: the SHA-256 of the weights it was built from.
STAMP = ".zoo-sha256"


def names() -> list[str]:
    """Every zoo entry's name (``group/variant/seed``), sorted."""
    if not MODELS.is_dir():
        return []
    return sorted(str(card.parent.relative_to(MODELS)) for card in MODELS.glob(f"*/*/*/{CARD}"))


def entry_path(name: str) -> Path:
    """The folder of entry ``name``; a one-line error listing the entries when there is
    none of that name."""
    name = name.removeprefix(PREFIX)
    known = names()
    if name not in known:
        shown = ", ".join(known) if known else "none"
        raise ValueError(f"no zoo model named {name!r}; the zoo holds: {shown}")
    return MODELS / name


def card(name: str) -> dict[str, Any]:
    """Entry ``name``'s model card (``card.json``)."""
    return json.loads((entry_path(name) / CARD).read_text())


def verified_weights(name: str) -> Path:
    """Entry ``name``'s weights file, after checking it against its card's SHA-256: a file
    that does not match is refused with a one-line error."""
    folder = entry_path(name)
    weights, expected = folder / WEIGHTS, card(name)["sha256"]
    if not weights.is_file():
        raise ValueError(f"{weights} is missing; reinstall latentlens to restore the zoo")
    if file_sha256(weights) != expected:
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
    stamp = target / STAMP
    if stamp.is_file() and stamp.read_text() == info["sha256"]:
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
        (building / STAMP).write_text(info["sha256"])
        shutil.rmtree(target, ignore_errors=True)
        os.replace(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


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

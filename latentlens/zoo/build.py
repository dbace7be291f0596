"""Adding a trained run to the zoo (maintainers: ``benchmarks/reproduction/zoo_add.py``): its
weights alone, its training curve and a model card with metrics measured on a fixed evaluation set.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from latentlens import __version__
from latentlens.cache import file_sha256
from latentlens.training import Trainer
from latentlens.zoo import CARD, ENTRY_FILES, MANIFEST, METRICS, MODELS, WEIGHTS


def card_metrics(trainer: Trainer, examples: int) -> dict[str, dict[str, float]]:
    """Every evaluation split's metrics, each with its standard error (``name_se``), on the
    run's fixed evaluation set of ``examples`` per split (:meth:`Trainer.evaluate`)."""
    return {s: trainer.evaluate(s, examples, errors=True) for s in trainer.task.eval_splits}


def add(
    run_dir: Path, name: str, training: dict[str, Any], examples: int, paper: dict[str, Any]
) -> Path:
    """Write zoo entry ``name`` (``group/variant/seed``) from the newest checkpoint of
    ``run_dir``: float32 weights, metrics.jsonl, and a card holding ``training`` (command,
    wall time, machine, commit, ...) and ``paper`` (the published figure it is set beside),
    evaluated on the CPU. Returns the entry's folder."""
    trainer = Trainer.load(run_dir, device="cpu")
    folder = MODELS / name
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to(torch.float32).contiguous() for k, v in trainer.model.state_dict().items()
    }
    save_file(state, str(folder / WEIGHTS))
    shutil.copyfile(run_dir / METRICS, folder / METRICS)
    card = {
        "name": name,
        "config": json.loads((run_dir / "config.json").read_text()),
        "training": {**training, "steps": trainer.step},
        "evaluation": {
            "examples_per_split": examples,
            "set": "the run's fixed evaluation set (Trainer.evaluate: seeded by the run's seed "
            "and the split), on the CPU in float32",
            "metrics": card_metrics(trainer, examples),
        },
        "paper": paper,
        "latentlens_version_adding": __version__,
        "sha256": file_sha256(folder / WEIGHTS),
    }
    (folder / CARD).write_text(json.dumps(card, indent=1) + "\n")
    write_manifest()
    return folder


def write_manifest() -> Path:
    """``models/MANIFEST.json``: every entry's files and their SHA-256, which every load
    checks (:func:`latentlens.zoo.verified_entry`)."""
    entries = sorted(card.parent for card in MODELS.glob(f"*/*/*/{CARD}"))
    listed = {
        str(entry.relative_to(MODELS)): {file: file_sha256(entry / file) for file in ENTRY_FILES}
        for entry in entries
    }
    path = MODELS / MANIFEST
    path.write_text(json.dumps(listed, indent=1, sort_keys=True) + "\n")
    return path

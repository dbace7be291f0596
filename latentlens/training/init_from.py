"""Start a run from another run's trained weights (fine-tuning), optionally with a layer
connection the other run did not have: seed 001's "insert the bridge into a pretrained
model" on latentlens's own encoder-decoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from latentlens.training.checkpoint import load_checkpoint, select_checkpoint
from latentlens.training.run_dir import RunDirectory

# Model-config fields a fine-tune may change: inserting (or re-initialising) the
# encoder-decoder layer connection adds its weights and nothing else.
CHANGEABLE = {"connection"}
NEW_WEIGHTS = {"layer_connection.weight"}


def initial_weights(
    base: str | Path, config: dict[str, Any], step: int | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The model weights of run ``base`` (at checkpoint ``step``, default the newest) for a
    new run of ``config``, and the provenance record ``{"run", "step"}``.

    The base must be the same model kind on the same task config, its model config equal
    to ``config``'s except ``connection``; a clear ``ValueError`` otherwise."""
    directory = RunDirectory(base)
    stored = directory.read_config()
    checks = {
        "model kind": (stored.get("model_kind"), config.get("model_kind")),
        "task": (stored["task"], config["task"]),
    }
    for what, (theirs, ours) in checks.items():
        if theirs != ours:
            raise ValueError(
                f"--init-from {base}: its {what} is {theirs!r}, this run's is {ours!r}; "
                "fine-tune from a run of the same model kind and task"
            )
    differ = sorted(
        key
        for key in set(stored["model"]) | set(config["model"])
        if key not in CHANGEABLE and stored["model"].get(key) != config["model"].get(key)
    )
    if differ:
        detail = ", ".join(
            f"{k}={stored['model'].get(k)!r} vs {config['model'].get(k)!r}" for k in differ
        )
        raise ValueError(
            f"--init-from {base}: the model differs in {detail}; only the layer connection "
            "may change when fine-tuning"
        )
    found_step, path = select_checkpoint(directory.checkpoints, step)
    return load_checkpoint(path).model, {"run": str(directory.path), "step": found_step}


def load_initial_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model``; only a layer connection the base lacked may be
    missing (it keeps its fresh initialisation), nothing may be left over."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if set(missing) - NEW_WEIGHTS or unexpected:
        raise ValueError(
            f"--init-from: the base run's weights do not fit this model (missing "
            f"{sorted(set(missing) - NEW_WEIGHTS)}, unexpected {sorted(unexpected)}); a base "
            "with a layer connection cannot be fine-tuned without one"
        )

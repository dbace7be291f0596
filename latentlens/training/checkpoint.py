"""Checkpoints: safetensors weights, optimiser state and RNG states, written atomically.

One file per checkpoint, ``checkpoints/step_XXXXXXXX.safetensors``: tensors ``model.*``
(the model's state dict), ``optim.{index}.{key}`` (AdamW's per-parameter state) and
``rng.*`` (byte states of the torch and data generators); JSON metadata for the step and
the optimiser's param groups. Loading uses safetensors and JSON only: nothing is unpickled.
Writes go to a temporary file that is flushed, fsynced and renamed over the target, so a
crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load, save

FORMAT = "latentlens-checkpoint-1"
_NAME = re.compile(r"^step_(\d{8})\.safetensors$")


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt or does not fit the run."""


@dataclass
class Checkpoint:
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict
    rng: dict[str, torch.Tensor]


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.safetensors"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def select_checkpoint(directory: Path, step: int | None = None) -> tuple[int, Path]:
    """``(step, path)`` of the checkpoint of ``step`` in ``directory`` (default: the newest);
    a :class:`CheckpointError` naming what there is when it is not there."""
    found = dict(list_checkpoints(directory))
    if not found:
        raise CheckpointError(f"{directory} holds no checkpoint")
    step = max(found) if step is None else step
    if step not in found:
        raise CheckpointError(
            f"no checkpoint of step {step} in {directory}; available: {sorted(found)}"
        )
    return step, found[step]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_checkpoint(
    directory: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: dict[str, torch.Tensor],
    keep: int,
) -> Path:
    """Write the checkpoint of ``step`` atomically and keep only the newest ``keep``."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    optim_state = optimizer.state_dict()
    for index, state in optim_state["state"].items():
        for key, value in state.items():
            tensors[f"optim.{index}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    for key, value in rng.items():
        tensors[f"rng.{key}"] = value.detach().cpu().contiguous()
    metadata = {
        "format": FORMAT,
        "step": str(step),
        "param_groups": json.dumps(optim_state["param_groups"], default=_tensor_to_number),
    }
    path = checkpoint_path(directory, step)
    atomic_write_bytes(path, save(tensors, metadata=metadata))
    for _, old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return path


def _tensor_to_number(value: object) -> float:
    """JSON for a param group's tensor hyper-parameters (the learning rate on the device)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a checkpoint's param_groups")


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint; a missing or corrupt file raises :class:`CheckpointError`."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        tensors = load(path.read_bytes())
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except (SafetensorError, ValueError, OSError) as err:
        raise CheckpointError(
            f"checkpoint {path} is corrupt ({err}); delete it to resume from an earlier "
            "checkpoint, or start a new run"
        ) from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not a latentlens checkpoint (format "
            f"{metadata.get('format')!r}, expected {FORMAT!r})"
        )
    model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    rng = {k[4:]: v for k, v in tensors.items() if k.startswith("rng.")}
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer = {"state": state, "param_groups": json.loads(metadata["param_groups"])}
    return Checkpoint(int(metadata["step"]), model, optimizer, rng)

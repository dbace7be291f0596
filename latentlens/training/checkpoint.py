"""Checkpoints: safetensors weights, optimiser state and RNG states, written atomically.

One file per checkpoint, ``checkpoints/step_XXXXXXXX.safetensors``: tensors ``model.*``
(the model's state dict), ``optim.{index}.{key}`` (AdamW's per-parameter state) and
``rng.*`` (byte states of the torch and data generators); JSON metadata for the step and
the optimiser's param groups. Loading uses safetensors and JSON only: nothing is unpickled.
Writes go to a temporary file that is flushed, fsynced and renamed over the target, so a
crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
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
    # wall seconds of training that made this state, from step 0 (None: unknown, as in a
    # checkpoint written before latentlens recorded it)
    train_seconds: float | None = None


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


def with_filename(err: OSError, path: Path) -> OSError:
    """``err`` naming ``path`` when it names no file (``write`` on a full disk does not)."""
    return err if err.filename else OSError(err.errno, err.strerror or str(err), str(path))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename. A failed write
    (a full disk) removes the temporary file and leaves ``path`` as it was."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:  # a write's error (a full disk) names no file: name the target
        tmp.unlink(missing_ok=True)
        raise with_filename(err, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
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
    train_seconds: float | None = None,
) -> Path:
    """Write the checkpoint of ``step`` atomically and keep only the newest ``keep``;
    ``train_seconds``, the wall time of training that made it, goes in its metadata (so
    two identical runs' checkpoints differ there, and in their tensors never)."""
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
        "sha256": tensors_digest(tensors),
    }
    if train_seconds is not None:
        metadata["train_seconds"] = f"{train_seconds:.3f}"
    path = checkpoint_path(directory, step)
    atomic_write_bytes(path, in_key_order(save(tensors, metadata=metadata)))
    for _, old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return path


def in_key_order(data: bytes) -> bytes:
    """safetensors bytes ``data`` with the metadata in key order: safetensors writes it from
    a hash map whose order changes from one write to the next, so the checkpoints of two
    identical runs differed in their bytes. The tensors and their bytes are left as they
    are (their offsets count from the end of the header); the header stays padded with
    spaces to a multiple of 8 bytes, as safetensors pads it."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text = text.ljust(-(-len(text) // 8) * 8)
    return len(text).to_bytes(8, "little") + text + data[8 + size :]


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order: what a
    checkpoint's metadata records and its loader verifies (a flipped bit anywhere fails)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


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
    named = _NAME.match(path.name)
    try:
        step = int(metadata["step"])
        param_groups = json.loads(metadata["param_groups"])
    except (KeyError, ValueError) as err:
        raise CheckpointError(f"{path} has damaged metadata ({err}); it cannot be used") from None
    if named and int(named.group(1)) != step:
        raise CheckpointError(f"{path} says it is step {step}, not the step of its file name")
    if "sha256" not in metadata:
        warnings.warn(
            f"{path} carries no checksum (written by an older latentlens, or its metadata is "
            "damaged): its tensors are not verified",
            stacklevel=2,
        )
    elif tensors_digest(tensors) != metadata["sha256"]:
        raise CheckpointError(f"{path} fails its checksum: its tensors were damaged on disk")
    model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    rng = {k[4:]: v for k, v in tensors.items() if k.startswith("rng.")}
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer = {"state": state, "param_groups": param_groups}
    return Checkpoint(step, model, optimizer, rng, _seconds(metadata.get("train_seconds")))


def recorded_train_seconds(path: Path) -> float | None:
    """The training seconds a checkpoint's metadata records (its header alone is read);
    None where it records none or cannot be read."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return _seconds((handle.metadata() or {}).get("train_seconds"))
    except (SafetensorError, OSError):
        return None


def _seconds(text: str | None) -> float | None:
    """A checkpoint's recorded training seconds; None where absent or damaged (a number
    that only describes the run, never a reason to refuse its weights)."""
    try:
        seconds = float(text) if text is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def newest_good_checkpoint(directory: Path, at_most: int | None = None) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` (of a step ``<= at_most`` if given) that loads
    and verifies, warning about each newer one skipped; ``None`` when there is none at all,
    an error when none is good."""
    found = [(step, path) for step, path in list_checkpoints(directory)
             if at_most is None or step <= at_most]  # fmt: skip
    skipped = []
    for step, path in reversed(found):
        try:
            checkpoint = load_checkpoint(path)
        except CheckpointError as err:
            skipped.append(str(err))
            continue
        for reason in skipped:
            warnings.warn(f"skipped {reason}; resuming from step {step}", stacklevel=2)
        return checkpoint
    if skipped:
        raise CheckpointError(
            f"no checkpoint in {directory} can be resumed: {'; '.join(skipped)}; start a new run"
        )
    return None

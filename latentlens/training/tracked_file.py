"""The tracked-array file, ``tracking/{name}.safetensors``: tensors ``steps`` ``[n]`` and
``values`` ``[n, ...]``, and, where known, the names of a value's axes in the metadata
(``"axes"``: a JSON list such as ``["head", "query", "key"]``). One writer and one reader
for the recorders, their resume and the figures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save


@dataclass(frozen=True)
class TrackedArray:
    """One array tracked over training: ``values[i]`` was recorded at ``steps[i]``; ``axes``
    names the axes of one value (``("head", "query", "key")``), ``None`` where unnamed."""

    steps: list[int]
    values: np.ndarray
    axes: tuple[str, ...] | None = None


def tracked_bytes(
    steps: Sequence[int], values: torch.Tensor, axes: Sequence[str] | None = None
) -> bytes:
    """The file of ``values`` ``[n, ...]`` recorded at ``steps`` ``[n]``."""
    tensors = {"steps": torch.tensor(list(steps), dtype=torch.long), "values": values.contiguous()}
    return save(tensors, None if axes is None else {"axes": json.dumps(list(axes))})


def load_tracked(path: str | Path) -> TrackedArray:
    """The steps, values ``[steps, ...]`` and axis names of one tracked array file."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            keys = handle.keys()  # a safe_open handle is not iterable
            stored = {key: handle.get_tensor(key) for key in keys}
            named = (handle.metadata() or {}).get("axes")
    except (SafetensorError, OSError) as err:
        raise ValueError(
            f"{path} is damaged ({err}); delete it (the run loses that record) or restore it"
        ) from None
    if set(stored) != {"steps", "values"} or len(stored["steps"]) != len(stored["values"]):
        raise ValueError(
            f"{path} is not a tracked array (tensors 'steps' [n] and 'values' [n, ...])"
        )
    values = stored["values"].float().numpy()
    axes = None if named is None else _axis_names(named)
    if named is not None and (axes is None or len(axes) != values.ndim - 1):
        raise ValueError(
            f"{path} names axes {named} for values of shape {list(values.shape[1:])}: "
            "the file is corrupt; record it again"
        )
    return TrackedArray(stored["steps"].tolist(), values, axes)


def _axis_names(named: str) -> tuple[str, ...] | None:
    """The axis names a tracked array's metadata holds (a JSON list of strings); ``None``
    for anything else."""
    try:
        axes = json.loads(named)
    except json.JSONDecodeError:
        return None
    if not isinstance(axes, list) or not all(isinstance(axis, str) for axis in axes):
        return None
    return tuple(axes)

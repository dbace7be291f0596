"""Input checks that fail with a message naming the tensor, its shape and the expected one."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_input(
    name: str, tensor: torch.Tensor, expected: Sequence[int | None], layout: str
) -> None:
    """Raise ``ValueError`` unless ``tensor`` has ``len(expected)`` dims matching ``expected``.

    ``None`` in ``expected`` accepts any size; ``layout`` names the dims for the message,
    e.g. ``"[batch, pos, d_model]"``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(tensor).__name__}")
    shape = tuple(tensor.shape)
    wanted = "[" + ", ".join("*" if size is None else str(size) for size in expected) + "]"
    if len(shape) != len(expected) or any(
        size is not None and size != actual for size, actual in zip(expected, shape, strict=False)
    ):
        raise ValueError(
            f"{name} has shape {list(shape)}, expected {layout} = {wanted} (* is any size)"
        )
    if 0 in shape:
        raise ValueError(
            f"{name} is empty (shape {list(shape)}, expected {layout}): give at least one "
            "example and one position"
        )


def check_dtype(name: str, tensor: torch.Tensor, model: torch.nn.Module) -> None:
    """Raise ``ValueError`` unless floating ``tensor`` has the dtype of ``model``'s weights."""
    weights = next(model.parameters()).dtype
    if tensor.dtype != weights:
        raise ValueError(
            f"{name} is {tensor.dtype} but the model holds {weights}; pass "
            f"{name}.to({weights}) (or convert the model with .to({tensor.dtype}))"
        )

"""Fused CPU kernels, built from C on first use (:mod:`latentlens.kernels.build`): the
attention core (:mod:`~latentlens.kernels.attention_core`), the tanh GELU
(:mod:`~latentlens.kernels.gelu_tanh`), the residual stream's adds and layer norms
(:mod:`~latentlens.kernels.layer_norm`), an MLP a block of rows at a time
(:mod:`~latentlens.kernels.mlp`), a bias add (:mod:`~latentlens.kernels.bias_add`) and
AdamW's step (:mod:`~latentlens.kernels.adamw`). Their sums over rows are cut into a fixed
number of slices, not one per thread (:data:`~latentlens.kernels.build.SLICES`): the same
numbers on any thread count. The PyTorch operators a compiled step calls them through,
whose bodies an eager step's autograd functions call too, have C++ bodies where a C++
compiler builds them (:mod:`~latentlens.kernels.native`), else their Python ones.

The package knows tensors, not model classes: the models switch themselves to it
(:func:`latentlens.models.use_fused_kernels`, training's ``--fused``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_tracing = threading.local()  # .on: inside tracing_a_step() in this thread


def compiling() -> bool:
    """Whether the code running now is being compiled: traced by torch.compile, or by
    :func:`tracing_a_step` into one graph of a whole training step. Layers then take the
    kernels' PyTorch operators, which a graph records, rather than their autograd
    functions, which call the kernels directly."""
    return getattr(_tracing, "on", False) or torch.compiler.is_compiling()


@contextlib.contextmanager
def tracing_a_step() -> Iterator[None]:
    """Inside it, in this thread, :func:`compiling` is True
    (:mod:`latentlens.training.traced_step` traces a step's forward and backward with
    ``make_fx``, which torch.compile's flag does not cover)."""
    before = getattr(_tracing, "on", False)
    _tracing.on = True
    try:
        yield
    finally:
        _tracing.on = before


def kernels_apply(tensor: torch.Tensor, compiles: bool = False) -> bool:
    """Whether a layer switched to the kernels may run them on ``tensor``: float32 on the
    CPU, outside autocast, and outside torch.compile unless the kernel is a PyTorch
    operator that compiled code calls (``compiles``: self-attention's core and the
    GELU)."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and (compiles or not compiling())
    )

"""A softmax over the last dimension whose gradient does not depend on the number of CPU
threads.

PyTorch's CPU softmax backward handles rows whose length is not a multiple of its vector
width with a tail path, and where a thread's share of the rows starts decides which rows
take it: on scores ``[128, 16, 36, 36]`` (SRAVEN's 36 tokens) and ``[64, 8, 20, 20]`` the
input gradient on 1 and on 2 threads differs in the last bits, so softmax runs drifted apart
by thread count (rows of 16 or 32 keys, fuzzy logic's, were alike). :func:`softmax` computes
the same function with the gradient written out, dx = y ⊙ (g − Σ_k g·y), whose one
reduction runs along each row in a fixed order on any thread count.

Under ``torch.compile``, off the CPU and without gradients it is :func:`torch.softmax`
itself (inductor writes its own kernels; a GPU's do not follow the CPU's thread count).
"""

from __future__ import annotations

from typing import Any

import torch

from latentlens.kernels import compiling


class _RowSoftmax(torch.autograd.Function):
    """``torch.softmax`` over the last dimension with the backward written out. Written with
    PyTorch operations only, so that vmap (a seed group's step) batches it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(dim=-1, keepdim=True))


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, ``[..., n] -> [..., n]``; its gradient is the same on
    any number of CPU threads (see the module's docstring)."""
    if x.device.type != "cpu" or not torch.is_grad_enabled() or compiling():
        return torch.softmax(x, dim=-1)
    return _RowSoftmax.apply(x)

"""A bias add whose gradient, the bias's column sums, is the same on any thread count.

A compiled step sums a bias's gradient over the rows with inductor's own reduction, which
splits the rows by thread: on 1 and on 2 threads the attention's ``b_Q``, ``b_K``, ``b_V``
and an unembedding's bias got other last bits. :func:`fused_bias_add` adds the bias as
PyTorch does (the add stays in the compiled graph, fused with what computes ``x``), and
its backward sums the rows with ``bias_add.c``'s kernel in fixed slices
(:data:`~latentlens.kernels.build.SLICES`), eager and compiled alike.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch.library import register_fake

from latentlens.kernels.build import load, operator, slices, threads


@cache
def library() -> ctypes.CDLL:
    lib = load("bias_add")
    size = ctypes.c_size_t
    lib.column_sums.argtypes = [ctypes.c_int, ctypes.c_int, size, size] + [ctypes.c_void_p] * 3
    return lib


@operator("column_sums")
def column_sums(dy: torch.Tensor) -> torch.Tensor:
    """The sums over every dimension but the last of float32 CPU ``dy [..., c]``: ``[c]``."""
    dy = dy.contiguous()
    columns = dy.shape[-1]
    rows = dy.numel() // max(columns, 1)
    count = slices(rows)
    sums, partial = dy.new_empty(columns), dy.new_zeros(count, columns)
    library().column_sums(
        threads(), count, rows, columns, dy.data_ptr(), sums.data_ptr(), partial.data_ptr()
    )
    return sums


@register_fake(column_sums)
def _(dy):
    return dy.new_empty(dy.shape[-1])


class FusedBiasAdd(torch.autograd.Function):
    """``x + bias`` (``x [..., *bias.shape]``), the bias's gradient :func:`column_sums`."""

    @staticmethod
    def forward(ctx, x, bias):  # type: ignore[override]
        ctx.bias_shape = bias.shape
        return x + bias

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        flat = dy.reshape(*dy.shape[: dy.dim() - len(ctx.bias_shape)], -1)
        return dy, column_sums(flat).view(ctx.bias_shape)


def fused_bias_add(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x + bias`` of float32 CPU tensors, ``bias`` the trailing dimensions of ``x``; its
    gradient sums the rows in fixed slices, eager and inside torch.compile."""
    return FusedBiasAdd.apply(x, bias)

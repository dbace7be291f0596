"""GELU's tanh approximation as one fused CPU pass forward and one backward.

PyTorch's CPU kernel of ``F.gelu(x, approximate="tanh")`` ran 2.5 ms forward and 2.6 ms
backward on a ``[128, 32, 256]`` float32 tensor on one core of a Xeon, against 0.45 ms for
the exact (erf) GELU (torch 2.13): a fuzzy-logic MLP's largest element-wise cost. The
kernel of ``gelu_tanh.c`` computes the same function to float32 rounding (its tanh comes
from a vectorised exp), on PyTorch's threads.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch.library import register_autograd, register_fake

from latentlens.kernels import compiling
from latentlens.kernels.build import body, load, operators, slices, threads


@cache
def library() -> ctypes.CDLL:
    lib = load("gelu_tanh")
    lib.gelu_tanh_forward.argtypes = [ctypes.c_int, ctypes.c_size_t] + [ctypes.c_void_p] * 2
    lib.gelu_tanh_backward.argtypes = [ctypes.c_int, ctypes.c_size_t] + [ctypes.c_void_p] * 3
    rows = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
    lib.bias_gelu_tanh_forward.argtypes = rows + [ctypes.c_void_p] * 3
    lib.bias_gelu_tanh_backward.argtypes = [ctypes.c_int, *rows] + [ctypes.c_void_p] * 6
    return lib


def elementwise(function: ctypes._CFuncPtr, *tensors: torch.Tensor) -> None:
    """``function(threads, n, *pointers)`` over the (contiguous float32) ``tensors``."""
    function(threads(), tensors[0].numel(), *(t.data_ptr() for t in tensors))


def forward_values(x: torch.Tensor) -> torch.Tensor:
    """``F.gelu(x, approximate="tanh")`` of a float32 CPU tensor, any shape (contiguous)."""
    x = x.contiguous()
    y = torch.empty_like(x)
    elementwise(library().gelu_tanh_forward, x, y)
    return y


def backward_values(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The gradient of the GELU at ``x`` times ``dy`` (same shape, contiguous)."""
    x, dy = x.contiguous(), dy.contiguous()
    dx = torch.empty_like(x)
    elementwise(library().gelu_tanh_backward, x, dy, dx)
    return dx


class FusedGeluTanh(torch.autograd.Function):
    """The kernels in eager mode: an autograd function calling the operators' bodies
    (:func:`~latentlens.kernels.build.body`) costs about 0.1 ms less a forward and
    backward than the operators below with their autograd wrapper."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        ctx.save_for_backward(x)
        return body(gelu_tanh, x)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return body(gelu_tanh_backward, x, dy)


# The kernels as operators (``torch.ops.latentlens``), which a compiled step calls:
# inductor's own tanh GELU (a SLEEF tanh, in the forward and again in the backward) made
# a compiled Table A1 softmax step 1.08x slower than with these.
gelu_tanh, gelu_tanh_backward = operators("gelu_tanh", forward_values, backward_values)


@register_fake(gelu_tanh)
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@register_fake(gelu_tanh_backward)
def _(x, dy):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _save_input(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return gelu_tanh_backward(x, dy)


register_autograd(gelu_tanh, _backward, setup_context=_save_input)


def fused_gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """``F.gelu(x, approximate="tanh")`` of a float32 CPU tensor, any shape, on the
    kernels: an autograd function in eager mode, the operator inside torch.compile."""
    if compiling():
        return gelu_tanh(x)
    return FusedGeluTanh.apply(x)


def bias_forward_values(h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``F.gelu(h + bias, approximate="tanh")`` of float32 CPU ``h [..., d]`` and
    ``bias [d]``: a linear layer's bias added in the GELU's pass, not the matmul's."""
    h, bias = h.contiguous(), bias.contiguous()  # held while the kernel runs
    y = torch.empty_like(h)
    columns = h.shape[-1]
    library().bias_gelu_tanh_forward(
        threads(), h.numel() // max(columns, 1), columns, h.data_ptr(), bias.data_ptr(),
        y.data_ptr(),
    )  # fmt: skip
    return y


def bias_backward_values(
    h: torch.Tensor, bias: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dh, dbias)``: the gradient at ``h + bias`` times ``dy``, and its column sums."""
    h, dy, bias = h.contiguous(), dy.contiguous(), bias.contiguous()
    dh, dbias = torch.empty_like(h), h.new_empty(h.shape[-1])
    columns = h.shape[-1]
    rows = h.numel() // max(columns, 1)
    count = slices(rows)
    partial = h.new_zeros(count, columns)  # each slice's column sums
    library().bias_gelu_tanh_backward(
        threads(), count, rows, columns, h.data_ptr(), bias.data_ptr(),
        dy.data_ptr(), dh.data_ptr(), dbias.data_ptr(), partial.data_ptr(),
    )  # fmt: skip
    return dh, dbias


class FusedBiasGeluTanh(torch.autograd.Function):
    """:func:`bias_forward_values` and its gradient in eager mode."""

    @staticmethod
    def forward(ctx, h, bias):  # type: ignore[override]
        ctx.save_for_backward(h, bias)
        return body(bias_gelu_tanh, h, bias)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        return body(bias_gelu_tanh_backward, *ctx.saved_tensors, dy)


def fused_bias_gelu_tanh(h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``F.gelu(h + bias, approximate="tanh")`` (float32 CPU ``h [..., d]``, ``bias
    [d]``) on the kernels: an autograd function eagerly, the operator compiled."""
    if compiling():
        return bias_gelu_tanh(h, bias)
    return FusedBiasGeluTanh.apply(h, bias)


bias_gelu_tanh, bias_gelu_tanh_backward = operators(
    "bias_gelu_tanh", bias_forward_values, bias_backward_values
)


@register_fake(bias_gelu_tanh)
def _(h, bias):
    return torch.empty_like(h, memory_format=torch.contiguous_format)


@register_fake(bias_gelu_tanh_backward)
def _(h, bias, dy):
    return torch.empty_like(h, memory_format=torch.contiguous_format), h.new_empty(h.shape[-1])


def _save_inputs(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _bias_backward(ctx, dy):
    h, bias = ctx.saved_tensors
    return bias_gelu_tanh_backward(h, bias, dy)


register_autograd(bias_gelu_tanh, _bias_backward, setup_context=_save_inputs)

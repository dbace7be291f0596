"""A transformer MLP's forward and backward passes, ``gelu_tanh(x W_in^T + b_in) W_out^T``,
on the fastest float32 matmul this machine's PyTorch has.

Two engines (:func:`engine`):

- ``onednn``: the matmuls are oneDNN's (:mod:`latentlens.kernels.linear`: on a 2-core
  AMD EPYC, Zen 5, about 480 GFLOP/s at the MLP's shapes where PyTorch's MKL ``sgemm``
  runs about 205), the bias and GELU one pass of ``gelu_tanh.c`` each way: the MLP of a
  Table A1 fuzzy-logic step forward in 1.30 ms instead of 2.90, backward in 3.90
  instead of 5.67; its weights' gradients the same on any thread count.
- ``sgemm``: where PyTorch has no oneDNN, the kernel of ``mlp.c`` runs fc_in, the GELU
  (with fc_in's bias) and fc_out on one block of 256 rows at a time with MKL's ``sgemm``
  (from PyTorch's own library), so that the block's hidden activations and their
  gradients are still in the cache when the next matmul reads them (before oneDNN, the
  first block's MLP was 58% of a fused Table A1 step); the weights' gradients sum their
  rows in blocks, in runs fixed whatever the thread count.

Either differs from PyTorch's ops by float32 rounding (about 4e-7 relative). Where
neither runs (a build without oneDNN whose library exports no ``sgemm``),
:func:`available` is False and the MLP runs as PyTorch's ops.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch.library import register_autograd, register_fake

from latentlens.kernels import compiling
from latentlens.kernels.blas import sgemm_address
from latentlens.kernels.build import body, load, operators, slices, threads
from latentlens.kernels.gelu_tanh import bias_backward_values, bias_forward_values
from latentlens.kernels.linear import MIN_OUTPUTS, has_onednn, linear, row_products

# Rows per block: each [rows, d_mlp] block of activations and gradients about a quarter
# megabyte, so that a few of them fit a core's L2 cache with the weights.
BLOCK_FLOATS = 65536
# The backward pass's blocks are cut into at most this many runs whatever the thread
# count (each run's weight gradients summed apart, the runs' sums added in order): the
# same numbers on any thread count, at most this many threads in the backward pass, and
# (runs - 1) extra copies of the weights' gradients to add up.
BACKWARD_RUNS = 4


def engine() -> str | None:
    """The MLP's engine here (the module's docstring): ``onednn`` where PyTorch has it,
    else ``sgemm`` where its library exports ``sgemm_``; None where neither runs."""
    if has_onednn():
        return "onednn"
    return "sgemm" if sgemm_address() is not None else None


def on_onednn(w_in: torch.Tensor) -> bool:
    """Whether the MLP of ``w_in [F, D]`` runs on oneDNN: its engine, and weights' gradients
    of :data:`~latentlens.kernels.linear.MIN_OUTPUTS` rows or more where the sgemm kernel
    could take narrower ones (oneDNN might sum theirs by thread)."""
    narrow = min(w_in.shape) < MIN_OUTPUTS and sgemm_address() is not None
    return engine() == "onednn" and not narrow


def available() -> bool:
    """Whether an engine can run the MLP here."""
    return engine() is not None


@cache
def library() -> ctypes.CDLL:
    lib = load("mlp")
    sizes = [ctypes.c_int] * 5  # threads, N, D, F, R
    lib.mlp_forward.argtypes = sizes + [ctypes.c_void_p] * 7
    lib.mlp_backward.argtypes = [ctypes.c_int, *sizes] + [ctypes.c_void_p] * 12
    lib.mlp_set_sgemm.argtypes = [ctypes.c_void_p]
    lib.mlp_set_sgemm(sgemm_address())
    return lib


def block_rows(d_mlp: int) -> int:
    """Rows per block for hidden width ``d_mlp``."""
    return max(16, BLOCK_FLOATS // max(d_mlp, 1))


def check_shapes(
    x: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor, w_out: torch.Tensor
) -> None:
    """Refuse, in one line, what the kernel would misread or read out of bounds."""
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in (x, w_in, b_in, w_out)):
        raise ValueError("the fused MLP kernel takes float32 CPU tensors")
    d_mlp, d_model = w_in.shape if w_in.dim() == 2 else (-1, -1)
    if x.shape[-1:] != (d_model,) or b_in.shape != (d_mlp,) or w_out.shape != (d_model, d_mlp):
        raise ValueError(
            f"the fused MLP needs x [..., D], w_in [F, D], b_in [F] and w_out [D, F]; got "
            f"{list(x.shape)}, {list(w_in.shape)}, {list(b_in.shape)}, {list(w_out.shape)}"
        )


def forward_values(
    x: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor, w_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out, h, y)`` for float32 CPU ``x [..., D]``, ``w_in [F, D]``, ``b_in [F]``,
    ``w_out [D, F]``: ``h = x w_in^T`` (without ``b_in``), ``y = gelu_tanh(h + b_in)`` and
    ``out = y w_out^T`` (without fc_out's bias), each ``[..., F]`` or ``[..., D]``."""
    check_shapes(x, w_in, b_in, w_out)
    x, w_in, b_in, w_out = (t.contiguous() for t in (x, w_in, b_in, w_out))
    if on_onednn(w_in):
        h = linear(x, w_in)
        y = bias_forward_values(h, b_in)
        return linear(y, w_out), h, y
    d_mlp, d_model = w_in.shape
    rows = x.numel() // max(d_model, 1)
    h = x.new_empty(*x.shape[:-1], d_mlp)
    y = torch.empty_like(h)
    out = torch.empty_like(x)
    library().mlp_forward(
        threads(), rows, d_model, d_mlp, block_rows(d_mlp), x.data_ptr(), w_in.data_ptr(),
        b_in.data_ptr(), w_out.data_ptr(), h.data_ptr(), y.data_ptr(), out.data_ptr(),
    )  # fmt: skip
    return out, h, y


def backward_values(
    x: torch.Tensor,
    w_in: torch.Tensor,
    b_in: torch.Tensor,
    w_out: torch.Tensor,
    h: torch.Tensor,
    y: torch.Tensor,
    dout: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dw_in, db_in, dw_out)``: the gradients of :func:`forward_values`'s ``out``
    times ``dout``, from its saved ``h`` and ``y``."""
    x, w_in, b_in, w_out, h, y, dout = (t.contiguous() for t in (x, w_in, b_in, w_out, h, y, dout))
    if on_onednn(w_in):
        dh, db_in = bias_backward_values(h, b_in, linear(dout, w_out.T))
        dw_out, dw_in = row_products(dout, y), row_products(dh, x)  # [D, F], [F, D]
        return linear(dh, w_in.T), dw_in, db_in, dw_out
    d_mlp, d_model = w_in.shape
    rows, block = x.numel() // max(d_model, 1), block_rows(d_mlp)
    runs = slices(-(-rows // block), BACKWARD_RUNS)
    count = min(threads(), runs)  # the threads the kernel uses
    dx = torch.empty_like(x)
    dw_in, db_in, dw_out = torch.empty_like(w_in), torch.empty_like(b_in), torch.empty_like(w_out)
    # each thread's block of hidden gradients, then each run's after the first's sums
    work = x.new_empty(count * block * d_mlp + (runs - 1) * (2 * d_mlp * d_model + d_mlp))
    library().mlp_backward(
        count, runs, rows, d_model, d_mlp, block, x.data_ptr(), w_in.data_ptr(), b_in.data_ptr(),
        w_out.data_ptr(), h.data_ptr(), y.data_ptr(), dout.data_ptr(), dx.data_ptr(),
        dw_in.data_ptr(), db_in.data_ptr(), dw_out.data_ptr(), work.data_ptr(),
    )  # fmt: skip
    return dx, dw_in, db_in, dw_out


class FusedMLP(torch.autograd.Function):
    """The kernels in eager mode."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, w_out):  # type: ignore[override]
        out, h, y = body(mlp, x, w_in, b_in, w_out)
        ctx.save_for_backward(x, w_in, b_in, w_out, h, y)
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        return body(mlp_backward, *ctx.saved_tensors, dout)


# The kernels as operators (``torch.ops.latentlens``), which a compiled step calls.
mlp, mlp_backward = operators("mlp", forward_values, backward_values)


@register_fake(mlp)
def _(x, w_in, b_in, w_out):
    h = x.new_empty(*x.shape[:-1], w_in.shape[0])
    return torch.empty_like(x, memory_format=torch.contiguous_format), h, torch.empty_like(h)


@register_fake(mlp_backward)
def _(x, w_in, b_in, w_out, h, y, dout):
    return (
        torch.empty_like(x, memory_format=torch.contiguous_format),
        torch.empty_like(w_in, memory_format=torch.contiguous_format),
        torch.empty_like(b_in, memory_format=torch.contiguous_format),
        torch.empty_like(w_out, memory_format=torch.contiguous_format),
    )


def _save(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(*inputs, output[1], output[2])


def _backward(ctx, dout, _dh, _dy):
    return mlp_backward(*ctx.saved_tensors, dout)


register_autograd(mlp, _backward, setup_context=_save)


def fused_mlp(
    x: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor, w_out: torch.Tensor
) -> torch.Tensor:
    """``gelu_tanh(x w_in^T + b_in) w_out^T`` (float32 CPU tensors, ``x [..., D]``) on the
    kernels: an autograd function eagerly, the operator compiled."""
    if compiling():
        return mlp(x, w_in, b_in, w_out)[0]
    return FusedMLP.apply(x, w_in, b_in, w_out)

"""Linear maps on oneDNN's float32 matmul, with the same numbers on any thread count.

PyTorch's CPU matmuls (``torch.mm``, ``F.linear``, inductor's ``extern_kernels.bmm``) are
MKL's ``sgemm``, which on a 2-core AMD EPYC (Zen 5) runs its AVX2 code: about 205 GFLOP/s
at a transformer's shapes, where oneDNN, also inside PyTorch
(``torch.ops.mkldnn._linear_pointwise``, the kernel inductor's CPU inference fusions call),
runs AVX-512 at about 480. The fused path's MLP (:mod:`latentlens.kernels.mlp`) and its
attention projections (:func:`projection`) take it.

A weight's gradient sums over the rows. oneDNN cuts that sum the same way on 1 to 16
threads where the gradient has at least :data:`MIN_OUTPUTS` rows and the sum at most
:data:`ROWS_PER_SUM` rows (measured on the EPYC for outputs of 1-256 rows by 16-256
columns and 512-8,192 rows summed: a one-row output split its sum by thread from 2,048
rows on, a 128 x 128 one from 32,768); :func:`row_products` cuts longer sums into fixed
chunks of that many rows, added in order, and ``tests/kernels`` hold every shape the
models use to the same bits on 1 to 4 threads.

oneDNN splits a weight's gradient over its outputs, so each core reads every row, half of
them written by the other core. Where the two cores sit on different core complexes (a
cloud VM's vCPUs, placed by the hypervisor) that traffic made a SRAVEN step 1.2x as long.
The ``per-core`` engine (:func:`use_weight_gradients`; ``row_products.c``) sums each
core's own rows with MKL's ``sgemm`` on one thread and adds the parts' sums in a fixed
order: on a 2-core Zen 4 EPYC its steps were 1.10x as fast with the cores far apart and
0.99x near (docs/benchmarks.md, "Where the two cores sit").
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch.library import register_autograd, register_fake

from latentlens.kernels.bias_add import column_sums
from latentlens.kernels.blas import sgemm_address
from latentlens.kernels.build import load, operators, threads

# oneDNN sums at most this many rows the same way on any thread count (module docstring)
ROWS_PER_SUM = 8192
# ... for weight gradients of at least this many rows; narrower ones keep PyTorch's path
MIN_OUTPUTS = 8
# How a weight's gradient is summed: oneDNN's matmul, or each core its own rows
# (``row_products.c``, where PyTorch's library exports ``sgemm_``)
WEIGHT_GRADIENTS = ("onednn", "per-core")
# The per-core engine cuts the rows into this many parts whatever the thread count (at most
# this many threads sum them); a power of two
PARTS = 4
# The process's engine, as its thread count is: 1 where per-core (a C int, which the C++
# operators' bodies read: latentlens.kernels.native)
PER_CORE = ctypes.c_int(0)


# PyTorch was built with oneDNN and has its linear operator (a constant compiled code reads)
ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def has_onednn() -> bool:
    """Whether PyTorch was built with oneDNN and has its linear operator."""
    return ONEDNN


def linear(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a w^T + bias`` ``[..., N]`` (``a [..., K]``, ``w [N, K]``, ``bias [N]``: float32
    CPU; a 2-D ``a`` may be a transposed view) by oneDNN's matmul."""
    rows = a if a.dim() == 2 else a.reshape(-1, a.shape[-1])
    if 0 in rows.shape or 0 in w.shape:  # oneDNN refuses empty operands
        out = a.new_zeros(*a.shape[:-1], w.shape[0])
        return out if bias is None else out + bias
    out = torch.ops.mkldnn._linear_pointwise(rows, w, bias, "none", [], "")
    return out.view(*a.shape[:-1], w.shape[0])


@cache
def library(defines: tuple[tuple[str, int], ...] = ()) -> ctypes.CDLL:
    """``transpose.c``'s library, its whole blocks turned in vector registers where the
    machine has AVX unless ``defines`` sets ``SCALAR_TRANSPOSE`` (the tests compare both)."""
    lib = load("transpose", defines)
    size = ctypes.c_size_t
    lib.transpose.argtypes = [ctypes.c_int, size, size, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def transposed(x: torch.Tensor) -> torch.Tensor:
    """``x^T`` of float32 CPU ``x [rows, cols]`` as a contiguous ``[cols, rows]``: the
    first operand of :func:`linear` where it is a transposed view (at ``[2048, 256]`` on
    the view the matmul took 825 us, against 436 for ``transpose.c``'s tiled copy and the
    matmul; the second operand goes in as a transposed view at full speed, to the same
    bits). A transposed view of a contiguous tensor is that tensor, returned as it is."""
    if x.T.is_contiguous():
        return x.T
    x = x.contiguous()
    out = x.new_empty(x.shape[1], x.shape[0])
    if x.numel():
        library().transpose(threads(), *x.shape, x.data_ptr(), out.data_ptr())
    return out


def use_weight_gradients(engine: str) -> None:
    """Sum the weights' gradients of this process's fused steps with ``engine``
    (:data:`WEIGHT_GRADIENTS`; ``per-core`` where :func:`has_per_core` only)."""
    if engine not in WEIGHT_GRADIENTS:
        raise ValueError(f"weight_gradients={engine!r} is unknown; choose one of "
                         f"{list(WEIGHT_GRADIENTS)}")  # fmt: skip
    if engine == "per-core" and not has_per_core():
        raise ValueError("weight_gradients='per-core' needs PyTorch's sgemm_, which this "
                         "build does not export; use 'onednn'")  # fmt: skip
    PER_CORE.value = engine == "per-core"


def weight_gradients() -> str:
    """The engine this process's weights' gradients are summed with."""
    return "per-core" if PER_CORE.value else "onednn"


def has_per_core() -> bool:
    """Whether the per-core engine runs here (PyTorch's library exports ``sgemm_``)."""
    return sgemm_address() is not None


def row_products(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``dy^T x`` ``[N, K]`` summed over the rows of ``dy [..., N]`` and ``x [..., K]`` (a
    weight's gradient) by the process's engine (:func:`weight_gradients`): the same
    numbers on any thread count with either."""
    if weight_gradients() == "per-core":
        return per_core_row_products(dy, x)
    return onednn_row_products(dy, x)


def onednn_row_products(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """:func:`row_products` on oneDNN's matmul, in chunks of :data:`ROWS_PER_SUM` rows
    added in order.

    One operand is copied transposed (:func:`transposed`), the other goes in as a
    transposed view: the narrower one is copied, so where ``x`` is (``K < N``, and at least
    :data:`MIN_OUTPUTS` wide) the sum is ``(x^T dy)^T``, its ``[K, N]`` transposed at the
    end. On a 2-core Zen 4 EPYC a 256 x 128 gradient over 4,608 rows (SRAVEN's MLP in)
    took 2.35 ms against 2.72 with ``dy`` copied (``benchmarks/speed/weight_gradients.py``)."""
    dy, x = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    flipped = MIN_OUTPUTS <= x.shape[1] < dy.shape[1]
    first, second = (x, dy) if flipped else (dy, x)
    total = None
    for start in range(0, max(len(dy), 1), ROWS_PER_SUM):
        chunk = slice(start, start + ROWS_PER_SUM)
        part = linear(transposed(first[chunk]), second[chunk].T)
        total = part if total is None else total + part
    return transposed(total) if flipped else total


@cache
def per_core_library() -> ctypes.CDLL:
    lib = load("row_products")
    lib.row_products.argtypes = [ctypes.c_int] * 5 + [ctypes.c_void_p, ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 2  # fmt: skip
    lib.row_products_set_sgemm.argtypes = [ctypes.c_void_p]
    lib.row_products_set_sgemm(sgemm_address())
    return lib


def per_core_row_products(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """:func:`row_products` with the rows cut into :data:`PARTS` parts, each summed by
    MKL's ``sgemm`` on one thread (a core's own rows, where the layer's kernels split them
    in halves over two), the parts' sums added as a fixed tree (``row_products.c``)."""
    dy, x = dy.reshape(-1, dy.shape[-1]).contiguous(), x.reshape(-1, x.shape[-1]).contiguous()
    out = dy.new_empty(dy.shape[1], x.shape[1])
    if len(dy) == 0 or 0 in out.shape:
        return out.zero_()
    work = dy.new_empty((PARTS - 1) * out.numel())
    per_core_library().row_products(
        threads(), PARTS, len(dy), *out.shape, dy.data_ptr(), out.shape[0], x.data_ptr(),
        out.shape[1], out.data_ptr(), work.data_ptr(),
    )  # fmt: skip
    return out


def projects(outputs: int) -> bool:
    """Whether :func:`projection` computes a map to ``outputs`` features here."""
    return ONEDNN and outputs >= MIN_OUTPUTS


def projection_values(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x weight^T + bias`` (``x [..., K]``, ``weight [N, K]``, ``bias [N]`` or None;
    float32 CPU) on oneDNN's matmul."""
    return linear(x.contiguous(), weight.contiguous(), bias)


def projection_backward_values(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, biased: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dweight, dbias)`` of :func:`projection_values` times ``dy``: the weight's
    by :func:`row_products`, the bias's by
    :func:`~latentlens.kernels.bias_add.column_sums` (empty unless ``biased``), the same
    on any thread count."""
    dy = dy.contiguous()
    dx = linear(dy, weight.contiguous().T)
    dbias = column_sums(dy) if biased else dy.new_empty(0)
    return dx, row_products(dy, x.contiguous()), dbias


# The operators (``torch.ops.latentlens``), opaque to a compiled step: inductor would lower
# oneDNN's operator for frozen weights only.
_projection, _projection_backward = operators(
    "projection", projection_values, projection_backward_values
)


@register_fake(_projection)
def _(x, weight, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@register_fake(_projection_backward)
def _(x, weight, dy, biased):
    dbias = dy.new_empty(dy.shape[-1] if biased else 0)
    return x.new_empty(x.shape), weight.new_empty(weight.shape), dbias  # contiguous


def _save(ctx, inputs, output) -> None:
    x, weight, bias = inputs
    ctx.biased = bias is not None
    ctx.save_for_backward(x, weight)


def _backward(ctx, dy):
    x, weight = ctx.saved_tensors
    dx, dweight, dbias = _projection_backward(x, weight, dy, ctx.biased)
    return dx, dweight, dbias if ctx.biased else None


register_autograd(_projection, _backward, setup_context=_save)


def projection(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x weight^T + bias`` (``x [..., K]``, ``weight [N, K]``, ``bias [N]`` or None;
    float32 CPU) on oneDNN's matmul, eager and compiled (an operator compiled code calls),
    its gradients the same on any thread count (:func:`projection_backward_values`)."""
    return _projection(x, weight, bias)

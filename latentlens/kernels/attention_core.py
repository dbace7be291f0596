"""The attention core (scores to z) as one fused CPU kernel, forward and backward.

PyTorch computes the core of a small-head attention as a chain of einsums and
element-wise passes over ``[batch, head, query, key]`` tensors: with Table A1's heads of
2 dimensions, tiny batched matmuls and memory traffic, not arithmetic. The kernel of
``attention_core.c`` walks each (batch element, query) once, keeping its ``[head, key]``
scores and pattern in the L1 cache, and its backward pass recomputes them rather than
storing them. It computes what :class:`~latentlens.models.attention.Attention` does, to
float32 rounding (the sums run in another order), for the softmax, rms (HYLA's) and no
(linear attention's) normalisation, the linear value network and the relu or identity mlp
one, with the causal mask, the relative position bias and attention dropout. A padding
mask, another activation, float64 or a device other than the CPU take PyTorch's path.

q, k and v are read where they lie, with their strides: in self-attention they are
slices of one projection (:func:`fused_self_attention_core`), and its gradient is
written whole, with no copies into or out of separate tensors. Key rows are padded
inside the kernel to a multiple of :data:`LANES` keys, so that every loop over keys runs
in whole vectors; softmax and linear attention with 8 heads or more hold the heads in the
vectors instead (:func:`heads_in_lanes`: no sums across lanes, no padded keys). Batch
elements are split over ``torch.get_num_threads()`` threads (PyTorch's own OpenMP
threads). A call of a training step's size runs a copy of the kernel compiled for its
sizes and options (:func:`kernels_for`), the same numbers faster.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch.library import register_autograd, register_fake

from latentlens.kernels.build import load, operator, slices, threads

NORMALIZATIONS = {"softmax": 0, "rms_head": 1, "none": 2}
VALUE_NETWORKS = {None: 0, "relu": 1, "identity": 2}  # the mlp one's activation; None: linear
LANES = 16  # attention_core.c's block of keys (KEY_BLOCK), whatever its vectors' width


STRIDES = ("q_batch", "q_pos", "q_head", "k_batch", "k_pos", "k_head", "v_batch", "v_pos",
           "v_head")  # fmt: skip
DZ_STRIDES = ("dz_batch", "dz_pos", "dz_head", "dz_elem")  # set by core_backward
# the operators' trailing arguments, in order (core_spec's options)
OPTIONS = ("normalization", "activation", "causal", "query_start", "eps")


class Spec(ctypes.Structure):
    _fields_ = (
        [(name, ctypes.c_int) for name in
         ("B", "Q", "K", "KP", "H", "D", "E", "query_start", "causal", "norm", "vnet")]
        + [("scale", ctypes.c_float), ("eps", ctypes.c_float)]
        + [(name, ctypes.c_long) for name in STRIDES + DZ_STRIDES]
    )  # fmt: skip


def supports(normalization: str, activation: str | None) -> bool:
    """Whether the kernel computes this attention (``activation`` None: linear values)."""
    return normalization in NORMALIZATIONS and activation in VALUE_NETWORKS


# Calls with at least this many (batch, key, head) triples take a library built for their
# sizes and options (:func:`kernels_for`): a 1.5 s build, once per machine and shape, that
# pays in a training run; smaller calls (tests, single examples) take the generic one.
SPECIALISE_FROM = 4096
FIXED = ("D", "E", "H", "K", "causal", "norm", "vnet")


@cache
def library(fixed: tuple[tuple[str, int], ...] = ()) -> ctypes.CDLL:
    """The kernels' library: generic, or built for the sizes and options ``fixed``
    (``(FIXED_<field>, value)`` of :data:`FIXED`'s fields; a ``("LANES", 8 or 16)``
    among them sets its vectors' width, else the C file chooses)."""
    lib = load("attention_core", fixed)
    pointer = ctypes.c_void_p
    lib.attention_forward.argtypes = [ctypes.POINTER(Spec), ctypes.c_int] + [pointer] * 7
    spec_threads_slices = [ctypes.POINTER(Spec), ctypes.c_int, ctypes.c_int]
    lib.attention_backward.argtypes = spec_threads_slices + [pointer] * 11
    lib.threads_used.argtypes = [ctypes.c_int]
    lib.vector_lanes.argtypes = []
    lib.heads_in_lanes.argtypes = [ctypes.POINTER(Spec)]
    return lib


def heads_in_lanes(spec: Spec) -> bool:
    """Whether the kernel holds ``spec``'s heads in its vectors (softmax or no
    normalisation, linear values, 8 heads or more), else its keys."""
    return bool(kernels_for(spec).heads_in_lanes(ctypes.byref(spec)))


def kernels_for(spec: Spec) -> ctypes.CDLL:
    """The library for ``spec``: built for its head widths, heads, keys, mask and
    attention (the compiler unrolls the loops over them: 1.4-2.5x faster at Table A1's
    shapes, the same numbers bit for bit) where the call is large enough, else generic."""
    if spec.B * spec.K * spec.H < SPECIALISE_FROM:
        return library()
    return library(fixed_defines(spec))


def fixed_defines(spec: Spec) -> tuple[tuple[str, int], ...]:
    """The preprocessor defines of a library built for ``spec``'s sizes and options."""
    return defines_of(tuple(getattr(spec, name) for name in FIXED))


def defines_of(values: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    """The preprocessor defines of a library built for the values of :data:`FIXED`'s
    fields, in order."""
    pairs = zip(FIXED, values, strict=True)
    return tuple((f"FIXED_{name.upper()}", value) for name, value in pairs)


def address(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def core_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options) -> Spec:
    """The kernel's description of q ``[batch, query, head, d_head]``, k ``[batch, key,
    head, d_head]`` and v ``[batch, key, head, d_head_v]`` (each contiguous in its last
    dimension) and of ``options`` (normalization, activation, causal, query_start, eps)."""
    batch, queries, heads, d_head = q.shape
    strides = [t.stride()[i] for t in (q, k, v) for i in range(3)]
    return Spec(
        B=batch,
        Q=queries,
        K=k.shape[1],
        KP=-(-k.shape[1] // LANES) * LANES,
        H=heads,
        D=d_head,
        E=v.shape[-1],
        query_start=options["query_start"],
        causal=int(options["causal"]),
        norm=NORMALIZATIONS[options["normalization"]],
        vnet=VALUE_NETWORKS[options["activation"]],
        scale=d_head**-0.5,
        eps=options["eps"],
        **dict(zip(STRIDES, strides, strict=True)),
    )


def padded(x: torch.Tensor | None) -> torch.Tensor | None:
    """x ``[..., key]``, contiguous, with zeros to a multiple of :data:`LANES` keys (the
    kernel's rows). Padded before the kernel is called, so that autograd slices the
    bias's gradient back and the padding is done once a step."""
    if x is None:
        return None
    keys = -(-x.shape[-1] // LANES) * LANES
    return torch.nn.functional.pad(x, (0, keys - x.shape[-1])).contiguous()


def row_shape(batch: int, queries: int, heads: int, softmax: bool) -> tuple[int, ...]:
    """The shape of the rows the forward pass keeps for the backward: softmax's row
    maximum and inverse sum ``[batch, query, head, 2]``; nothing for the others."""
    return (batch, queries, heads, 2) if softmax else (0,)


def core_forward(spec: Spec, q, k, v, bias, drop) -> tuple[torch.Tensor, torch.Tensor]:
    """z ``[batch, query, head, d_head_v]`` and the rows softmax's backward reuses (bias
    and drop :func:`padded`)."""
    for name, extra in (("bias", bias), ("drop", drop)):
        if extra is not None and (extra.shape[-1] != spec.KP or not extra.is_contiguous()):
            raise ValueError(
                f"the fused core's {name} must come padded to {spec.KP} keys and contiguous "
                f"(got shape {tuple(extra.shape)}); pass it through padded()"
            )
    z = q.new_empty(spec.B, spec.Q, spec.H, spec.E)
    rows = q.new_empty(row_shape(spec.B, spec.Q, spec.H, spec.norm == NORMALIZATIONS["softmax"]))
    pointers = [address(t) for t in (q, k, v, bias, drop, z, rows)]
    kernels_for(spec).attention_forward(ctypes.byref(spec), threads(), *pointers)
    return z, rows


def core_backward(spec: Spec, saved, dz, dq, dk, dv, bias_grad: bool) -> torch.Tensor | None:
    """Writes the gradients into dq, dk and dv (laid out as q, k and v); the bias's
    gradient, where ``bias_grad``. dz is read where it lies, with any strides."""
    q, k, v, bias, drop, rows = saved
    count = slices(spec.B)
    dbias = None  # one [head, query, padded key] sum per slice of the batch
    if bias is not None and bias_grad:
        dbias = bias.new_zeros(count, *bias.shape)
    spec = Spec.from_buffer_copy(spec)  # dz read where it lies, with its strides
    for name, stride in zip(DZ_STRIDES, dz.stride(), strict=True):
        setattr(spec, name, stride)
    pointers = [address(t) for t in (q, k, v, bias, drop, rows, dz, dq, dk, dv, dbias)]
    kernels_for(spec).attention_backward(ctypes.byref(spec), threads(), count, *pointers)
    return None if dbias is None else dbias[0]  # the kernel added the slices into it


class FusedAttentionCore(torch.autograd.Function):
    """``z [batch, query, head, d_head_v]`` from q ``[batch, query, head, d_head]``, k
    ``[batch, key, head, d_head]``, v ``[batch, key, head, d_head_v]``, the relative
    position bias ``[head, query, key]`` (or None) and the dropout factors ``[query, key]``
    (keep / (1 - p), or None), both :func:`padded`."""

    @staticmethod
    def forward(ctx, q, k, v, bias, drop, options: dict):  # type: ignore[override]
        q, k, v = (t.contiguous() for t in (q, k, v))
        ctx.spec = core_spec(q, k, v, **options)
        z, rows = core_forward(ctx.spec, q, k, v, bias, drop)
        ctx.save_for_backward(q, k, v, bias, drop, rows)
        return z

    @staticmethod
    def backward(ctx, dz):  # type: ignore[override]
        q, k, v = ctx.saved_tensors[:3]
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        dbias = core_backward(ctx.spec, ctx.saved_tensors, dz, dq, dk, dv, ctx.needs_input_grad[3])
        return dq, dk, dv, dbias, None, None


def unpack(packed: torch.Tensor, widths: tuple[int, int], query_start: int):
    """q (from ``query_start`` on), k and v: views of a self-attention's projection
    ``[batch, pos, head, d_q + d_k + d_v]`` (``widths``: d_q, d_k)."""
    d_q, d_k = widths
    return packed[:, query_start:, :, :d_q], packed[..., d_q : d_q + d_k], packed[..., d_q + d_k :]


def packed_core(packed: torch.Tensor, d_q: int, d_k: int, *options):
    """``packed`` contiguous, its q, k and v views and the kernel's :class:`Spec` of them
    (``options``: normalization, activation, causal, query_start, eps)."""
    packed = packed.contiguous()
    named = dict(zip(OPTIONS, options, strict=True))
    q, k, v = unpack(packed, (d_q, d_k), named["query_start"])
    return packed, (q, k, v), core_spec(q, k, v, **named)


# Inductor's graph cache keys a compiled step on the operators' names, not their Python:
# a change to what an operator returns (its fake function) needs a new name, or a cached
# step built on the old one fails its size checks.
@operator("self_attention_core")
def self_attention_core(
    packed: torch.Tensor,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    d_q: int,
    d_k: int,
    normalization: str,
    activation: str | None,
    causal: bool,
    query_start: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """z ``[batch, pos - query_start, head, d_v]`` and the rows of :func:`row_shape` of
    the fused core on q, k and v packed in one projection ``[batch, pos, head, d_q + d_k +
    d_v]``, read in place (bias and drop :func:`padded`). A PyTorch operator
    (``torch.ops.latentlens``), so that torch.compile calls the kernel inside a compiled
    step; its gradient is :func:`self_attention_core_backward`'s, packed the same way."""
    packed, (q, k, v), spec = packed_core(packed, d_q, d_k, normalization, activation, causal,
                                          query_start, eps)  # fmt: skip
    return core_forward(spec, q, k, v, bias, drop)


@register_fake(self_attention_core)
def _(packed, bias, drop, d_q, d_k, normalization, activation, causal, query_start, eps):
    batch, positions, heads, width = packed.shape
    queries = positions - query_start
    rows = row_shape(batch, queries, heads, normalization == "softmax")
    return packed.new_empty(batch, queries, heads, width - d_q - d_k), packed.new_empty(rows)


@operator("self_attention_core_backward")
def self_attention_core_backward(
    packed: torch.Tensor,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    rows: torch.Tensor,
    dz: torch.Tensor,
    d_q: int,
    d_k: int,
    normalization: str,
    activation: str | None,
    causal: bool,
    query_start: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`self_attention_core` with respect to ``packed`` (packed
    alike) and ``bias`` (empty where there is none)."""
    packed, (q, k, v), spec = packed_core(packed, d_q, d_k, normalization, activation, causal,
                                          query_start, eps)  # fmt: skip
    # Positions before the queries ask nothing of q: their gradient is left zero (one
    # memset of the whole, 6x faster at Table A1's sizes than zeroing their strided q part).
    d_packed = torch.zeros_like(packed) if query_start else torch.empty_like(packed)
    dq, dk, dv = unpack(d_packed, (d_q, d_k), query_start)
    saved = (q, k, v, bias, drop, rows)
    dbias = core_backward(spec, saved, dz, dq, dk, dv, bias is not None)
    return d_packed, packed.new_empty(0) if dbias is None else dbias


@register_fake(self_attention_core_backward)
def _(packed, bias, drop, rows, dz, d_q, d_k, normalization, activation, causal, query_start,
      eps):  # fmt: skip
    return torch.empty_like(packed), packed.new_empty(0) if bias is None else torch.empty_like(bias)


def _save_for_backward(ctx, inputs, output) -> None:
    packed, bias, drop, *options = inputs
    ctx.save_for_backward(packed, bias, drop, output[1])
    ctx.options = options


def _backward(ctx, dz, d_rows):
    packed, bias, drop, rows = ctx.saved_tensors
    d_packed, dbias = self_attention_core_backward(packed, bias, drop, rows, dz, *ctx.options)
    return (d_packed, None if bias is None else dbias) + (None,) * 8


register_autograd(self_attention_core, _backward, setup_context=_save_for_backward)


def query_core(q: torch.Tensor, kv: torch.Tensor, d_k: int, *options):
    """q and ``kv`` contiguous, k and v (views of kv) and the kernel's :class:`Spec` of
    them (``options``: normalization, activation, causal, query_start, eps)."""
    q, kv = q.contiguous(), kv.contiguous()
    k, v = kv[..., :d_k], kv[..., d_k:]
    return q, kv, (k, v), core_spec(q, k, v, **dict(zip(OPTIONS, options, strict=True)))


@operator("query_attention_core")
def query_attention_core(
    q: torch.Tensor,
    kv: torch.Tensor,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    d_k: int,
    normalization: str,
    activation: str | None,
    causal: bool,
    query_start: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`self_attention_core` with the queries apart: q ``[batch, query, head, d_q]``
    (positions ``query_start`` on) and k and v packed in ``kv`` ``[batch, key, head, d_k
    + d_v]``, read in place, so that a last block projects q at its queries alone."""
    q, kv, (k, v), spec = query_core(q, kv, d_k, normalization, activation, causal,
                                     query_start, eps)  # fmt: skip
    return core_forward(spec, q, k, v, bias, drop)


@register_fake(query_attention_core)
def _(q, kv, bias, drop, d_k, normalization, activation, causal, query_start, eps):
    batch, queries, heads, _ = q.shape
    rows = row_shape(batch, queries, heads, normalization == "softmax")
    return q.new_empty(batch, queries, heads, kv.shape[-1] - d_k), q.new_empty(rows)


@operator("query_attention_core_backward")
def query_attention_core_backward(
    q: torch.Tensor,
    kv: torch.Tensor,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    rows: torch.Tensor,
    dz: torch.Tensor,
    d_k: int,
    normalization: str,
    activation: str | None,
    causal: bool,
    query_start: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`query_attention_core` with respect to q, ``kv`` (packed
    alike, every entry written) and ``bias`` (empty where there is none)."""
    q, kv, (k, v), spec = query_core(q, kv, d_k, normalization, activation, causal,
                                     query_start, eps)  # fmt: skip
    dq, d_kv = torch.empty_like(q), torch.empty_like(kv)
    saved = (q, k, v, bias, drop, rows)
    dbias = core_backward(spec, saved, dz, dq, d_kv[..., :d_k], d_kv[..., d_k:], bias is not None)
    return dq, d_kv, q.new_empty(0) if dbias is None else dbias


@register_fake(query_attention_core_backward)
def _(q, kv, bias, drop, rows, dz, d_k, normalization, activation, causal, query_start, eps):
    dbias = q.new_empty(0) if bias is None else torch.empty_like(bias)
    return torch.empty_like(q), torch.empty_like(kv), dbias


def _save_query_core(ctx, inputs, output) -> None:
    q, kv, bias, drop, *options = inputs
    ctx.save_for_backward(q, kv, bias, drop, output[1])
    ctx.options = options


def _query_core_backward(ctx, dz, d_rows):
    q, kv, bias, drop, rows = ctx.saved_tensors
    dq, d_kv, dbias = query_attention_core_backward(q, kv, bias, drop, rows, dz, *ctx.options)
    return (dq, d_kv, None if bias is None else dbias) + (None,) * 7


register_autograd(query_attention_core, _query_core_backward, setup_context=_save_query_core)


def fused_attention_core(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    *,
    normalization: str,
    activation: str | None,
    causal: bool,
    query_start: int,
    eps: float,
) -> torch.Tensor:
    """The fused core's z ``[batch, query, head, d_head_v]`` (see :class:`FusedAttentionCore`);
    scores are scaled by ``d_head ** -0.5``."""
    options = dict(normalization=normalization, activation=activation, causal=causal,
                   query_start=query_start, eps=eps)  # fmt: skip
    return FusedAttentionCore.apply(q, k, v, padded(bias), padded(drop), options)


def fused_self_attention_core(
    packed: torch.Tensor,
    widths: tuple[int, int],
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    **options,
) -> torch.Tensor:
    """z ``[batch, pos - query_start, head, d_head_v]`` of self-attention's q, k and v
    packed in ``packed`` ``[batch, pos, head, d_q + d_k + d_v]`` (``widths``: d_q, d_k;
    see :func:`self_attention_core`); ``options`` as :func:`fused_attention_core`'s."""
    z, _ = self_attention_core(packed, padded(bias), padded(drop), *widths, **options)
    return z


def fused_query_attention_core(
    q: torch.Tensor,
    kv: torch.Tensor,
    d_k: int,
    bias: torch.Tensor | None,
    drop: torch.Tensor | None,
    **options,
) -> torch.Tensor:
    """z ``[batch, query, head, d_head_v]`` of queries q ``[batch, query, head, d_q]`` on
    the keys and values packed in ``kv`` ``[batch, key, head, d_k + d_v]`` (see
    :func:`query_attention_core`); ``options`` as :func:`fused_attention_core`'s."""
    z, _ = query_attention_core(q, kv, padded(bias), padded(drop), d_k, **options)
    return z

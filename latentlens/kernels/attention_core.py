"""The attention core (scores to z) as one fused CPU kernel, forward and backward.

PyTorch computes the core of a small-head attention as a chain of einsums and
element-wise passes over ``[batch, head, query, key]`` tensors: with Table A1's heads of
2 dimensions, tiny batched matmuls and memory traffic, not arithmetic. The kernel of
``attention_core.c`` walks each (batch element, query) once, keeping its ``[head, key]``
scores and pattern in the L1 cache, and its backward pass recomputes them rather than
storing them. It computes what :class:`~latentlens.models.attention.Attention` does, to
float32 rounding (the sums run in another order), for the rms (HYLA's) and no (linear
attention's) normalisation, the linear value network and the relu or identity mlp one,
with the causal mask, the relative position bias and attention dropout. Softmax, a
padding mask, another activation, float64 or a device other than the CPU take PyTorch's
path: a fused softmax measured no faster (Table A1's fuzzy logic) or slower (SRAVEN).

Batch elements are split over ``torch.get_num_threads()`` threads (PyTorch's own OpenMP
threads).
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from latentlens.kernels.build import load, threads

NORMALIZATIONS = {"rms_head": 0, "none": 1}  # softmax: see attention_core.c
VALUE_NETWORKS = {None: 0, "relu": 1, "identity": 2}  # the mlp one's activation; None: linear


class Spec(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int)
        for name in ("B", "Q", "K", "H", "D", "E", "query_start", "causal", "norm", "vnet")
    ] + [("scale", ctypes.c_float), ("eps", ctypes.c_float)]


def supports(normalization: str, activation: str | None) -> bool:
    """Whether the kernel computes this attention (``activation`` None: linear values)."""
    return normalization in NORMALIZATIONS and activation in VALUE_NETWORKS


@cache
def library() -> ctypes.CDLL:
    lib = load("attention_core")
    pointer = ctypes.c_void_p
    lib.attention_forward.argtypes = [ctypes.POINTER(Spec), ctypes.c_int] + [pointer] * 6
    lib.attention_backward.argtypes = [ctypes.POINTER(Spec), ctypes.c_int] + [pointer] * 10
    return lib


def address(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


class FusedAttentionCore(torch.autograd.Function):
    """``z [batch, query, head, d_head_v]`` from q ``[batch, query, head, d_head]``, k
    ``[batch, key, head, d_head]``, v ``[batch, key, head, d_head_v]``, the relative
    position bias ``[head, query, key]`` (or None) and the dropout factors ``[query, key]``
    (keep / (1 - p), or None)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, drop, spec: Spec):  # type: ignore[override]
        # keys contiguous in k and v: [batch, head, d, key]
        q = q.contiguous()
        kt, vt = k.permute(0, 2, 3, 1).contiguous(), v.permute(0, 2, 3, 1).contiguous()
        bias = None if bias is None else bias.contiguous()
        drop = None if drop is None else drop.contiguous()
        z = q.new_empty(spec.B, spec.Q, spec.H, spec.E)
        pointers = [address(t) for t in (q, kt, vt, bias, drop, z)]
        library().attention_forward(ctypes.byref(spec), threads(), *pointers)
        ctx.save_for_backward(q, kt, vt, bias, drop)
        ctx.spec = spec
        return z

    @staticmethod
    def backward(ctx, dz):  # type: ignore[override]
        q, kt, vt, bias, drop = ctx.saved_tensors
        spec: Spec = ctx.spec
        dz = dz.contiguous()
        dq = torch.empty_like(q)
        dkt, dvt = torch.zeros_like(kt), torch.zeros_like(vt)
        count = threads()
        dbias = None  # one [head, query, key] sum per thread's slice of the batch
        if bias is not None and ctx.needs_input_grad[3]:
            dbias = bias.new_zeros(count, *bias.shape)
        pointers = [address(t) for t in (q, kt, vt, bias, drop, dz, dq, dkt, dvt, dbias)]
        library().attention_backward(ctypes.byref(spec), count, *pointers)
        dk, dv = dkt.permute(0, 3, 1, 2), dvt.permute(0, 3, 1, 2)
        return dq, dk, dv, None if dbias is None else dbias.sum(0), None, None


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
    batch, queries, heads, d_head = q.shape
    spec = Spec(
        B=batch,
        Q=queries,
        K=k.shape[1],
        H=heads,
        D=d_head,
        E=v.shape[-1],
        query_start=query_start,
        causal=int(causal),
        norm=NORMALIZATIONS[normalization],
        vnet=VALUE_NETWORKS[activation],
        scale=d_head**-0.5,
        eps=eps,
    )
    return FusedAttentionCore.apply(q, k, v, bias, drop, spec)

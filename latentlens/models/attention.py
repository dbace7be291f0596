"""The hooked attention family of docs/methods/attention.md.

One module, two switches (see :class:`~latentlens.models.config.AttentionConfig`):

- score normalisation a = norm(s): ``softmax`` over keys, ``rms_head`` (each (q, k) score
  vector divided by its RMS across heads) or ``none`` (linear attention);
- value network: ``linear`` (standard MHA, z[q,h] = sum_k a[h,q,k] v_h[k]) or ``mlp``
  (HYLA: u[q,k] = sum_h a[h,q,k] v_h[k], z[q,h] = sum_k a[h,q,k] phi(u[q,k])).

In both cases out = W^O concat_h z + b^O. The latent code of a query-key pair is the
vector a[:, q, k] over heads, exposed at ``hook_pattern``.

Hook points (shapes):

- ``hook_q``, ``hook_k``: ``[batch, pos, head, d_head]``; ``hook_v``:
  ``[batch, key_pos, head, d_head_v]``; ``hook_z``: ``[batch, query_pos, head, d_head_v]``
- ``hook_attn_scores``: ``[batch, head, query, key]``, scaled scores plus the relative
  position bias, with masked pairs already holding the normalisation's fill value (the
  dtype's most negative number for softmax, 0 otherwise)
- ``hook_pattern``: ``[batch, head, query, key]``, the normalised weights a (attention
  dropout, when training, is applied after this hook)
- ``hook_vnet_pre``, ``hook_vnet_post`` (mlp value network only):
  ``[batch, query, key, d_head_v]``, u before and after the activation
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from latentlens.kernels import kernels_apply
from latentlens.kernels.attention_core import (
    fused_attention_core,
    fused_query_attention_core,
    fused_self_attention_core,
    supports,
)
from latentlens.kernels.bias_add import fused_bias_add
from latentlens.kernels.linear import projection, projects
from latentlens.models.config import AttentionConfig
from latentlens.models.hooked import HookPoint, any_hooked
from latentlens.models.init import embedding_normal_, lecun_normal_
from latentlens.models.position import RelativePositionBias
from latentlens.models.softmax import softmax
from latentlens.models.validation import check_input

ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "identity": lambda x: x,
}


class Attention(nn.Module):
    """Multi-head attention of any variant of the family, self- or cross-attention.

    Parameters follow TransformerLens's layout: ``W_Q``, ``W_K`` ``[head, d_in, d_head]``,
    ``W_V`` ``[head, d_in, d_head_v]``, ``W_O`` ``[head, d_head_v, d_model]``, biases
    ``b_Q``, ``b_K`` ``[head, d_head]``, ``b_V`` ``[head, d_head_v]``, ``b_O`` ``[d_model]``;
    ``rel_pos.table`` ``[head, num_buckets]`` when relative positions are on.
    """

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, d, dv = cfg.n_heads, cfg.d_head, cfg.d_head_v
        self.W_Q = nn.Parameter(torch.empty(h, cfg.d_model, d))
        self.W_K = nn.Parameter(torch.empty(h, cfg.kv_width, d))
        self.W_V = nn.Parameter(torch.empty(h, cfg.kv_width, dv))
        self.W_O = nn.Parameter(torch.empty(h, dv, cfg.d_model))
        self.b_Q = nn.Parameter(torch.zeros(h, d))
        self.b_K = nn.Parameter(torch.zeros(h, d))
        self.b_V = nn.Parameter(torch.zeros(h, dv))
        self.b_O = nn.Parameter(torch.zeros(cfg.d_model))
        self.rel_pos = (
            RelativePositionBias(h, cfg.num_buckets, cfg.max_distance, cfg.bidirectional_position)
            if cfg.relative_position
            else None
        )
        self.activation = (
            ACTIVATION_FUNCTIONS[cfg.activation] if cfg.value_network == "mlp" else None
        )
        # Set by latentlens.models.use_fused_kernels: compute the core with the fused CPU
        # kernel where it applies (the same attention to float32 rounding).
        self.fused = False
        self.fused_core_supported = supports(cfg.normalization, cfg.activation)
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        if cfg.value_network == "mlp":
            self.hook_vnet_pre = HookPoint()
            self.hook_vnet_post = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Flax's defaults, as in the official code: LeCun-normal kernels (truncated), zero
        biases, and the relative-position table ``[head, bucket]`` untruncated normal with
        variance ``1 / num_buckets`` (Flax's ``default_embed_init``)."""
        for weight in (self.W_Q, self.W_K, self.W_V):
            lecun_normal_(weight, fan_in=weight.shape[1])
        lecun_normal_(self.W_O, fan_in=self.W_O.shape[0] * self.W_O.shape[1])
        for bias in (self.b_Q, self.b_K, self.b_V, self.b_O):
            nn.init.zeros_(bias)
        if self.rel_pos is not None:
            embedding_normal_(self.rel_pos.table, fan_in=self.cfg.num_buckets)

    def forward(
        self,
        x: torch.Tensor,
        kv: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        query_start: int = 0,
        unbiased: bool = False,
    ) -> torch.Tensor:
        """Attend from ``x`` to ``kv`` (``x`` itself when ``None``).

        Args:
            x: queries' stream ``[batch, query_pos, d_model]``.
            kv: keys' and values' stream ``[batch, key_pos, d_kv_input]``; ``None`` for
                self-attention.
            key_mask: ``[batch, key_pos]`` bool, False for keys to ignore (padding).
            query_start: position of the first query among the keys, for the relative
                position bias and the causal mask. In self-attention (``kv`` None) the
                queries are then ``x[:, query_start:]``, answered by every position of
                ``x``: ``attn(stream, query_start=s)`` equals ``attn(stream)[:, s:]``, and
                so does ``attn(stream[:, s:], kv=stream, query_start=s)``.
            unbiased: leave out the output bias ``b_O`` (a fused residual stream adds it
                in its layer norm's pass, and sums its gradient there).

        Returns:
            ``[batch, query_pos, d_model]`` (``query_pos - query_start`` positions in
            self-attention).
        """
        cfg = self.cfg
        check_input("x", x, (None, None, cfg.d_model), "[batch, query_pos, d_model]")
        if kv is None:
            if cfg.d_kv_input is not None:
                raise ValueError(
                    "this attention layer is cross-attention (d_kv_input="
                    f"{cfg.d_kv_input}): pass kv of shape [batch, key_pos, {cfg.d_kv_input}]"
                )
            if not 0 <= query_start < x.shape[1]:
                raise ValueError(
                    f"query_start={query_start} leaves no query of the {x.shape[1]} "
                    f"positions; it must lie in [0, {x.shape[1] - 1}]"
                )
            if key_mask is None and self._fused_core_applies(x, packed=True):
                return self._output(self._fused_self_attention(x, query_start), unbiased)
            q, k, v = self._project(x, x, query_start)
        else:
            check_input("kv", kv, (x.shape[0], None, cfg.kv_width), "[batch, key_pos, d_kv]")
            if query_start and not 0 < query_start <= kv.shape[1] - x.shape[1]:
                raise ValueError(
                    f"query_start={query_start} puts the {x.shape[1]} queries outside the "
                    f"{kv.shape[1]} key positions; it must lie in "
                    f"[0, {kv.shape[1] - x.shape[1]}]"
                )
            if key_mask is None and self._fused_core_applies(x, packed=True):
                return self._output(self._fused_query_attention(x, kv, query_start), unbiased)
            q, k, v = self._project(x, kv)
        batch, q_len, k_len = q.shape[0], q.shape[1], k.shape[1]
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if key_mask is None and self._fused_core_applies(q):
            bias, drop = self._fused_core_extras(q_len, k_len, x, query_start)
            z = fused_attention_core(q, k, v, bias, drop, **self._fused_core_options(query_start))
            return self._output(z, unbiased)

        # Scaling q ([.., d_head] per head) costs less than scaling the [.., key] scores.
        scores = torch.einsum("bqhd,bkhd->bhqk", q * cfg.d_head**-0.5, k)
        if self.rel_pos is not None:
            scores = scores + self.rel_pos(q_len, k_len, query_start)
        mask = self._mask(batch, q_len, k_len, key_mask, x.device, query_start)
        if mask is not None:
            fill = torch.finfo(scores.dtype).min if cfg.normalization == "softmax" else 0.0
            scores = scores.masked_fill(~mask, fill)
        scores = self.hook_attn_scores(scores)

        pattern = self.hook_pattern(self._normalize(scores))
        drop = self._dropout_factors(q_len, k_len, x.device, pattern.dtype)
        if drop is not None:
            pattern = pattern * drop

        if self.activation is None:
            z = torch.einsum("bhqk,bkhd->bqhd", pattern, v)
        else:
            mixed = self.hook_vnet_pre(torch.einsum("bhqk,bkhd->bqkd", pattern, v))
            mixed = self.hook_vnet_post(self.activation(mixed))
            z = torch.einsum("bhqk,bqkd->bqhd", pattern, mixed)
        return self._output(z, unbiased)

    def _output(self, z: torch.Tensor, unbiased: bool = False) -> torch.Tensor:
        """``W^O concat_h z + b^O`` ``[batch, query_pos, d_model]`` of z ``[batch,
        query_pos, head, d_head_v]`` (through ``hook_z``); without ``b^O`` if
        ``unbiased``."""
        z = self.hook_z(z)
        if self.fused and kernels_apply(z, compiles=True) and projects(self.cfg.d_model):
            matrix = self.W_O.flatten(0, 1).T  # [d_model, head x d_head_v]
            return projection(z.flatten(2), matrix, None if unbiased else self.b_O)
        out = torch.einsum("bqhd,hdm->bqm", z, self.W_O)
        return out if unbiased else out + self.b_O

    def _dropout_factors(
        self, q_len: int, k_len: int, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """One dropout mask ``[1, 1, query, key]`` shared by the batch and all heads, as
        the factors keep / (1 - p) the pattern is multiplied by; None when not dropping."""
        if not (self.training and self.cfg.dropout > 0):
            return None
        keep = torch.rand(1, 1, q_len, k_len, device=device) >= self.cfg.dropout
        return keep.to(dtype) / (1.0 - self.cfg.dropout)

    def _fused_core_applies(self, q: torch.Tensor, packed: bool = False) -> bool:
        """Whether this pass takes the fused CPU kernel (:attr:`fused` set, see
        :mod:`latentlens.kernels.attention_core`): an attention the kernel computes, no hook
        on the core's intermediates (nor, for the ``packed`` self-attention path that never
        forms q, k and v apart, on them), and a tensor the kernels run on
        (:func:`~latentlens.kernels.kernels_apply`; the packed path's operator also inside
        torch.compile)."""
        inner = (self.hook_attn_scores, self.hook_pattern)
        if self.cfg.value_network == "mlp":
            inner += (self.hook_vnet_pre, self.hook_vnet_post)
        if packed:
            inner += (self.hook_q, self.hook_k, self.hook_v)
        return (
            self.fused
            and self.fused_core_supported
            and not any_hooked(inner)
            and kernels_apply(q, compiles=packed)
        )

    def _fused_self_attention(self, x: torch.Tensor, query_start: int) -> torch.Tensor:
        """The fused core's z ``[batch, query_pos, head, d_head_v]`` of self-attention on
        ``x``, reading q, k and v in place in their joint projection."""
        weights, biases = [self.W_Q, self.W_K, self.W_V], [self.b_Q, self.b_K, self.b_V]
        packed = self._joint_projection(x, weights, biases, fused=True)
        q_len, k_len = x.shape[1] - query_start, x.shape[1]
        bias, drop = self._fused_core_extras(q_len, k_len, x, query_start)
        widths = (self.W_Q.shape[-1], self.W_K.shape[-1])
        options = self._fused_core_options(query_start)
        return fused_self_attention_core(packed, widths, bias, drop, **options)

    def _fused_query_attention(
        self, x: torch.Tensor, kv: torch.Tensor, query_start: int
    ) -> torch.Tensor:
        """The fused core's z ``[batch, query_pos, head, d_head_v]`` of queries ``x``
        attending to ``kv``: q projected at the queries alone, k and v read in place in
        their joint projection."""
        q = self._queries(x, fused=True)
        weights, biases = [self.W_K, self.W_V], [self.b_K, self.b_V]
        packed = self._joint_projection(kv, weights, biases, fused=True)
        bias, drop = self._fused_core_extras(x.shape[1], kv.shape[1], x, query_start)
        options = self._fused_core_options(query_start)
        return fused_query_attention_core(q, packed, self.W_K.shape[-1], bias, drop, **options)

    def _fused_core_extras(
        self, q_len: int, k_len: int, x: torch.Tensor, query_start: int
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The fused core's relative position bias ``[head, query, key]`` and dropout
        factors ``[query, key]`` (each None where the layer has none)."""
        bias = None if self.rel_pos is None else self.rel_pos(q_len, k_len, query_start)
        drop = self._dropout_factors(q_len, k_len, x.device, x.dtype)
        return bias, None if drop is None else drop[0, 0]

    def _fused_core_options(self, query_start: int) -> dict:
        cfg = self.cfg
        return dict(normalization=cfg.normalization, activation=cfg.activation,
                    causal=cfg.causal, query_start=query_start, eps=cfg.rms_eps)  # fmt: skip

    def _project(
        self, x: torch.Tensor, kv: torch.Tensor, query_start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q ``[batch, query_pos, head, d_head]``, k and v ``[batch, key_pos, head, d]``;
        in self-attention q holds ``x``'s positions from ``query_start`` on.

        Projections of the same stream run as one matmul on their concatenated weights (q,
        k and v in self-attention, where the queries of a trailing slice are projected with
        the keys and sliced after, one matmul being cheaper than a second launch; k and v
        in cross-attention): fewer, wider kernels, each output element the same dot
        product (up to float summation order). Each result is its own contiguous tensor,
        as a separate projection's would be.
        """
        weights, biases = [self.W_K, self.W_V], [self.b_K, self.b_V]
        if kv is x:
            weights, biases = [self.W_Q, *weights], [self.b_Q, *biases]
        fused = self.fused and kernels_apply(kv, compiles=True)  # as the packed path sums
        joint = self._joint_projection(kv, weights, biases, fused)
        parts = joint.split([w.shape[-1] for w in weights], -1)
        if kv is x:
            q, k, v = parts[0][:, query_start:], parts[1], parts[2]
            return q.contiguous(), k.contiguous(), v.contiguous()
        parts = [t.contiguous() for t in parts]
        return self._queries(x, fused), parts[0], parts[1]

    def _queries(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        """q ``[batch, query_pos, head, d_head]`` of the queries' stream ``x`` alone (where
        the keys and values come from another stream); ``fused``: as
        :meth:`_joint_projection`'s."""
        return self._joint_projection(x, [self.W_Q], [self.b_Q], fused)

    @staticmethod
    def _joint_projection(
        stream: torch.Tensor,
        weights: list[torch.Tensor],
        biases: list[torch.Tensor],
        fused: bool = False,
    ) -> torch.Tensor:
        """``stream`` ``[batch, pos, d]`` through several projections at once: ``[batch,
        pos, head, sum of their widths]``, each head's outputs side by side. ``fused`` (the
        fused kernels' path): on oneDNN's matmul where it runs
        (:func:`~latentlens.kernels.linear.projection`), else PyTorch's with the biases'
        gradients summed in fixed slices
        (:func:`~latentlens.kernels.bias_add.fused_bias_add`): the same on any thread
        count."""
        weight, bias = torch.cat(weights, -1), torch.cat(biases, -1)  # [h, d, w], [h, w]
        heads, _, width = weight.shape
        if fused and projects(heads * width):
            matrix = weight.transpose(1, 2).reshape(heads * width, -1)  # [h w, d]
            flat = projection(stream, matrix, bias.reshape(-1))
            return flat.view(*stream.shape[:-1], heads, width)
        add = fused_bias_add if fused else torch.add
        return add(torch.einsum("bpm,hmd->bphd", stream, weight), bias)

    def _mask(
        self,
        batch: int,
        q_len: int,
        k_len: int,
        key_mask: torch.Tensor | None,
        device: torch.device,
        query_start: int,
    ) -> torch.Tensor | None:
        """Bool mask ``[batch | 1, 1, query, key]``, True where the query may attend."""
        mask = None
        if self.cfg.causal:
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
            mask = mask.tril(diagonal=query_start)[None, None]
        if key_mask is not None:
            check_input("key_mask", key_mask, (batch, k_len), "[batch, key_pos]")
            if key_mask.dtype != torch.bool:
                raise ValueError(
                    f"key_mask must be a bool tensor (True = attend), got dtype {key_mask.dtype}"
                )
            padding = key_mask[:, None, None, :]
            mask = padding if mask is None else mask & padding
        return mask

    def _normalize(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention weights a ``[batch, head, query, key]`` from masked scores."""
        norm = self.cfg.normalization
        if norm == "softmax":
            return softmax(scores)
        if norm == "rms_head":
            mean_square = scores.square().mean(dim=1, keepdim=True)
            return scores * torch.rsqrt(mean_square + self.cfg.rms_eps)
        return scores

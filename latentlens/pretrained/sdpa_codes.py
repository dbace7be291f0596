"""Latent codes of chosen query-key pairs while a Hugging Face model runs its own fast
attention (SDPA), without the full attention pattern.

``output_attentions=True`` needs the eager attention and returns every layer's
``[batch, head, query, key]`` weights: memory quadratic in the sequence, for codes of a
few pairs. Here the model runs PyTorch's ``scaled_dot_product_attention`` for its output,
as it would without latentlens, and an attention function registered with transformers'
``AttentionInterface`` also computes, for each requested pair (b, q, k) and head h,

    a(h, q, k) = exp(s_hqk − logsumexp_k' s_hqk'),  s_hqk = scaling · q_h · k_g(h) + mask

from the layer's own (rotated) queries and keys: only the requested query rows' scores,
``[rows, head, keys]``, never ``[query, key]`` for every query. Grouped-query attention
(head h reads key head h // (heads / key heads)) and padding or causal masks are those the
model gives its SDPA call. Equal to eager ``output_attentions`` to float32 rounding
(tests/pretrained/test_sdpa_codes.py, and on SmolLM2 and MiniLM in
tests/pretrained/test_real_weights.py); benchmarks/real_models/sdpa_codes_speed.py measures both.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

ATTENTION_NAME = "latentlens_pair_codes"


@dataclass
class _Request:
    """Rows ``[R]`` (batch index, query index) holding the pairs, each pair's row ``[P]``
    and key ``[P]``; ``codes`` collects ``[P, head]`` per attention call, in layer order."""

    batch: torch.Tensor
    query: torch.Tensor
    row_of_pair: torch.Tensor
    key: torch.Tensor
    codes: list[torch.Tensor] = field(default_factory=list)


_ACTIVE: ContextVar[_Request | None] = ContextVar("latentlens_pair_request", default=None)


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, plus the requested pairs' codes when a request is
    active. ``query`` ``[batch, head, query, d]``, ``key`` ``[batch, key head, key, d]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: PLC0415

    request = _ACTIVE.get()
    if request is not None:
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        causal = bool(causal and attention_mask is None and query.shape[2] > 1)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        request.codes.append(_pair_codes(query, key, attention_mask, scale, causal, request))
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
        is_causal=is_causal, **kwargs,
    )  # fmt: skip


def _pair_codes(
    query: torch.Tensor,
    key: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    causal: bool,
    request: _Request,
) -> torch.Tensor:
    """``[P, head]`` codes of the request's pairs, one batch element at a time (its rows'
    scores against its keys: ``[rows, key head, group, keys]``, float32)."""
    heads, key_heads = query.shape[1], key.shape[1]
    if heads % key_heads:
        raise ValueError(f"{heads} query heads cannot share {key_heads} key heads evenly")
    group = heads // key_heads
    codes = torch.empty(len(request.row_of_pair), heads, dtype=torch.float32)
    positions = torch.arange(key.shape[2], device=key.device)
    local_index = torch.full((len(request.batch),), -1, dtype=torch.long)
    for b in request.batch.unique().tolist():
        rows = (request.batch == b).nonzero().flatten()
        local_index[rows] = torch.arange(len(rows))
        queries = request.query[rows].to(query.device)
        q = query[b, :, queries].float().transpose(0, 1)  # [rows, head, d]
        q = q.reshape(len(rows), key_heads, group, -1)
        scores = torch.einsum("rgjd,gsd->rgjs", q, key[b].float()) * scale
        scores = scores.reshape(len(rows), heads, -1)  # [rows, head, keys]
        if mask is not None:
            given = mask[b]  # [1 or head, query (or 1), keys]
            given = given[:, queries] if given.shape[1] > 1 else given.expand(-1, len(rows), -1)
            given = given.transpose(0, 1)  # [rows, 1 or head, keys]
            if given.dtype == torch.bool:
                scores = scores.masked_fill(~given, float("-inf"))
            else:
                scores = scores + given.float()
        if causal:
            later = positions[None, None, :] > queries[:, None, None]
            scores = scores.masked_fill(later, float("-inf"))
        normaliser = scores.logsumexp(-1)  # [rows, head]
        pairs = (request.batch[request.row_of_pair] == b).nonzero().flatten()
        local = local_index[request.row_of_pair[pairs]].to(scores.device)
        keys = request.key[pairs].to(scores.device)
        codes[pairs] = (scores[local, :, keys] - normaliser[local]).exp().cpu()
    return codes


def register() -> str:
    """Register the attention function with transformers (once); returns its name."""
    from transformers import AttentionInterface  # noqa: PLC0415
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: PLC0415

    AttentionInterface.register(ATTENTION_NAME, _attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)  # the masks SDPA is given
    return ATTENTION_NAME


def sdpa_pair_codes(
    model: Any,
    input_ids: torch.Tensor,
    pairs: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Codes ``[P, layer, head]`` of ``pairs`` ``[P, 3]`` (batch index, query position,
    key position) of a Hugging Face ``model`` (a ``PreTrainedModel``, e.g. a bridge's
    ``original_model``) on ``input_ids`` ``[batch, seq]`` (with its ``attention_mask``:
    1 = token, 0 = padding), the model running SDPA; its attention setting is restored."""
    pairs = torch.as_tensor(pairs, dtype=torch.long).cpu()
    batch, length = input_ids.shape
    if pairs.ndim != 2 or pairs.shape[1] != 3:
        raise ValueError(f"pairs {tuple(pairs.shape)}: expected [P, 3] (batch, query, key)")
    limits = torch.tensor([batch, length, length])
    if len(pairs) == 0 or (pairs < 0).any() or (pairs >= limits).any():
        raise ValueError(
            f"pairs must be a non-empty [P, 3] of batch indices below {batch} and positions "
            f"below {length}"
        )
    rows, row_of_pair = torch.unique(pairs[:, :2], dim=0, return_inverse=True)
    request = _Request(rows[:, 0], rows[:, 1], row_of_pair, pairs[:, 2])
    previous = model.config._attn_implementation
    model.set_attn_implementation(register())
    token = _ACTIVE.set(request)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(previous)
    if not request.codes:
        raise ValueError(
            f"{type(model).__name__} called no attention through transformers' "
            "AttentionInterface: its codes cannot be read this way; use output_attentions"
        )
    return torch.stack(request.codes, dim=1)

"""Where a head's score comes from: the pre-softmax score of a query-key pair, split over
the residual stream's components at the key (the embedding, each earlier head's output and
each earlier MLP's), for Llama-family models (SmolLM2).

The residual stream entering layer L is a sum, r = e + Σ_{l<L} (Σ_h o_{l,h} + m_l), with
o_{l,h} = z_{l,h} W_O[:, h] (``o_proj`` without bias) and m_l the MLP's output. The key of
head h is k = RoPE_k(W_K,g(h) RMSNorm(r)), and RMSNorm(r) = r ⊙ γ / rms(r). With the
normaliser rms(r) of the actual run held fixed (as path attributions do), the key is linear
in r, so the score s = scaling · q · k is the sum over components c of

    s_c = scaling · q · RoPE_k(W_K,g(h) (c ⊙ γ / rms(r))),

exactly (tests/pretrained/test_score_sources.py checks Σ_c s_c against the eager score).
A component with a large s_c on an induction head's induction key is the key-side
composition (K-composition) the induction circuit is known for: the previous-token heads
writing "the token before me" into the key. The same split at the query (``side="query"``)
gives the query-side composition (Q-composition), the key taken whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ScoreSources:
    """``contributions`` ``[pairs, components]``: each component's share of the score of
    head (``layer``, ``head``) on each pair; ``names`` the components (``embed``,
    ``L{l}H{h}``, ``L{l}MLP``); ``scores`` ``[pairs]``: the model's own pre-softmax scores
    (without the mask), which the contributions sum to."""

    layer: int
    head: int
    names: tuple[str, ...]
    contributions: torch.Tensor
    scores: torch.Tensor


def residual_components(
    model: Any, input_ids: torch.Tensor, layer: int
) -> tuple[list[torch.Tensor], list[str]]:
    """Every residual component entering ``layer``: ``[batch, pos, d_model]`` each, and
    its name; one forward pass with hooks on the embedding, ``o_proj`` inputs and MLPs."""
    caught: dict[str, torch.Tensor] = {}
    handles = [model.model.embed_tokens.register_forward_hook(
        lambda module, args, out: caught.__setitem__("embed", out.detach())
    )]  # fmt: skip
    for index in range(layer):
        block = model.model.layers[index]

        def z_hook(module, args, index=index):
            caught[f"z{index}"] = args[0].detach()

        def mlp_hook(module, args, out, index=index):
            caught[f"mlp{index}"] = out.detach()

        handles.append(block.self_attn.o_proj.register_forward_pre_hook(z_hook))
        handles.append(block.mlp.register_forward_hook(mlp_hook))
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    config = model.config
    heads, dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    parts, names = [caught["embed"]], ["embed"]
    for index in range(layer):
        weight = model.model.layers[index].self_attn.o_proj.weight  # [d_model, heads * dim]
        z = caught[f"z{index}"].unflatten(-1, (heads, dim))  # [batch, pos, head, dim]
        with torch.no_grad():
            per_head = torch.einsum("bphd,mhd->bphm", z, weight.unflatten(1, (heads, dim)))
        for head in range(heads):
            parts.append(per_head[:, :, head])
            names.append(f"L{index}H{head}")
        parts.append(caught[f"mlp{index}"])
        names.append(f"L{index}MLP")
    return parts, names


SIDES = ("key", "query")


def score_sources(
    model: Any,
    input_ids: torch.Tensor,
    layer: int,
    head: int,
    pairs: torch.Tensor,
    side: str = "key",
) -> ScoreSources:
    """The score of head (``layer``, ``head``) on ``pairs`` ``[P, 3]`` (batch index, query
    position, key position) of ``input_ids`` split over the residual components at the key
    (``side="key"``: K-composition) or at the query (``side="query"``: Q-composition), the
    other side's vector taken whole from the run. For a Llama-family Hugging Face model
    (``model.model.layers``, RMSNorm, rotary positions, no attention bias)."""
    from transformers.models.llama.modeling_llama import rotate_half  # noqa: PLC0415

    config = model.config
    if side not in SIDES:
        raise ValueError(f"side={side!r} is unknown; choose one of {list(SIDES)}")
    if getattr(config, "attention_bias", False):
        raise ValueError("the model's attention has biases: the split assumes none (Llama)")
    if not 0 <= layer < config.num_hidden_layers or not 0 <= head < config.num_attention_heads:
        raise ValueError(
            f"layer {layer}, head {head} is not a head of this model "
            f"({config.num_hidden_layers} layers of {config.num_attention_heads} heads)"
        )
    pairs = torch.as_tensor(pairs, dtype=torch.long)
    parts, names = residual_components(model, input_ids, layer)
    block = model.model.layers[layer]
    attention, norm = block.self_attn, block.input_layernorm
    dim = attention.head_dim
    group = head // (config.num_attention_heads // config.num_key_value_heads)
    residual = torch.stack(parts).sum(0)  # [batch, pos, d_model]
    scale = torch.rsqrt(residual.float().pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    positions = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
    cos, sin = model.model.rotary_emb(residual, positions)  # [batch, pos, dim]
    b = pairs[:, 0]

    def projected(position: torch.Tensor, split: bool, weight: torch.nn.Linear, index: int):
        """Rotated projections at ``position``: ``[P, dim]`` of the whole residual, or
        ``[P, components, dim]`` of each component (``split``)."""
        if split:
            x = torch.stack([part[b, position] for part in parts], 1) * scale[b, position][:, None]
        else:
            x = residual[b, position] * scale[b, position]
        vector = weight(x * norm.weight).unflatten(-1, (-1, dim))[..., index, :]
        turn = (slice(None), None) if split else (slice(None),)
        c, s_ = cos[b, position][turn], sin[b, position][turn]
        return vector * c + rotate_half(vector) * s_

    with torch.no_grad():
        query = projected(pairs[:, 1], side == "query", attention.q_proj, head)
        key = projected(pairs[:, 2], side == "key", attention.k_proj, group)
        equation = "pd,pcd->pc" if side == "key" else "pcd,pd->pc"
        contributions = torch.einsum(equation, query, key) * attention.scaling
    return ScoreSources(layer, head, tuple(names), contributions, contributions.sum(1))

"""A slow, obvious float64 attention written straight from docs/methods/attention.md.

Loops over batch, heads and query-key pairs. For every pair it builds the pair's own
value network from the latent code a[:, q, k] and applies it to key k:

- linear value network: W_{q,k} = sum_h a[h,q,k] W_h^O W_h^V (plus the mixed value bias),
  out[q] = b^O + sum_k W_{q,k} x_k;
- mlp value network: W_{q,k} = sum_h a[h,q,k] W_h^V, W'_{q,k} = sum_h a[h,q,k] W_h^O,
  out[q] = b^O + sum_k W'_{q,k} phi(W_{q,k} x_k + sum_h a[h,q,k] b_h^V).

Nothing here is shared with the fast path: the T5 buckets, the masks and the
normalisations are re-derived from the text.
"""

from __future__ import annotations

import math

import torch

ACTIVATIONS = {
    "relu": lambda u: u.clamp(min=0),
    "gelu": lambda u: 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3))),
    "silu": lambda u: u / (1 + torch.exp(-u)),
    "sigmoid": lambda u: 1 / (1 + torch.exp(-u)),
    "tanh": torch.tanh,
    "identity": lambda u: u,
}


def t5_bucket(query: int, key: int, num_buckets: int, max_distance: int) -> int:
    """Unidirectional T5 bucket of one pair, in plain Python floats."""
    n = max(query - key, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    large = max_exact + int(
        math.log(n / max_exact + 1.1920929e-07)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    )
    return min(large, num_buckets - 1)


def reference_attention(
    params: dict[str, torch.Tensor],
    cfg,
    x: torch.Tensor,
    kv: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (out ``[batch, query, d_model]``, a ``[batch, head, query, key]``), float64."""
    p = {name: t.detach().double() for name, t in params.items()}
    x = x.double()
    kv = x if kv is None else kv.double()
    batch, q_len, k_len, heads = x.shape[0], x.shape[1], kv.shape[1], cfg.n_heads
    out = torch.zeros(batch, q_len, cfg.d_model, dtype=torch.float64)
    weights = torch.zeros(batch, heads, q_len, k_len, dtype=torch.float64)
    phi = ACTIVATIONS[cfg.activation] if cfg.value_network == "mlp" else None

    for b in range(batch):
        allowed = [
            [
                (not cfg.causal or k <= q) and (key_mask is None or bool(key_mask[b, k]))
                for k in range(k_len)
            ]
            for q in range(q_len)
        ]
        scores = torch.zeros(heads, q_len, k_len, dtype=torch.float64)
        for h in range(heads):
            for q in range(q_len):
                query = p["W_Q"][h].T @ x[b, q] + p["b_Q"][h]
                for k in range(k_len):
                    key = p["W_K"][h].T @ kv[b, k] + p["b_K"][h]
                    s = float(query @ key) / math.sqrt(cfg.d_head)
                    if cfg.relative_position:
                        s += float(
                            p["rel_pos.table"][
                                h, t5_bucket(q, k, cfg.num_buckets, cfg.max_distance)
                            ]
                        )
                    scores[h, q, k] = s
        a = torch.zeros_like(scores)
        for q in range(q_len):
            keys = [k for k in range(k_len) if allowed[q][k]]
            for h in range(heads):
                if cfg.normalization == "softmax":
                    top = max(float(scores[h, q, k]) for k in keys)
                    total = sum(math.exp(float(scores[h, q, k]) - top) for k in keys)
                    for k in keys:
                        a[h, q, k] = math.exp(float(scores[h, q, k]) - top) / total
                elif cfg.normalization == "none":
                    for k in keys:
                        a[h, q, k] = scores[h, q, k]
            if cfg.normalization == "rms_head":
                for k in keys:
                    rms = math.sqrt(float((scores[:, q, k] ** 2).mean()) + cfg.rms_eps)
                    a[:, q, k] = scores[:, q, k] / rms
        weights[b] = a

        for q in range(q_len):
            total = p["b_O"].clone()
            for k in range(k_len):
                code = a[:, q, k]
                if phi is None:
                    pair_map = sum(code[h] * p["W_O"][h].T @ p["W_V"][h].T for h in range(heads))
                    pair_bias = sum(code[h] * p["W_O"][h].T @ p["b_V"][h] for h in range(heads))
                    total = total + pair_map @ kv[b, k] + pair_bias
                else:
                    first = sum(code[h] * p["W_V"][h].T for h in range(heads))
                    first_bias = sum(code[h] * p["b_V"][h] for h in range(heads))
                    second = sum(code[h] * p["W_O"][h].T for h in range(heads))
                    total = total + second @ phi(first @ kv[b, k] + first_bias)
            out[b, q] = total
    return out, weights

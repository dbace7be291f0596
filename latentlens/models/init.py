"""Parameter initialisers matching Flax's defaults (the official code's)."""

from __future__ import annotations

import math

import torch
from torch import nn

# Standard deviation of a unit normal truncated to [-2, 2]; Flax divides by it so that the
# truncated samples keep the requested variance.
_TRUNCATED_STD = 0.87962566103423978


def truncated_normal_(
    tensor: torch.Tensor, std: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Fill with a normal truncated at two standard deviations, variance ``std**2``."""
    scaled = std / _TRUNCATED_STD
    with torch.no_grad():
        return nn.init.trunc_normal_(
            tensor, mean=0.0, std=scaled, a=-2 * scaled, b=2 * scaled, generator=generator
        )


def lecun_normal_(tensor: torch.Tensor, fan_in: int) -> torch.Tensor:
    """LeCun normal (variance ``1 / fan_in``, truncated), Flax's default kernel init."""
    return truncated_normal_(tensor, std=1.0 / math.sqrt(fan_in))


def embedding_normal_(tensor: torch.Tensor, fan_in: int) -> torch.Tensor:
    """Normal (not truncated) with variance ``1 / fan_in``: Flax's ``default_embed_init``
    (``variance_scaling(1.0, "fan_in", "normal", out_axis=0)``), the official code's
    initialiser of token embeddings and relative-position tables.

    For a table ``[rows, columns]`` Flax's ``fan_in`` comes out as ``columns`` (the
    features of an embedding, the buckets of a relative-position table ``[heads,
    buckets]``), whatever the number of rows.
    """
    if tensor.is_meta:  # no values to draw; torch's meta normal_ imports torch._dynamo (2 s)
        return tensor
    with torch.no_grad():
        return nn.init.normal_(tensor, mean=0.0, std=1.0 / math.sqrt(fan_in))


def init_linear_(layer: nn.Linear) -> nn.Linear:
    """LeCun-normal weight and zero bias for a ``torch.nn.Linear``."""
    lecun_normal_(layer.weight, fan_in=layer.in_features)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer

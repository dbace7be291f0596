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


def init_linear_(layer: nn.Linear) -> nn.Linear:
    """LeCun-normal weight and zero bias for a ``torch.nn.Linear``."""
    lecun_normal_(layer.weight, fan_in=layer.in_features)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer

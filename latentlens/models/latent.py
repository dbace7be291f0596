"""Reading latent codes out of a cache."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

ATTENTION_MODULES = ("attn", "cross_attn", "fuse")


def pattern_hook_name(layer: int, prefix: str = "", module: str = "attn") -> str:
    """Hook name of layer ``layer``'s attention weights, e.g. ``blocks.0.attn.hook_pattern``.

    ``prefix`` selects a stack of an encoder-decoder model (``"encoder."``, ``"decoder."``);
    ``module`` the attention of the block: ``attn`` (self-attention), ``cross_attn`` (an
    encoder-decoder's decoder) or ``fuse`` (FUSION's fuse-attention over earlier layers).
    """
    if module not in ATTENTION_MODULES:
        raise ValueError(f"module={module!r} is unknown; choose one of {list(ATTENTION_MODULES)}")
    return f"{prefix}blocks.{layer}.{module}.hook_pattern"


def latent_codes(
    cache: Mapping[str, torch.Tensor], layer: int, prefix: str = "", module: str = "attn"
) -> torch.Tensor:
    """The latent code of every query-key pair of one layer: ``[batch, query, key, head]``.

    ``cache`` is an ``ActivationCache`` (or dict) holding that layer's ``hook_pattern``
    ``[batch, head, query, key]``; ``codes[b, q, k]`` is the vector a(., q, k) over heads.
    ``prefix`` and ``module`` pick the attention as in :func:`pattern_hook_name`: the
    decoder's cross-attention codes are ``latent_codes(cache, l, "decoder.", "cross_attn")``
    (keys: source positions), FUSION's ``module="fuse"`` (keys: source layers).
    """
    if layer < 0:
        raise ValueError(f"layer={layer}: layers count from 0 (the first block)")
    name = pattern_hook_name(layer, prefix, module)
    try:
        pattern = cache[name]
    except KeyError:
        layer_of = re.compile(rf"{re.escape(prefix)}blocks\.(\d+)\.{module}\.hook_pattern")
        held = sorted(int(m.group(1)) for key in cache if (m := layer_of.fullmatch(key)))
        if held:
            raise KeyError(
                f"the cache has no {name!r}; it holds layers {held} of {module}.hook_pattern: "
                f"the model has no layer {layer}, or the names_filter left it out (keep every "
                f"layer with names_filter=lambda n: n.endswith('{module}.hook_pattern'))"
            ) from None
        raise KeyError(
            f"the cache has no {name!r}; run the model with a names_filter that keeps it, "
            f"e.g. names_filter=lambda n: n.endswith('{module}.hook_pattern')"
        ) from None
    if pattern.ndim != 4:
        raise ValueError(
            f"{name} has shape {list(pattern.shape)}, expected [batch, head, query, key]; "
            "was the cache made with remove_batch_dim=True? Use a batch dimension."
        )
    return pattern.permute(0, 2, 3, 1)

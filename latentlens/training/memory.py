"""Refuse a model that cannot fit before allocating it: parameters counted on the meta
device (no memory), AdamW training state and a coarse activation estimate, against what
the device has free."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch

GIB = 2**30
# fp32 weights, gradients and AdamW's two moments
TRAINING_BYTES_PER_PARAMETER = 16


# The config fields that count layers, each with the smallest count the counting builds:
# a model's parameters are multilinear in them (each layer adds the same, a layer
# connection encoder x decoder layers). The encoder starts at 2 so that every decoder
# counted (1 or 2 layers) is no deeper than it, as the gca and layerwise connections need.
LAYER_FIELDS = {"n_layers": 1, "n_layers_encoder": 2, "n_layers_decoder": 1}


def built_parameter_count(kind: str, config: Any) -> int:
    """Parameters of the model, built on the meta device (nothing allocated)."""
    from latentlens.models import build_model

    try:
        with torch.device("meta"):
            model = build_model(kind, config)
    except RuntimeError as err:  # a tensor of over 2**63 elements: no device holds it
        if "overflow" not in str(err):
            raise
        raise ValueError(
            "the model does not fit: one of its weight tensors would hold more than 2**63 "
            "elements; lower --d-model, --d-mlp, --qk-dim, --v-dim or --n-heads"
        ) from None
    return sum(p.numel() for p in model.parameters())


def parameter_count(kind: str, config: Any) -> int:
    """Parameters of the model, without building all its layers: the counts of the model
    with ``b`` and ``b + 1`` of each kind of layer (``b`` from :data:`LAYER_FIELDS`),
    extended multilinearly to the config's layer counts (exact: each layer adds the same
    parameters, a layer connection encoder x decoder), so that a config of 10^18 layers is
    answered at once."""
    fields = [f for f in LAYER_FIELDS if hasattr(config, f)]
    counts = [getattr(config, f) for f in fields]
    corners = [(LAYER_FIELDS[f], LAYER_FIELDS[f] + 1) for f in fields]
    total = 0
    for corner in itertools.product(*corners):
        weight = 1
        for n, at, (low, high) in zip(counts, corner, corners, strict=True):
            weight *= (high - n) if at == low else (n - low)  # the linear interpolant's
        if weight:
            small = dataclasses.replace(config, **dict(zip(fields, corner, strict=True)))
            total += weight * built_parameter_count(kind, small)
    return total


def activation_bytes(config: Any, batch: int) -> int:
    """A coarse upper estimate of what a batch keeps for the backward pass: per layer and
    position, the residual stream and attention sub-layer outputs (about 6 d_model), the
    MLP hidden (2 d_mlp) and the attention scores and pattern (3 heads x positions)."""
    layers = getattr(config, "n_layers", None) or (
        getattr(config, "n_layers_encoder", 0) + getattr(config, "n_layers_decoder", 0)
    )
    pos = getattr(config, "n_ctx", None) or max(
        getattr(config, "n_ctx_source", 1), getattr(config, "n_ctx_target", 1)
    )
    width = 6 * config.d_model + 2 * getattr(config, "d_mlp", 0) + 3 * config.n_heads * pos
    return 4 * batch * max(layers, 1) * pos * width


def free_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` (CUDA: the driver's count; CPU: MemAvailable), ``None``
    where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(kind: str, config: Any, batch: int, device: torch.device) -> None:
    """A ``ValueError`` with the estimate when training would not fit in free memory."""
    available = free_bytes(device)
    if available is None:
        return
    parameters = parameter_count(kind, config)
    state = TRAINING_BYTES_PER_PARAMETER * parameters
    activations = activation_bytes(config, batch)
    if state + activations > available:
        raise ValueError(
            f"the model does not fit: {parameters:,} parameters need about "
            f"{state / GIB:.1f} GiB with gradients and AdamW state, and a batch of {batch} "
            f"about {activations / GIB:.1f} GiB of activations, but {device} has "
            f"{available / GIB:.1f} GiB free; lower --d-model, --d-mlp, --n-layers or "
            "--batch-size"
        )

"""Fused CPU kernels, built from C on first use (:mod:`latentlens.kernels.build`).

:func:`use_fused_kernels` switches a model's attention layers to the fused attention core
(:mod:`latentlens.kernels.attention_core`) wherever it applies, its MLPs' tanh GELU to
:mod:`latentlens.kernels.gelu_tanh`, and a transformer's residual adds and layer norms to
:mod:`latentlens.kernels.layer_norm`, with its MLPs there a block of rows at a time
(:mod:`latentlens.kernels.mlp`): training's ``--fused``, whose AdamW steps are one call of
:mod:`latentlens.kernels.adamw`.
"""

from __future__ import annotations

import torch
from torch import nn

from latentlens.kernels import attention_core, gelu_tanh, layer_norm, mlp


def kernels_apply(tensor: torch.Tensor, compiles: bool = False) -> bool:
    """Whether a layer switched to the kernels may run them on ``tensor``: float32 on the
    CPU, outside autocast, and outside torch.compile unless the kernel is a PyTorch
    operator that compiled code calls (``compiles``: self-attention's core and the
    GELU)."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and (compiles or not torch.compiler.is_compiling())
    )


def use_fused_kernels(model: nn.Module, on: bool = True) -> int:
    """Compute ``model``'s attention cores (where the kernel covers the attention), its
    transformer MLPs' GELUs and its residual stream's adds and layer norms with the fused
    CPU kernels (``on``) or with PyTorch's ops; returns how many attention and MLP layers
    take a kernel. Builds the kernels now (a second or two, once per machine), so that a
    missing compiler fails here."""
    from latentlens.models.attention import Attention  # the models import this package
    from latentlens.models.transformer import MLP, DecoderTransformer

    layers = [m for m in model.modules() if isinstance(m, (Attention, MLP))]
    streams = [m for m in model.modules() if isinstance(m, DecoderTransformer)]
    blocks = on and mlp.available()
    if on and layers:
        attention_core.library(), gelu_tanh.library(), layer_norm.library()
        if blocks:
            mlp.library()
    for layer in layers + streams:
        layer.fused = on
        if isinstance(layer, MLP):
            layer.fused_blocks = blocks
    return sum(getattr(layer, "fused_core_supported", True) for layer in layers)

"""The models' switch to the fused CPU kernels (:mod:`latentlens.kernels`): training's
``--fused``. The kernels know tensors; which layers take them is the models' business."""

from __future__ import annotations

from torch import nn

from latentlens.kernels import attention_core, gelu_tanh, layer_norm, mlp, native
from latentlens.models.attention import Attention
from latentlens.models.transformer import MLP, DecoderTransformer


def use_fused_kernels(model: nn.Module, on: bool = True) -> int:
    """Compute ``model``'s attention cores (where the kernel covers the attention), its
    transformer MLPs' GELUs and its residual stream's adds and layer norms with the fused
    CPU kernels (``on``) or with PyTorch's ops; returns how many attention and MLP layers
    take a kernel. Builds the kernels now (a second or two, once per machine), so that a
    missing compiler fails here, and gives their operators C++ bodies
    (:func:`latentlens.kernels.native.load`; about 10 s more, once per machine)."""
    layers = [m for m in model.modules() if isinstance(m, (Attention, MLP))]
    streams = [m for m in model.modules() if isinstance(m, DecoderTransformer)]
    blocks = on and mlp.available()
    if on and layers:
        attention_core.library(), gelu_tanh.library(), layer_norm.library()
        if blocks and mlp.engine() == "sgemm":
            mlp.library()
        native.load()
    for layer in layers + streams:
        layer.fused = on
        if isinstance(layer, MLP):
            layer.fused_blocks = blocks
    return sum(getattr(layer, "fused_core_supported", True) for layer in layers)

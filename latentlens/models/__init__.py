"""Instrumented models: the hooked attention family and the transformers built from it."""

from latentlens.models.attention import ACTIVATION_FUNCTIONS, Attention
from latentlens.models.config import (
    ACTIVATIONS,
    NORMALIZATIONS,
    VALUE_NETWORKS,
    VARIANTS,
    AttentionConfig,
    AttentionVariant,
    TransformerConfig,
    resolve_variant,
)
from latentlens.models.encoder_decoder import EncoderDecoderConfig, EncoderDecoderTransformer
from latentlens.models.fused import use_fused_kernels
from latentlens.models.fusion import CONNECTIONS, FuseAttention, LayerConnection
from latentlens.models.hook_axes import HOOK_AXES, hook_axes
from latentlens.models.hooked import HookedModel
from latentlens.models.hypernetwork import HypernetworkConfig, HypernetworkTransformer
from latentlens.models.latent import latent_codes, pattern_hook_name
from latentlens.models.lens_view import LensView
from latentlens.models.position import (
    RelativePositionBias,
    relative_position_buckets,
    sinusoidal_encoding,
)
from latentlens.models.registry import (
    MODEL_ALIASES,
    MODEL_KINDS,
    build_model,
    canonical_kind,
    model_config,
    model_preset,
    resolve_model_kind,
)
from latentlens.models.transformer import MLP, DecoderTransformer, TransformerBlock

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_FUNCTIONS",
    "HOOK_AXES",
    "CONNECTIONS",
    "MLP",
    "MODEL_ALIASES",
    "MODEL_KINDS",
    "NORMALIZATIONS",
    "VALUE_NETWORKS",
    "VARIANTS",
    "Attention",
    "AttentionConfig",
    "AttentionVariant",
    "DecoderTransformer",
    "EncoderDecoderConfig",
    "EncoderDecoderTransformer",
    "FuseAttention",
    "HookedModel",
    "HypernetworkConfig",
    "HypernetworkTransformer",
    "LayerConnection",
    "LensView",
    "RelativePositionBias",
    "TransformerBlock",
    "TransformerConfig",
    "build_model",
    "canonical_kind",
    "hook_axes",
    "latent_codes",
    "model_config",
    "model_preset",
    "pattern_hook_name",
    "relative_position_buckets",
    "resolve_model_kind",
    "resolve_variant",
    "sinusoidal_encoding",
    "use_fused_kernels",
]

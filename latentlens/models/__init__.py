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
from latentlens.models.hooked import HookedModel
from latentlens.models.latent import latent_codes, pattern_hook_name
from latentlens.models.position import (
    RelativePositionBias,
    relative_position_buckets,
    sinusoidal_encoding,
)
from latentlens.models.transformer import MLP, DecoderTransformer, TransformerBlock

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_FUNCTIONS",
    "MLP",
    "NORMALIZATIONS",
    "VALUE_NETWORKS",
    "VARIANTS",
    "Attention",
    "AttentionConfig",
    "AttentionVariant",
    "DecoderTransformer",
    "HookedModel",
    "RelativePositionBias",
    "TransformerBlock",
    "TransformerConfig",
    "latent_codes",
    "pattern_hook_name",
    "relative_position_buckets",
    "resolve_variant",
    "sinusoidal_encoding",
]

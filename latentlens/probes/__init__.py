"""Probes: streaming extraction of activations with labels, linear decoders fit
in-distribution and scored out-of-distribution, and decoding tracked over training; on any
hooked model (latentlens's, a TransformerLens ``TransformerBridge``) and any labelled source
(a latentlens task, :class:`TokenPairs`)."""

from latentlens.probes.atlas import latent_atlas
from latentlens.probes.extraction import Extraction, extract, last_position
from latentlens.probes.linear import (
    DecodingScore,
    classifier_decoding,
    cross_validated_decoding,
    ridge_decoding,
)
from latentlens.probes.pairs import TokenPairs, pair_codes
from latentlens.probes.relations import repeated_token_pairs
from latentlens.probes.source import HookedLike, LabelledSource, pattern_hooks
from latentlens.probes.task_tracking import tracking_callbacks
from latentlens.probes.tracking import LatentDecodingTracker, decoding_sites, read_decoding

__all__ = [
    "Extraction",
    "HookedLike",
    "LabelledSource",
    "TokenPairs",
    "LatentDecodingTracker",
    "DecodingScore",
    "classifier_decoding",
    "cross_validated_decoding",
    "decoding_sites",
    "extract",
    "last_position",
    "latent_atlas",
    "pair_codes",
    "pattern_hooks",
    "read_decoding",
    "repeated_token_pairs",
    "ridge_decoding",
    "tracking_callbacks",
]

"""Probes: streaming extraction of activations with labels, linear decoders fit
in-distribution and scored out-of-distribution, and decoding tracked over training."""

from latentlens.probes.extraction import Extraction, extract, last_position
from latentlens.probes.linear import (
    DecodingScore,
    classifier_decoding,
    cross_validated_decoding,
    ridge_decoding,
)
from latentlens.probes.task_tracking import tracking_callbacks
from latentlens.probes.tracking import LatentDecodingTracker, decoding_sites, read_decoding

__all__ = [
    "Extraction",
    "LatentDecodingTracker",
    "DecodingScore",
    "classifier_decoding",
    "cross_validated_decoding",
    "decoding_sites",
    "extract",
    "last_position",
    "read_decoding",
    "ridge_decoding",
    "tracking_callbacks",
]

"""Probes: streaming extraction of activations with labels, linear decoders fit
in-distribution and scored out-of-distribution, and decoding tracked over training; on any
hooked model (latentlens's, a TransformerLens ``TransformerBridge``) and any labelled source
(a latentlens task, :class:`TokenPairs`).

The names below are imported on first use: a command that needs one probe module (e.g.
``latentlens train``'s trackers) then does not load scikit-learn's clustering and SciPy's
statistics, which the atlas and the structure scores need (about 1.5 s)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# public name -> the module that defines it
_MODULES = {
    "latent_atlas": "atlas",
    "Extraction": "extraction",
    "extract": "extraction",
    "last_position": "extraction",
    "DecodingScore": "linear",
    "classifier_decoding": "linear",
    "cross_validated_decoding": "linear",
    "ridge_decoding": "linear",
    "TokenPairs": "pairs",
    "pair_codes": "pairs",
    "repeated_token_pairs": "relations",
    "HookedLike": "source",
    "LabelledSource": "source",
    "pattern_hooks": "source",
    "tracking_callbacks": "task_tracking",
    "LatentDecodingTracker": "tracking",
    "decoding_sites": "tracking",
    "read_decoding": "tracking",
}

__all__ = [
    "DecodingScore",
    "Extraction",
    "HookedLike",
    "LabelledSource",
    "LatentDecodingTracker",
    "TokenPairs",
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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})

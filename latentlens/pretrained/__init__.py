"""Pretrained models the field already uses, instrumented: the encoder-decoder layer
connection inserted into a Hugging Face MarianMT model (transformers is imported when
these functions run, never at ``import latentlens``)."""

from latentlens.pretrained.bridge import (
    INITIALISATIONS,
    bridge_of,
    insert_bridge,
    load_bridged,
    remove_bridge,
    routing_matrix,
    save_bridged,
)

__all__ = [
    "INITIALISATIONS",
    "bridge_of",
    "insert_bridge",
    "load_bridged",
    "remove_bridge",
    "routing_matrix",
    "save_bridged",
]

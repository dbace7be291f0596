"""Pretrained models the field already uses, instrumented: the encoder-decoder layer
connection inserted into a Hugging Face MarianMT model, and any language model
TransformerLens's ``TransformerBridge`` supports as a hooked model (transformers is imported
when these functions run, never at ``import latentlens``)."""

from latentlens.pretrained.bridge import (
    INITIALISATIONS,
    bridge_of,
    insert_bridge,
    load_bridged,
    remove_bridge,
    routing_matrix,
    save_bridged,
)
from latentlens.pretrained.language_model import load_language_model, write_tiny_gpt2

__all__ = [
    "INITIALISATIONS",
    "bridge_of",
    "insert_bridge",
    "load_language_model",
    "load_bridged",
    "remove_bridge",
    "routing_matrix",
    "save_bridged",
    "write_tiny_gpt2",
]

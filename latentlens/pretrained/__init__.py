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
from latentlens.pretrained.language_model import (
    key_value_groups,
    load_language_model,
    write_tiny_gpt2,
)
from latentlens.pretrained.real_models import REAL_MODELS, fetch_model, model_folder
from latentlens.pretrained.sdpa_codes import sdpa_pair_codes

__all__ = [
    "INITIALISATIONS",
    "REAL_MODELS",
    "bridge_of",
    "fetch_model",
    "insert_bridge",
    "key_value_groups",
    "load_language_model",
    "load_bridged",
    "model_folder",
    "remove_bridge",
    "routing_matrix",
    "save_bridged",
    "sdpa_pair_codes",
    "write_tiny_gpt2",
]

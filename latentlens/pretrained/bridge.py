"""The encoder-decoder layer connection ("bridge") inserted into a pretrained Hugging Face
MarianMT model, as seed 001 runs it (docs/methods/models.md).

Decoder layer j's cross-attention reads its own memory ``M_j = concat(e_1..e_L) W_jᵀ``
instead of the last encoder layer's output: ``W_j`` ``[d_model, L_enc * d_model]`` is one
bias-free linear map per decoder layer (a :class:`~latentlens.models.LayerConnection`
stored as ``model.model.layer_connection``), initialised ``original`` (the last layer: the
bridged model computes exactly what the unmodified one does), ``gca`` (the mirror:
decoder layer 1 reads encoder layer L), ``layerwise`` or ``uniform``.

How it is wired (the pretrained modules and their parameter names are untouched):

- the encoder returns its layer outputs concatenated on the feature axis as
  ``last_hidden_state`` ``[batch, source_pos, L_enc * d_model]``, so generation expands
  every encoder layer's output by the beam size, not only the last one;
- the decoder turns that into the memories (``layer_connection.hook_memory``
  ``[batch, decoder_layer, source_pos, d_model]``), passed on flattened
  ``[batch, source_pos, L_dec * d_model]``;
- decoder layer j's cross-attention takes its block ``j`` of it as key/value input. During
  cached generation the cross-attention keys and values are computed once, so the memories
  are too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn
from torch.utils.hooks import RemovableHandle

from latentlens.models.fusion import CONNECTIONS, LayerConnection

INITIALISATIONS = CONNECTIONS[1:]
BRIDGE_KEY = "model.layer_connection.weight"
BRIDGE_CONFIG_FIELD = "latentlens_bridge"


def _marian_parts(model: Any) -> tuple[nn.Module, nn.Module]:
    """The encoder and decoder of a MarianMT model; a clear error for any other model."""
    from transformers import MarianMTModel

    config = getattr(model, "config", None)
    if not getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"{type(model).__name__} is not an encoder-decoder model; the layer connection "
            "goes between an encoder and a decoder (e.g. a MarianMTModel such as "
            "Helsinki-NLP/opus-mt-de-en)"
        )
    if not isinstance(model, MarianMTModel):
        raise ValueError(
            f"{type(model).__name__} is an encoder-decoder the bridge does not support; it "
            "needs a post-LN MarianMTModel (no final encoder norm, so 'original' reproduces "
            "the model exactly)"
        )
    return model.model.encoder, model.model.decoder


def bridge_of(model: Any) -> LayerConnection | None:
    """The layer connection inserted into ``model``, ``None`` if it has none."""
    connection = getattr(getattr(model, "model", None), "layer_connection", None)
    return connection if isinstance(connection, LayerConnection) else None


def insert_bridge(model: Any, init: str = "original") -> Any:
    """Insert the layer connection into a loaded ``MarianMTModel`` (in place) and return it.

    ``init`` is one of ``original``, ``gca``, ``layerwise``, ``uniform``. The connection
    takes the model's dtype and device. Raises ``ValueError`` for a model that is not a
    MarianMT encoder-decoder, one that already has a bridge, an unknown ``init``, or layer
    counts that ``init`` cannot map (``gca`` and ``layerwise`` need as many encoder layers
    as decoder layers or more).
    """
    if init not in INITIALISATIONS:
        raise ValueError(f"init={init!r} is unknown; choose one of {INITIALISATIONS}")
    encoder, decoder = _marian_parts(model)
    if bridge_of(model) is not None:
        raise ValueError("the model already has a layer connection; insert it once")
    enc_layers, dec_layers = len(encoder.layers), len(decoder.layers)
    d_model = model.config.d_model
    reference = next(model.parameters())
    connection = LayerConnection(init, dec_layers, enc_layers, d_model)
    model.model.layer_connection = connection.to(reference.device, reference.dtype)
    handles = _wire(model, encoder, decoder, connection)
    model._latentlens_bridge_handles = handles
    setattr(model.config, BRIDGE_CONFIG_FIELD, init)
    return model


def remove_bridge(model: Any) -> Any:
    """Undo :func:`insert_bridge` (in place): the hooks, the connection and its config
    field go; the pretrained weights are as they were (or as fine-tuning left them)."""
    if bridge_of(model) is None:
        raise ValueError("the model has no layer connection to remove")
    for handle in model._latentlens_bridge_handles:
        handle.remove()
    del model._latentlens_bridge_handles
    del model.model.layer_connection
    delattr(model.config, BRIDGE_CONFIG_FIELD)
    return model


def routing_matrix(model: Any) -> torch.Tensor:
    """``R[j, k] = ||B_jk||_F / Σ_k ||B_jk||_F`` ``[decoder_layer, encoder_layer]`` of the
    bridge (the unmodified model reads only the last encoder layer)."""
    connection = bridge_of(model)
    if connection is not None:
        return connection.routing_matrix().float().cpu()
    encoder, decoder = _marian_parts(model)
    routing = torch.zeros(len(decoder.layers), len(encoder.layers))
    routing[:, -1] = 1.0
    return routing


def save_bridged(model: Any, directory: str | Path) -> Path:
    """``model.save_pretrained(directory)`` (safetensors), bridge included; the config
    records the bridge's initialisation for :func:`load_bridged`."""
    directory = Path(directory)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def load_bridged(directory: str | Path, **from_pretrained: Any) -> Any:
    """A model saved by :func:`save_bridged` (or any MarianMT checkpoint), bridge and its
    trained weights restored."""
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging

    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{directory} holds no saved model (config.json); save with save_bridged")
    init = json.loads(config_path.read_text()).get(BRIDGE_CONFIG_FIELD)
    if init is None:
        return MarianMTModel.from_pretrained(directory, **from_pretrained)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its report of the bridge's weight as unexpected
    try:
        model = MarianMTModel.from_pretrained(directory, **from_pretrained)
    finally:
        hf_logging.set_verbosity(verbosity)
    weights = directory / "model.safetensors"
    with safe_open(str(weights), framework="pt") as handle:
        keys = handle.keys()  # a safe_open handle is not iterable
        if BRIDGE_KEY not in keys:
            raise ValueError(f"{weights} has no {BRIDGE_KEY}; it was not saved with a bridge")
    delattr(model.config, BRIDGE_CONFIG_FIELD)
    insert_bridge(model, init)
    # every saved tensor as saved (from_pretrained skipped the bridge's weight)
    model.load_state_dict(load_file(str(weights)), strict=False)
    return model


def _cross_attention_cached(kwargs: dict[str, Any], layer: int) -> bool:
    """Whether cached generation already holds this layer's cross-attention keys/values."""
    cache = kwargs.get("cache")
    updated = getattr(cache, "is_updated", None)
    return bool(updated and updated.get(layer))


def _wire(
    model: Any, encoder: nn.Module, decoder: nn.Module, connection: LayerConnection
) -> list[RemovableHandle]:
    outputs: list[torch.Tensor] = []
    enc_layers, dec_layers, d_model = len(encoder.layers), len(decoder.layers), model.config.d_model

    def start_encoder(module: nn.Module, args: tuple, kwargs: dict) -> None:
        outputs.clear()

    def keep_layer_output(module: nn.Module, args: tuple, output: Any) -> None:
        outputs.append(output[0] if isinstance(output, tuple) else output)

    def concatenate(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        if len(outputs) != enc_layers:
            raise RuntimeError(
                f"the bridge saw {len(outputs)} of {enc_layers} encoder layer outputs; "
                "encoder layerdrop is not supported with a layer connection"
            )
        stacked = torch.cat(outputs, dim=-1)
        outputs.clear()
        if isinstance(output, tuple):
            return (stacked, *output[1:])
        output["last_hidden_state"] = stacked
        return output

    def make_memories(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        stacked = kwargs.get("encoder_hidden_states")
        if stacked is None or all(_cross_attention_cached(kwargs, j) for j in range(dec_layers)):
            return args, kwargs
        if stacked.shape[-1] != enc_layers * d_model:
            raise ValueError(
                f"encoder_hidden_states has {stacked.shape[-1]} features; a bridged model "
                f"takes the {enc_layers} encoder layers concatenated ({enc_layers * d_model}): "
                "pass encoder_outputs from the bridged model's own encoder"
            )
        memories = connection.from_concatenated(stacked)  # [batch, dec, pos, d_model]
        kwargs["encoder_hidden_states"] = memories.permute(0, 2, 1, 3).flatten(2)
        return args, kwargs

    def own_memory(layer: int):
        def select(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            memories = kwargs.get("key_value_states")
            if memories is not None and not _cross_attention_cached(kwargs, layer):
                kwargs["key_value_states"] = memories[..., layer * d_model : (layer + 1) * d_model]
            return args, kwargs

        return select

    handles = [
        encoder.register_forward_pre_hook(start_encoder, with_kwargs=True),
        encoder.register_forward_hook(concatenate, with_kwargs=True),
        decoder.register_forward_pre_hook(make_memories, with_kwargs=True),
    ]
    handles += [layer.register_forward_hook(keep_layer_output) for layer in encoder.layers]
    handles += [
        layer.encoder_attn.register_forward_pre_hook(own_memory(j), with_kwargs=True)
        for j, layer in enumerate(decoder.layers)
    ]
    return handles

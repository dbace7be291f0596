"""What each task records over training for its analysis: the callbacks ``latentlens
train`` attaches, for a :class:`~latentlens.training.Trainer` built in Python too.

    trainer = Trainer.create(run, config, callbacks=tracking_callbacks(config))
"""

from __future__ import annotations

from typing import Any

import torch

from latentlens.probes.official import OFFICIAL_EXAMPLES, LogicLatentsTracker
from latentlens.probes.tracking import LatentDecodingTracker
from latentlens.probes.translation import TranslationQualityTracker
from latentlens.training import ActivationRecorder, Callback, QuantityRecorder


def tracking_callbacks(config: dict[str, Any]) -> list[Callback]:
    """The recorders a run of ``config`` (a resolved run config) needs: fuzzy logic records
    the official code's ``r2_attn_latent`` (:mod:`latentlens.probes.official`), as its
    ``LogicLatents`` callback logs it, on its 16,000 examples; modular-icl decodes
    z from every layer (fit in-distribution, R² out-of-distribution, ``eval_examples`` each);
    ``train.tracking_examples`` sets either sample instead; translation records
    CTER and BLEU, the fuse weights (mean per layer and source layer) of a FUSION model and
    the routing matrix of a layer connection. Other tasks record nothing over training."""
    task, train = config["task"]["name"], config["train"]
    examples = train.get("tracking_examples")  # None: the protocol's own sample
    if task == "fuzzy-logic":
        return [LogicLatentsTracker(examples or OFFICIAL_EXAMPLES)]
    if task == "modular-icl":
        return [LatentDecodingTracker(examples=examples or train["eval_examples"])]
    if task == "translation":
        model = config["model"]
        callbacks: list[Callback] = [TranslationQualityTracker()]
        if model.get("fuse", "none") != "none":
            callbacks.append(
                ActivationRecorder(
                    fuse_hook_names(model), reduce=mean_fuse_weights, axes=("source_layer",)
                )
            )
        if model.get("connection", "none") != "none":
            callbacks.append(
                QuantityRecorder(
                    "routing_matrix",
                    lambda t: t.model.routing_matrix(),
                    axes=("decoder_layer", "encoder_layer"),
                )
            )
        return callbacks
    return []


def fuse_hook_names(model: dict[str, Any]) -> list[str]:
    """The fuse-attention pattern hooks of an encoder-decoder model config, encoder first."""
    sides = {"encoder": ("encoder",), "decoder": ("decoder",), "both": ("encoder", "decoder")}
    layers = {"encoder": model["n_layers_encoder"], "decoder": model["n_layers_decoder"]}
    return [
        f"{side}.blocks.{layer}.fuse.hook_pattern"
        for side in sides[model["fuse"]]
        for layer in range(layers[side])
    ]


def mean_fuse_weights(pattern: torch.Tensor) -> torch.Tensor:
    """``[batch, head, pos, source] -> [source]``: the mean weight of each source layer."""
    return pattern.float().mean(dim=(0, 1, 2))

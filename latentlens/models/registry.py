"""Model kinds by name: their config class, their module, and the task presets."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from latentlens.configs import JsonConfig
from latentlens.models.config import TransformerConfig
from latentlens.models.encoder_decoder import EncoderDecoderConfig, EncoderDecoderTransformer
from latentlens.models.hooked import HookedModel
from latentlens.models.hypernetwork import HypernetworkConfig, HypernetworkTransformer
from latentlens.models.transformer import DecoderTransformer

MODEL_KINDS: dict[str, tuple[type[JsonConfig], type[HookedModel]]] = {
    "transformer": (TransformerConfig, DecoderTransformer),
    "hypernetwork": (HypernetworkConfig, HypernetworkTransformer),
    "encoder-decoder": (EncoderDecoderConfig, EncoderDecoderTransformer),
}
MODEL_ALIASES = {"vanilla": "transformer"}
# What a kind name means for a sequence-to-sequence task: (kind, config overrides).
TASK_MODEL_KINDS: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("translation", "transformer"): ("encoder-decoder", {}),
    ("translation", "fusion"): ("encoder-decoder", {"fuse": "both"}),
}


def resolve_model_kind(kind: str) -> str:
    """The canonical name of a model kind (``vanilla`` is the plain ``transformer``)."""
    kind = MODEL_ALIASES.get(kind, kind)
    if kind not in MODEL_KINDS:
        allowed = sorted([*MODEL_KINDS, *MODEL_ALIASES])
        raise ValueError(f"model={kind!r} is unknown; choose one of {allowed}")
    return kind


def canonical_kind(task: str, kind: str) -> str:
    """The model kind a CLI name stands for on ``task`` (``fusion`` on translation is the
    ``encoder-decoder``)."""
    kind = MODEL_ALIASES.get(kind, kind)
    if (task, kind) in TASK_MODEL_KINDS:
        return TASK_MODEL_KINDS[(task, kind)][0]
    tasks = sorted(t for t, k in TASK_MODEL_KINDS if k == kind and kind not in MODEL_KINDS)
    if tasks:
        raise ValueError(f"model={kind!r} is for the {' and '.join(tasks)} task, not {task!r}")
    return resolve_model_kind(kind)


def model_config(kind: str, data: dict[str, Any]) -> Any:
    """The validated config of a model kind from its JSON dict."""
    return MODEL_KINDS[resolve_model_kind(kind)][0].from_dict(data)


def build_model(kind: str, config: Any) -> HookedModel:
    """A fresh model of ``kind`` from its config object."""
    config_cls, model_cls = MODEL_KINDS[resolve_model_kind(kind)]
    if not isinstance(config, config_cls):
        raise ValueError(
            f"model={kind!r} takes a {config_cls.__name__}, got {type(config).__name__}"
        )
    return model_cls(config)


def model_preset(kind: str, task: str, **overrides: Any) -> Any:
    """The reference's model of ``kind`` for ``task``, with ``overrides`` applied. On
    ``translation``, ``transformer`` is the plain encoder-decoder and ``fusion`` the
    encoder-decoder with fuse-attention (``fuse="both"`` unless overridden)."""
    kind = MODEL_ALIASES.get(kind, kind)
    if (task, kind) in TASK_MODEL_KINDS:
        kind, defaults = TASK_MODEL_KINDS[(task, kind)]
        overrides = {**defaults, **overrides}
    elif kind == "fusion":
        raise ValueError(f"model='fusion' is for the translation task, not {task!r}")
    config_cls = MODEL_KINDS[resolve_model_kind(kind)][0]
    known = {f.name for f in fields(config_cls)}
    if unknown := sorted(set(overrides) - known):
        hint = (" (--fuse and --connection belong to the translation task's encoder-decoder)"
                if {"fuse", "connection"} & set(unknown) else "")  # fmt: skip
        raise ValueError(
            f"the {kind} model of {task!r} has no field(s) {unknown}{hint}; its fields: "
            f"{sorted(known)}"
        )
    return config_cls.preset(task, **overrides)  # type: ignore[attr-defined]

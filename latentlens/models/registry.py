"""Model kinds by name: their config class, their module, and the task presets."""

from __future__ import annotations

from typing import Any

from latentlens.configs import JsonConfig
from latentlens.models.config import TransformerConfig
from latentlens.models.hooked import HookedModel
from latentlens.models.hypernetwork import HypernetworkConfig, HypernetworkTransformer
from latentlens.models.transformer import DecoderTransformer

MODEL_KINDS: dict[str, tuple[type[JsonConfig], type[HookedModel]]] = {
    "transformer": (TransformerConfig, DecoderTransformer),
    "hypernetwork": (HypernetworkConfig, HypernetworkTransformer),
}
MODEL_ALIASES = {"vanilla": "transformer"}


def resolve_model_kind(kind: str) -> str:
    """The canonical name of a model kind (``vanilla`` is the plain ``transformer``)."""
    kind = MODEL_ALIASES.get(kind, kind)
    if kind not in MODEL_KINDS:
        allowed = sorted([*MODEL_KINDS, *MODEL_ALIASES])
        raise ValueError(f"model={kind!r} is unknown; choose one of {allowed}")
    return kind


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
    """The reference's model of ``kind`` for ``task``, with ``overrides`` applied."""
    config_cls = MODEL_KINDS[resolve_model_kind(kind)][0]
    return config_cls.preset(task, **overrides)  # type: ignore[attr-defined]

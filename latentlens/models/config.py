"""Frozen, validated configuration dataclasses for the attention family and transformers.

Every config validates itself at construction: a bad value raises ``ValueError`` naming
the field, the value and what is allowed. Configs round-trip through JSON
(``to_json`` / ``from_json``), which is how a run directory records its model.

The attention family (docs/methods/attention.md) is spanned by two switches:

- ``normalization``: ``softmax`` over keys | ``rms_head`` (RMS across heads) | ``none``;
- ``value_network``: ``linear`` (standard multi-head attention) | ``mlp`` (HYLA's
  per-query-key value network, whose ``activation`` is relu, gelu, silu, sigmoid, tanh
  or identity).

The eight named variants of the paper's Table A1 are entries of :data:`VARIANTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latentlens.configs import (
    JsonConfig,
    require_choice,
    require_divisible,
    require_eps,
    require_positive,
    require_probability,
)

NORMALIZATIONS = ("softmax", "rms_head", "none")
VALUE_NETWORKS = ("linear", "mlp")
ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh", "identity")


@dataclass(frozen=True)
class AttentionVariant:
    """One named point of the attention family (a row of the paper's Table A1)."""

    normalization: str
    value_network: str
    activation: str | None
    official_name: str
    paper_name: str


VARIANTS: dict[str, AttentionVariant] = {
    "softmax": AttentionVariant(
        "softmax", "linear", None, "softmax_attention", "softmax attention"
    ),
    "linear": AttentionVariant("none", "linear", None, "linear_attention", "linear attention"),
    "linear_rms_head": AttentionVariant(
        "rms_head", "linear", None, "linear_attention_rms_head", "linear attention + RMSHead"
    ),
    "hyla": AttentionVariant("rms_head", "mlp", "relu", "linear_hypatt", "HYLA"),
    "hyla_mlp_linear": AttentionVariant(
        "rms_head", "mlp", "identity", "linear_hypatt_mlp_linear", "HYLA - nonlinearity"
    ),
    "hyla_no_rms_head": AttentionVariant(
        "none", "mlp", "relu", "linear_hypatt_no_rms_head", "HYLA - RMSHead"
    ),
    "hyla_mlp_linear_no_rms_head": AttentionVariant(
        "none", "mlp", "identity", "linear_hypatt_mlp_linear_no_rms_head", "HYLA - both"
    ),
    "softmax_hyla": AttentionVariant("softmax", "mlp", "relu", "softmax_hypatt", "HYLA + softmax"),
}
_OFFICIAL_ALIASES = {v.official_name: k for k, v in VARIANTS.items()}


def resolve_variant(name: str) -> str:
    """Canonical variant name for ``name`` (ours, or the official code's ``sequence_mixer``)."""
    if name in VARIANTS:
        return name
    if name in _OFFICIAL_ALIASES:
        return _OFFICIAL_ALIASES[name]
    raise ValueError(
        f"attention={name!r} is not a known attention variant; "
        f"choose one of {sorted(VARIANTS)} (or an official name: {sorted(_OFFICIAL_ALIASES)})"
    )


@dataclass(frozen=True)
class AttentionConfig(JsonConfig):
    """One multi-head attention layer of the family.

    Widths follow the official code: ``qk_dim`` and ``v_dim`` are totals over heads, so a
    head has ``d_head = qk_dim // n_heads`` query/key features and
    ``d_head_v = v_dim // n_heads`` value features.

    ``d_kv_input`` is the width of the key/value stream for cross-attention (``None``:
    self-attention, keys and values come from a ``d_model`` stream). Relative position
    biases are T5-style buckets (docs/methods/attention.md), one table ``[n_heads,
    num_buckets]`` per layer.
    """

    d_model: int
    n_heads: int
    qk_dim: int
    v_dim: int
    normalization: str = "softmax"
    value_network: str = "linear"
    activation: str | None = None
    d_kv_input: int | None = None
    causal: bool = False
    relative_position: bool = False
    num_buckets: int = 16
    max_distance: int = 16
    bidirectional_position: bool = False
    dropout: float = 0.0
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        owner = "AttentionConfig"
        for name in ("d_model", "n_heads", "qk_dim", "v_dim", "num_buckets", "max_distance"):
            require_positive(owner, name, getattr(self, name))
        if self.d_kv_input is not None:
            require_positive(owner, "d_kv_input", self.d_kv_input)
        require_choice(owner, "normalization", self.normalization, NORMALIZATIONS)
        require_choice(owner, "value_network", self.value_network, VALUE_NETWORKS)
        require_divisible(
            owner, "qk_dim", self.qk_dim, self.n_heads, "every head needs the same query/key width"
        )
        if self.value_network == "mlp":
            if self.activation is None:
                object.__setattr__(self, "activation", "relu")
            require_choice(owner, "activation", self.activation, ACTIVATIONS)
            require_divisible(
                owner,
                "v_dim",
                self.v_dim,
                self.n_heads,
                "the mlp value network mixes the heads' values by the latent code, "
                "so all heads must share one value width",
            )
        else:
            if self.activation is not None:
                raise ValueError(
                    f"{owner}.activation={self.activation!r} is invalid with "
                    "value_network='linear': the linear value network has no activation; "
                    "set activation=None or use value_network='mlp'"
                )
            require_divisible(
                owner, "v_dim", self.v_dim, self.n_heads, "every head needs the same value width"
            )
        if self.num_buckets > self.max_distance:
            raise ValueError(
                f"{owner}.num_buckets={self.num_buckets} exceeds max_distance="
                f"{self.max_distance}: T5 bucketing needs num_buckets <= max_distance"
            )
        require_probability(owner, "dropout", self.dropout)
        require_eps(owner, "rms_eps", self.rms_eps)

    @classmethod
    def from_variant(cls, variant: str, **kwargs: Any) -> AttentionConfig:
        """Config of the named variant; ``kwargs`` sets sizes and may override ``activation``."""
        spec = VARIANTS[resolve_variant(variant)]
        activation = kwargs.pop("activation", None) or spec.activation
        return cls(
            normalization=spec.normalization,
            value_network=spec.value_network,
            activation=activation,
            **kwargs,
        )

    @property
    def d_head(self) -> int:
        return self.qk_dim // self.n_heads

    @property
    def d_head_v(self) -> int:
        return self.v_dim // self.n_heads

    @property
    def kv_width(self) -> int:
        return self.d_model if self.d_kv_input is None else self.d_kv_input


@dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """A decoder-only (pre-LN) transformer of docs/methods/attention.md.

    Inputs are either continuous vectors (``d_input``: linear embedding) or token ids
    (``vocab_size``: embedding table); exactly one must be set. ``n_ctx`` is the longest
    sequence the model accepts; with relative positions it is also the number of buckets
    and the maximum distance (the official default). ``attention`` names a variant of
    :data:`VARIANTS`; ``activation`` overrides the value-network nonlinearity of the
    mlp variants (the rebuttal's nonlinearity ablation). ``bidirectional_position`` gives
    keys after the query their own relative-position buckets (for models without a causal
    mask whose positions matter both ways; the official fuzzy-logic code shares one bucket).
    """

    n_ctx: int
    d_output: int
    d_input: int | None = None
    vocab_size: int | None = None
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 8
    qk_dim: int = 16
    v_dim: int = 16
    d_mlp: int = 256
    attention: str = "softmax"
    activation: str | None = None
    causal: bool = False
    relative_position: bool = True
    bidirectional_position: bool = False
    absolute_position: bool = False
    attention_dropout: float = 0.1
    ln_eps: float = 1e-6

    def __post_init__(self) -> None:
        owner = "TransformerConfig"
        for name in ("n_ctx", "d_output", "d_model", "n_layers", "n_heads", "qk_dim", "v_dim"):
            require_positive(owner, name, getattr(self, name))
        require_positive(owner, "d_mlp", self.d_mlp)
        if (self.d_input is None) == (self.vocab_size is None):
            raise ValueError(
                f"{owner}: set exactly one of d_input (continuous inputs) and vocab_size "
                f"(token ids); got d_input={self.d_input!r}, vocab_size={self.vocab_size!r}"
            )
        if self.d_input is not None:
            require_positive(owner, "d_input", self.d_input)
        if self.vocab_size is not None:
            require_positive(owner, "vocab_size", self.vocab_size)
        object.__setattr__(self, "attention", resolve_variant(self.attention))
        if self.activation is not None:
            require_choice(owner, "activation", self.activation, ACTIVATIONS)
            if VARIANTS[self.attention].value_network != "mlp":
                raise ValueError(
                    f"{owner}.activation={self.activation!r} is invalid with "
                    f"attention={self.attention!r}: only the mlp value-network variants "
                    f"({[k for k, v in VARIANTS.items() if v.value_network == 'mlp']}) "
                    "have an activation"
                )
        if self.absolute_position and self.d_model % 2:
            raise ValueError(
                f"{owner}.d_model={self.d_model} must be even with absolute_position=True "
                "(sinusoidal encodings pair sines and cosines)"
            )
        require_probability(owner, "attention_dropout", self.attention_dropout)
        require_eps(owner, "ln_eps", self.ln_eps)
        self.attention_config()  # validates the widths against the heads

    def attention_config(self) -> AttentionConfig:
        """The config of every attention layer of this transformer."""
        return AttentionConfig.from_variant(
            self.attention,
            d_model=self.d_model,
            n_heads=self.n_heads,
            qk_dim=self.qk_dim,
            v_dim=self.v_dim,
            activation=self.activation,
            causal=self.causal,
            relative_position=self.relative_position,
            bidirectional_position=self.bidirectional_position,
            num_buckets=self.n_ctx,
            max_distance=self.n_ctx,
            dropout=self.attention_dropout,
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """The reference's default model for a task: ``fuzzy-logic``, ``sraven`` or
        ``modular-icl`` (the vanilla transformer of docs/methods/models.md).

        Parameter counts at the defaults: fuzzy logic 151,009; SRAVEN 402,824.
        """
        presets: dict[str, dict[str, Any]] = {
            "fuzzy-logic": dict(
                n_ctx=16, d_input=5, d_output=1, d_model=128, n_layers=2, n_heads=8,
                qk_dim=16, v_dim=16, d_mlp=256,
            ),
            "sraven": dict(
                n_ctx=36, d_input=8, d_output=8, d_model=128, n_layers=4, n_heads=16,
                qk_dim=64, v_dim=64, d_mlp=256,
            ),
            # docs/methods/models.md: the vanilla baseline, no attention mask
            "modular-icl": dict(
                n_ctx=32, d_input=17, d_output=1, d_model=128, n_layers=2, n_heads=4,
                qk_dim=128, v_dim=128, d_mlp=512, bidirectional_position=True,
                attention_dropout=0.0,
            ),
        }  # fmt: skip
        if name not in presets:
            raise ValueError(f"preset={name!r} is unknown; choose one of {sorted(presets)}")
        return cls(**{**presets[name], **overrides})

"""Configs: validation messages name field, value and what is allowed; JSON round trip."""

from __future__ import annotations

import pytest

from latentlens.models import VARIANTS, AttentionConfig, TransformerConfig, resolve_variant

BASE = dict(n_ctx=8, d_input=3, d_output=1, d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_transformer_config_round_trips_through_json(variant: str) -> None:
    cfg = TransformerConfig(**BASE, attention=variant, causal=True)
    assert TransformerConfig.from_json(cfg.to_json()) == cfg


def test_attention_config_round_trips_through_json() -> None:
    cfg = AttentionConfig.from_variant(
        "hyla", d_model=8, n_heads=2, qk_dim=4, v_dim=4, activation="silu", d_kv_input=5
    )
    assert AttentionConfig.from_json(cfg.to_json()) == cfg
    assert cfg.activation == "silu" and cfg.value_network == "mlp"


def test_official_names_resolve_to_ours() -> None:
    assert resolve_variant("linear_hypatt") == "hyla"
    assert TransformerConfig(**BASE, attention="softmax_attention").attention == "softmax"
    assert {v.official_name for v in VARIANTS.values()} == {
        "softmax_attention", "linear_attention", "linear_attention_rms_head", "linear_hypatt",
        "linear_hypatt_mlp_linear", "linear_hypatt_no_rms_head",
        "linear_hypatt_mlp_linear_no_rms_head", "softmax_hypatt",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(attention="flash"), r"attention='flash' is not a known attention variant"),
        (dict(qk_dim=10), r"qk_dim=10 is not divisible by n_heads=4"),
        (dict(v_dim=6), r"v_dim=6 is not divisible by n_heads=4"),
        (dict(v_dim=6, attention="hyla"), r"v_dim=6 .*mlp value network.*share one value width"),
        (dict(d_model=0), r"d_model=0 is invalid: it must be a positive integer"),
        (dict(n_layers=-1), r"n_layers=-1 is invalid"),
        (dict(n_heads=2.5), r"n_heads=2.5 is invalid"),
        (dict(attention_dropout=1.0), r"attention_dropout=1.0 is invalid.*\[0, 1\)"),
        (dict(activation="swish", attention="hyla"), r"activation='swish' is invalid: choose"),
        (dict(activation="gelu"), r"activation='gelu' is invalid with attention='softmax'"),
        (dict(vocab_size=10), r"set exactly one of d_input .* and vocab_size"),
        (dict(d_input=None), r"set exactly one of d_input"),
        (
            dict(absolute_position=True, d_model=15, n_heads=5, qk_dim=5, v_dim=5),
            r"d_model=15 must be even",
        ),
    ],
)
def test_bad_transformer_config_names_field_value_and_fix(overrides, match) -> None:
    with pytest.raises(ValueError, match=match):
        TransformerConfig(**{**BASE, **overrides})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(normalization="l2"), r"normalization='l2' is invalid: choose one of"),
        (dict(value_network="deep"), r"value_network='deep' is invalid"),
        (dict(activation="relu"), r"activation='relu' is invalid with value_network='linear'"),
        (dict(num_buckets=32, max_distance=16), r"num_buckets=32 exceeds max_distance=16"),
        (dict(rms_eps=0.0), r"rms_eps=0.0 is invalid"),
        (dict(d_kv_input=0), r"d_kv_input=0 is invalid"),
    ],
)
def test_bad_attention_config_names_field_value_and_fix(overrides, match) -> None:
    with pytest.raises(ValueError, match=match):
        AttentionConfig(**{**dict(d_model=8, n_heads=2, qk_dim=4, v_dim=4), **overrides})


def test_unknown_json_fields_and_bad_json_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['n_head'\]"):
        TransformerConfig.from_dict({**BASE, "n_head": 4})
    with pytest.raises(ValueError, match="not valid JSON"):
        TransformerConfig.from_json("{not json")
    with pytest.raises(ValueError, match="unknown"):
        TransformerConfig.preset("imagenet")


def test_configs_are_frozen() -> None:
    cfg = TransformerConfig(**BASE)
    with pytest.raises(AttributeError):
        cfg.d_model = 32  # type: ignore[misc]

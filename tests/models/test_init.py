"""Every parameter of the decoder transformer starts as the official code's does.

The expectations are Flax's defaults, worked out by hand: ``Dense``/``DenseGeneral``
kernels are LeCun normal (``variance_scaling(1, "fan_in", "truncated_normal")``: a normal
truncated at two of its standard deviations, rescaled to variance 1/fan_in, fan_in the
product of the contracted input dims), biases zero; ``LayerNorm`` scale one, bias zero;
the relative-position table ``[heads, buckets]`` and token embeddings
``default_embed_init`` (``variance_scaling(1, "fan_in", "normal", out_axis=0)``: an
untruncated normal, and for a 2-D table Flax's fan_in comes out as the column count).

Tolerances: a sample standard deviation of n draws has relative standard error about
1/sqrt(2n); every tested tensor has n >= 4096 (error <= 1.1%), so 5% is over 4 errors.
"""

from __future__ import annotations

import math

import pytest
import torch

from latentlens.models import DecoderTransformer
from latentlens.models.config import TransformerConfig
from latentlens.models.init import _TRUNCATED_STD, embedding_normal_, lecun_normal_

# A normal truncated at +-2 of its own standard deviations has standard deviation
# sqrt(1 - 4 phi(2) / (2 Phi(2) - 1)) of the untruncated one (phi, Phi: the unit normal's
# density and distribution function).
_PHI2 = math.exp(-2.0) / math.sqrt(2 * math.pi)
_TRUNCATED_SHRINK = math.sqrt(1 - 4 * _PHI2 / math.erf(2 / math.sqrt(2)))
SHARE_BEYOND_TWO_SIGMA = 1 - math.erf(2 / math.sqrt(2))  # 4.55% for a normal
REL = 0.05


def test_lecun_normal_has_variance_one_over_fan_in_and_is_truncated() -> None:
    torch.manual_seed(0)
    fan_in = 50
    weights = lecun_normal_(torch.empty(400, fan_in), fan_in=fan_in)
    std = 1 / math.sqrt(fan_in)
    assert weights.std().item() == pytest.approx(std, rel=REL)
    # Truncated at 2 of the *pre-truncation* standard deviations std / shrink.
    assert weights.abs().max().item() <= 2 * std / _TRUNCATED_SHRINK + 1e-6
    assert abs(_TRUNCATED_SHRINK - _TRUNCATED_STD) < 1e-12  # the library's constant


def test_embedding_normal_is_untruncated_with_variance_one_over_fan_in() -> None:
    torch.manual_seed(0)
    table = embedding_normal_(torch.empty(100, 400), fan_in=36)
    std = 1 / math.sqrt(36)
    assert table.std().item() == pytest.approx(std, rel=REL)
    beyond = (table.abs() > 2 * std).float().mean().item()
    # 40,000 draws: the binomial standard error of the share is 0.1 points.
    assert beyond == pytest.approx(SHARE_BEYOND_TWO_SIGMA, abs=0.005)


def expected_std(name: str, cfg: TransformerConfig) -> float | None:
    """The standard deviation the official code gives parameter ``name`` (None: zeros or
    ones, tested separately)."""
    top = {"embed.weight": cfg.d_input, "unembed.weight": cfg.d_model}
    if name in top:
        return 1 / math.sqrt(top[name])
    fans = {
        "attn.W_Q": cfg.d_model,
        "attn.W_K": cfg.d_model,
        "attn.W_V": cfg.d_model,
        "attn.W_O": cfg.v_dim,  # out kernel [heads, d_head_v, d_model] contracts both
        "mlp.fc_in.weight": cfg.d_model,
        "mlp.fc_out.weight": cfg.d_mlp,
        "attn.rel_pos.table": cfg.n_ctx,  # [heads, buckets]: fan_in = buckets
    }
    for suffix, fan_in in fans.items():
        if name.endswith(suffix):
            return 1 / math.sqrt(fan_in)
    return None


@pytest.mark.parametrize("attention", ["softmax", "hyla"])
def test_every_transformer_parameter_starts_as_flax_defaults(attention: str) -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(
        n_ctx=128, d_input=64, d_output=64, d_model=128, n_layers=1, n_heads=32,
        qk_dim=128, v_dim=128, d_mlp=256, attention=attention,
    )  # fmt: skip
    model = DecoderTransformer(cfg)
    for name, param in model.named_parameters():
        std = expected_std(name, cfg)
        if std is not None:
            assert param.numel() >= 4096, name
            assert param.std().item() == pytest.approx(std, rel=REL), name
            assert param.mean().abs().item() < 5 * std / math.sqrt(param.numel()), name
        elif name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
            assert torch.equal(param, torch.ones_like(param)), name
        else:
            assert torch.equal(param, torch.zeros_like(param)), name
    table = model.blocks[0].attn.rel_pos.table
    beyond = (table.abs() > 2 / math.sqrt(cfg.n_ctx)).float().mean().item()
    assert beyond == pytest.approx(SHARE_BEYOND_TWO_SIGMA, abs=0.015)  # untruncated


def test_token_embedding_is_flax_embed_init() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(n_ctx=8, vocab_size=512, d_output=4, d_model=64)
    weight = DecoderTransformer(cfg).embed.weight
    assert weight.std().item() == pytest.approx(1 / math.sqrt(cfg.d_model), rel=REL)
    beyond = (weight.abs() > 2 / math.sqrt(cfg.d_model)).float().mean().item()
    assert beyond == pytest.approx(SHARE_BEYOND_TWO_SIGMA, abs=0.005)

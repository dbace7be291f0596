"""The hooked decoder-only transformer: hook contract, masking, gradients, bad input."""

from __future__ import annotations

import re

import pytest
import torch

import latentlens
from latentlens.models import VARIANTS, DecoderTransformer, TransformerConfig

TINY = dict(n_ctx=6, d_input=3, d_output=2, d_model=12, n_layers=2, n_heads=3,
            qk_dim=6, v_dim=6, d_mlp=16)  # fmt: skip


def tiny_model(variant: str, **overrides) -> DecoderTransformer:
    torch.manual_seed(0)
    return DecoderTransformer(TransformerConfig(**{**TINY, "attention": variant, **overrides}))


def expected_shapes(cfg: TransformerConfig, batch: int, pos: int) -> dict[str, tuple]:
    h, d, dv = cfg.n_heads, cfg.qk_dim // cfg.n_heads, cfg.v_dim // cfg.n_heads
    shapes = {"hook_embed": (batch, pos, cfg.d_model)}
    for layer in range(cfg.n_layers):
        block = f"blocks.{layer}."
        for name in (
            "hook_resid_pre",
            "hook_resid_mid",
            "hook_resid_post",
            "hook_attn_out",
            "hook_mlp_out",
        ):
            shapes[block + name] = (batch, pos, cfg.d_model)
        shapes[block + "mlp.hook_pre"] = (batch, pos, cfg.d_mlp)
        shapes[block + "mlp.hook_post"] = (batch, pos, cfg.d_mlp)
        shapes[block + "attn.hook_q"] = (batch, pos, h, d)
        shapes[block + "attn.hook_k"] = (batch, pos, h, d)
        shapes[block + "attn.hook_v"] = (batch, pos, h, dv)
        shapes[block + "attn.hook_z"] = (batch, pos, h, dv)
        shapes[block + "attn.hook_attn_scores"] = (batch, h, pos, pos)
        shapes[block + "attn.hook_pattern"] = (batch, h, pos, pos)
        if VARIANTS[cfg.attention].value_network == "mlp":
            shapes[block + "attn.hook_vnet_pre"] = (batch, pos, pos, dv)
            shapes[block + "attn.hook_vnet_post"] = (batch, pos, pos, dv)
    return shapes


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_run_with_cache_exposes_every_documented_hook(variant: str) -> None:
    model = tiny_model(variant).eval()
    x = torch.rand(4, 5, 3)
    out, cache = model.run_with_cache(x)
    assert out.shape == (4, 5, 2)
    shapes = {name: tuple(t.shape) for name, t in cache.items()}
    assert shapes == expected_shapes(model.cfg, 4, 5)
    codes = latentlens.latent_codes(cache, layer=1)
    assert codes.shape == (4, 5, 5, 3)
    torch.testing.assert_close(codes[2, 4, 1], cache["blocks.1.attn.hook_pattern"][2, :, 4, 1])


def test_residual_stream_hooks_compose_like_the_equations() -> None:
    model = tiny_model("hyla").eval()
    _, cache = model.run_with_cache(torch.rand(2, 5, 3))
    for layer in range(2):
        b = f"blocks.{layer}."
        torch.testing.assert_close(
            cache[b + "hook_resid_mid"], cache[b + "hook_resid_pre"] + cache[b + "hook_attn_out"]
        )
        torch.testing.assert_close(
            cache[b + "hook_resid_post"], cache[b + "hook_resid_mid"] + cache[b + "hook_mlp_out"]
        )
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])


@pytest.mark.parametrize("variant", ["softmax", "hyla"])
def test_no_hook_output_is_bit_identical_to_plain_forward(variant: str) -> None:
    model = tiny_model(variant).eval()
    x = torch.rand(3, 6, 3)
    plain = model(x)
    cached, _ = model.run_with_cache(x, names_filter=lambda n: n.endswith("hook_pattern"))
    hooked_noop = model.run_with_hooks(
        x, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda t, hook: t)]
    )
    after = model(x)
    assert torch.equal(plain, cached)
    assert torch.equal(plain, hooked_noop)
    assert torch.equal(plain, after)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_zeroing_one_head_changes_the_output(variant: str) -> None:
    model = tiny_model(variant).eval()
    x = torch.rand(2, 5, 3)

    def zero_head(z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        z[:, :, 1] = 0.0
        return z

    ablated = model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    assert not torch.allclose(ablated, model(x))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_causal_mask_keeps_later_tokens_from_earlier_outputs(variant: str) -> None:
    model = tiny_model(variant, causal=True).eval()
    x = torch.rand(2, 6, 3)
    changed = x.clone()
    changed[:, 4:] = torch.rand(2, 2, 3)
    a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_without_causal_mask_later_tokens_do_reach_earlier_outputs() -> None:
    model = tiny_model("softmax").eval()
    x = torch.rand(2, 6, 3)
    changed = x.clone()
    changed[:, 5] = torch.rand(2, 3)
    assert not torch.allclose(model(x)[:, 0], model(changed)[:, 0])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_parameter_receives_a_gradient(variant: str) -> None:
    model = tiny_model(variant, absolute_position=True).train()
    model(torch.rand(4, 6, 3)).square().mean().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert param.grad.abs().sum() > 0, name


def test_token_inputs_use_an_embedding_table() -> None:
    model = tiny_model("hyla", d_input=None, vocab_size=7)
    ids = torch.randint(0, 7, (2, 6))
    _, cache = model.run_with_cache(ids, names_filter="hook_embed")
    torch.testing.assert_close(cache["hook_embed"], model.embed.weight[ids])


def test_absolute_position_adds_sinusoids() -> None:
    model = tiny_model("softmax", absolute_position=True).eval()
    _, cache = model.run_with_cache(torch.rand(1, 6, 3))
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"]
    )
    assert cache["hook_pos_embed"][0, 1].abs().sum() > 0
    assert cache["hook_pos_embed"].shape == (1, 6, 12)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (torch.rand(6, 3), r"inputs has shape \[6, 3\], expected \[batch, pos, d_input\]"),
        (torch.rand(2, 6, 4), r"inputs has shape \[2, 6, 4\].*\[\*, \*, 3\]"),
        (torch.rand(2, 7, 3), r"7 positions.*n_ctx=6"),
        (torch.ones(2, 6, 3, dtype=torch.long), "must be floating point"),
    ],
)
def test_bad_continuous_inputs_name_the_tensor_and_shape(inputs, match) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_model("softmax")(inputs)


def test_bad_token_ids_are_rejected() -> None:
    model = tiny_model("softmax", d_input=None, vocab_size=5)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 4\]"):
        model(torch.tensor([[0, 1, 5]]))
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.rand(1, 3))


def test_latent_codes_without_the_pattern_in_cache_explains_the_fix() -> None:
    model = tiny_model("softmax")
    _, cache = model.run_with_cache(torch.rand(1, 4, 3), names_filter="hook_embed")
    with pytest.raises(KeyError, match="names_filter"):
        latentlens.latent_codes(cache, layer=0)
    _, cache = model.run_with_cache(torch.rand(1, 4, 3), names_filter=lambda n: "pattern" in n)
    n_layers = model.cfg.n_layers
    held = re.escape(str(list(range(n_layers))))
    with pytest.raises(KeyError, match=rf"holds layers {held} .* has no layer {n_layers}"):
        latentlens.latent_codes(cache, layer=n_layers)
    with pytest.raises(ValueError, match="layers count from 0"):
        latentlens.latent_codes(cache, layer=-1)


@pytest.mark.parametrize(("preset", "count"), [("fuzzy-logic", 151_009), ("sraven", 402_824)])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parameter_counts_match_the_reference(preset: str, count: int, variant: str) -> None:
    model = DecoderTransformer(TransformerConfig.preset(preset, attention=variant))
    assert sum(p.numel() for p in model.parameters()) == count


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
def test_last_positions_give_the_full_outputs_and_gradients_there(
    variant: str, causal: bool
) -> None:
    """The last block computing only the last n positions is the same function there, with
    the same gradient of any loss that reads them: its queries take the relative bias and
    the causal mask of their own positions, its keys and values every position (padding
    included). float64, so that only the summation order may differ (measured: ~1e-16)."""
    model = tiny_model(variant, causal=causal).double().eval()
    x = torch.rand(3, 6, 3, dtype=torch.float64)
    key_mask = torch.ones(3, 6, dtype=torch.bool)
    key_mask[1, :2] = False
    params = dict(model.named_parameters())
    for n in (1, 2, 6):
        weights = torch.randn(3, n, 2, dtype=torch.float64)
        full = model(x, key_mask=key_mask)[:, -n:]
        part = model(x, key_mask=key_mask, last_positions=n)
        torch.testing.assert_close(part, full, rtol=1e-12, atol=1e-12)
        full_grads = torch.autograd.grad((full * weights).sum(), list(params.values()))
        part_grads = torch.autograd.grad((part * weights).sum(), list(params.values()))
        for name, a, b in zip(params, full_grads, part_grads, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12, msg=f"{name}, n={n}")


def test_last_positions_shrink_only_the_last_blocks_later_hooks() -> None:
    model = tiny_model("hyla").eval()
    names = ["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.attn.hook_k"]
    names += ["blocks.1.attn.hook_q", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"]
    out, cache = model.run_with_cache(
        torch.rand(2, 6, 3), last_positions=2, names_filter=lambda name: name in names
    )
    shapes = {name: tuple(cache[name].shape) for name in names}
    assert out.shape == (2, 2, 2)
    assert shapes == {
        "blocks.0.hook_resid_post": (2, 6, 12),
        "blocks.1.hook_resid_pre": (2, 6, 12),
        "blocks.1.attn.hook_k": (2, 6, 3, 2),
        "blocks.1.attn.hook_q": (2, 2, 3, 2),
        "blocks.1.attn.hook_pattern": (2, 3, 2, 6),
        "blocks.1.hook_resid_post": (2, 2, 12),
    }


def entering_streams(name: str) -> bool:
    return name.endswith("hook_resid_pre")


@pytest.mark.parametrize("variant", ["softmax", "hyla"])
def test_a_pass_from_a_blocks_incoming_stream_is_the_rest_of_the_whole_pass(variant) -> None:
    """``start_at_layer`` (TransformerLens's): blocks l, l + 1, ... on the cached
    ``blocks.{l}.hook_resid_pre`` give the whole pass's outputs bit for bit (the same
    operations on the same numbers), with ``last_positions`` too; earlier hooks do not run."""
    model = tiny_model(variant, n_layers=3, causal=True).eval()
    x = torch.rand(4, 6, 3)
    key_mask = torch.ones(4, 6, dtype=torch.bool)
    key_mask[2, :3] = False
    with torch.no_grad():
        full, cache = model.run_with_cache(x, key_mask=key_mask, names_filter=entering_streams)
        for layer in range(3):
            stream = cache[f"blocks.{layer}.hook_resid_pre"]
            assert torch.equal(model(stream, key_mask=key_mask, start_at_layer=layer), full)
            last = model(x, key_mask=key_mask, last_positions=2)
            part = model(stream, key_mask=key_mask, last_positions=2, start_at_layer=layer)
            assert torch.equal(part, last)
        entering = cache["blocks.2.hook_resid_pre"]
        _, later = model.run_with_cache(entering, start_at_layer=2, names_filter=entering_streams)
    assert list(later.keys()) == ["blocks.2.hook_resid_pre"]
    with pytest.raises(ValueError, match="start_at_layer=3 is not a block of this 3-layer"):
        model(stream, start_at_layer=3)
    with pytest.raises(ValueError, match=r"\[batch, pos, d_model\]"):
        model(x, start_at_layer=1)  # the inputs, not the stream
    with pytest.raises(ValueError, match="torch.float64 but the model holds torch.float32"):
        model(stream.double(), start_at_layer=1)


@pytest.mark.parametrize("n", [0, 7])
def test_last_positions_outside_the_input_are_rejected(n: int) -> None:
    with pytest.raises(ValueError, match=rf"last_positions={n} is not in \[1, 6\]"):
        tiny_model("softmax")(torch.rand(2, 6, 3), last_positions=n)

"""The hypernetwork transformer: the task MLP it generates, what it reads, its hooks."""

from __future__ import annotations

import math

import pytest
import torch

from latentlens.models import HypernetworkConfig, HypernetworkTransformer, build_model

TINY = dict(n_ctx=6, d_input=5, d_model=16, n_heads=2, qk_dim=8, v_dim=8, d_mlp=32,
            latent_dim=3, task_hidden=7)  # fmt: skip


def tiny_model(**overrides) -> HypernetworkTransformer:
    torch.manual_seed(0)
    return HypernetworkTransformer(HypernetworkConfig(**{**TINY, **overrides})).eval()


def explicit_task_mlp(
    model: HypernetworkTransformer, z_hat: torch.Tensor, x: torch.Tensor
) -> float:
    """readout(GELU(W x)) with W = sum_m z_m theta_m, by loops in float64."""
    theta = model.task_modules.detach().double()
    hidden = []
    for row in range(theta.shape[1]):
        pre = sum(
            float(z_hat[m]) * float(theta[m, row, i]) * float(x[i])
            for m in range(theta.shape[0])
            for i in range(theta.shape[2])
        )
        hidden.append(
            0.5 * pre * (1 + math.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)))
        )
    weight = model.readout.weight.detach().double()[0]
    bias = float(model.readout.bias.detach())
    return sum(float(w) * h for w, h in zip(weight, hidden, strict=True)) + bias


def test_fixed_latent_gives_the_explicit_task_mlp() -> None:
    model = tiny_model()
    inputs = torch.randn(3, 6, 5)
    fixed = torch.tensor([0.7, -0.2, 1.3])
    out = model.run_with_hooks(
        inputs, fwd_hooks=[("hook_task_latent", lambda act, hook: fixed.expand_as(act))]
    )
    assert out.shape == (3, 1, 1)
    for b in range(3):
        expected = explicit_task_mlp(model, fixed, inputs[b, -1, :4])
        assert out[b, 0, 0].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
        direct = model.task_mlp(fixed, inputs[b, -1:, :4])
        assert direct.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_the_transformer_reads_the_context_and_a_zero_token_never_the_query() -> None:
    model = tiny_model()
    inputs = torch.randn(2, 6, 5)
    _, cache = model.run_with_cache(inputs, names_filter=["hook_task_latent"])
    changed = inputs.clone()
    changed[:, -1] = torch.randn(2, 5)  # another query x (and a nonzero target slot)
    _, cache2 = model.run_with_cache(changed, names_filter=["hook_task_latent"])
    torch.testing.assert_close(cache["hook_task_latent"], cache2["hook_task_latent"])
    context = inputs.clone()
    context[:, 0, -1] += 1.0  # another context target
    _, cache3 = model.run_with_cache(context, names_filter=["hook_task_latent"])
    assert not torch.allclose(cache["hook_task_latent"], cache3["hook_task_latent"])
    # the last position the transformer saw is all zeros
    _, cache4 = model.run_with_cache(inputs, names_filter=["transformer.hook_embed"])
    embed = model.transformer.embed
    torch.testing.assert_close(cache4["transformer.hook_embed"][:, -1], embed.bias.expand(2, -1))


def test_hooks_have_their_documented_shapes_and_every_parameter_learns() -> None:
    model = tiny_model().train()
    inputs = torch.randn(4, 6, 5)
    out, cache = model.run_with_cache(inputs)
    assert cache["hook_task_latent"].shape == (4, 3)
    assert cache["hook_task_weights"].shape == (4, 7, 4)
    assert cache["hook_task_hidden"].shape == (4, 7)
    assert cache["transformer.blocks.1.hook_resid_post"].shape == (4, 6, 16)
    assert cache["transformer.blocks.0.attn.hook_pattern"].shape == (4, 2, 6, 6)
    out.square().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing


def test_no_causal_mask_and_bad_input() -> None:
    model = tiny_model()
    assert not model.transformer.cfg.causal and model.transformer.cfg.bidirectional_position
    _, cache = model.run_with_cache(torch.randn(1, 6, 5), names_filter=lambda n: "pattern" in n)
    assert (cache["transformer.blocks.0.attn.hook_pattern"][0, :, 0, 1:] > 0).all()
    with pytest.raises(ValueError, match="d_x \\+ d_output"):
        model(torch.randn(2, 6, 4))
    with pytest.raises(ValueError, match="n_ctx=1"):
        HypernetworkConfig(n_ctx=1, d_input=5)
    with pytest.raises(ValueError, match="d_input=1 must exceed d_output=1"):
        HypernetworkConfig(n_ctx=4, d_input=1)
    with pytest.raises(ValueError, match="task_activation='swish'"):
        HypernetworkConfig(n_ctx=4, d_input=5, task_activation="swish")
    with pytest.raises(ValueError, match="takes a HypernetworkConfig"):
        build_model("hypernetwork", model.transformer.cfg)


def test_reference_sizes() -> None:
    cfg = HypernetworkConfig.preset("modular-icl")
    model = HypernetworkTransformer(cfg)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.task_hidden, cfg.latent_dim) == (
        64,
        2,
        4,
        32,
        6,
    )
    assert model.task_modules.shape == (6, 32, 16)

"""The fast attention path against the slow per-pair hypernetwork reference, and PyTorch's MHA."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from latentlens.models import VARIANTS, Attention, AttentionConfig
from tests.models.reference_attention import reference_attention


def random_attention(variant: str, seed: int = 0, **overrides) -> Attention:
    """An attention layer in float64 with every parameter (biases too) random."""
    sizes = dict(d_model=6, n_heads=3, qk_dim=6, v_dim=9)
    cfg = AttentionConfig.from_variant(variant, **{**sizes, **overrides})
    attn = Attention(cfg).double().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in attn.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64))
    return attn


def relative_error(fast: torch.Tensor, slow: torch.Tensor) -> float:
    return float((fast - slow).detach().norm() / slow.detach().norm())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
def test_fast_path_equals_per_pair_hypernetwork(variant: str, causal: bool) -> None:
    attn = random_attention(
        variant, causal=causal, relative_position=True, num_buckets=4, max_distance=5
    )
    x = torch.randn(2, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pattern = {}
    attn.hook_pattern.add_hook(lambda t, hook: pattern.setdefault("a", t))
    out = attn(x)
    slow_out, slow_a = reference_attention(dict(attn.named_parameters()), attn.cfg, x)
    # float64 throughout; 1e-10 leaves ~6 orders of magnitude over accumulated rounding.
    assert relative_error(out, slow_out) < 1e-10
    assert relative_error(pattern["a"], slow_a) < 1e-10


@pytest.mark.parametrize("variant", ["softmax", "hyla", "linear"])
@pytest.mark.parametrize("causal", [False, True])
def test_trailing_queries_equal_the_reference_rows(variant: str, causal: bool) -> None:
    """Self-attention of the last queries alone (``query_start``, the queries given apart
    from the keys or sliced from the stream after its fused projection) gives the per-pair
    reference's rows of those queries: their relative bias and causal mask are those of
    their own positions."""
    attn = random_attention(
        variant, causal=causal, relative_position=True, num_buckets=4, max_distance=5
    )
    x = torch.randn(2, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    slow_out, _ = reference_attention(dict(attn.named_parameters()), attn.cfg, x)
    for start in (1, 5, 6):
        out = attn(x[:, start:], kv=x, query_start=start)
        assert relative_error(out, slow_out[:, start:]) < 1e-10, start
        sliced = attn(x, query_start=start)
        assert sliced.shape == (2, 7 - start, 6)
        assert relative_error(sliced, slow_out[:, start:]) < 1e-10, start
    with pytest.raises(ValueError, match=r"query_start=6 puts the 2 queries outside"):
        attn(x[:, 5:], kv=x, query_start=6)
    with pytest.raises(ValueError, match=r"query_start=7 leaves no query of the 7"):
        attn(x, query_start=7)


@pytest.mark.parametrize("variant", ["softmax", "hyla", "linear_rms_head"])
def test_cross_attention_with_padding_equals_reference(variant: str) -> None:
    attn = random_attention(variant, d_kv_input=5)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=gen)
    kv = torch.randn(2, 5, 5, dtype=torch.float64, generator=gen)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out = attn(x, kv, key_mask=key_mask)
    slow_out, _ = reference_attention(dict(attn.named_parameters()), attn.cfg, x, kv, key_mask)
    assert relative_error(out, slow_out) < 1e-10


@pytest.mark.parametrize("variant", ["softmax", "linear", "hyla"])
@pytest.mark.parametrize("cross", [False, True])
def test_every_parameters_gradient_equals_finite_differences(variant: str, cross: bool) -> None:
    """The projections share one matmul on concatenated weights: each weight must still
    get its own gradient. Checked against central differences in float64 (gradcheck)."""
    overrides = dict(d_kv_input=5) if cross else dict(relative_position=True, num_buckets=4)
    attn = random_attention(variant, **overrides)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 6, dtype=torch.float64, generator=gen)
    kv = torch.randn(2, 5, 5, dtype=torch.float64, generator=gen) if cross else None
    names = [name for name, _ in attn.named_parameters()]

    def output(*params: torch.Tensor) -> torch.Tensor:
        return functional_call(attn, dict(zip(names, params, strict=True)), (x, kv))

    params = tuple(p.detach().clone().requires_grad_() for p in attn.parameters())
    assert torch.autograd.gradcheck(output, params, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_reproduces_torch_multihead_attention(causal: bool) -> None:
    torch.manual_seed(0)
    d_model, heads, d_head = 16, 4, 4
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=True, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    attn = Attention(
        AttentionConfig.from_variant(
            "softmax", d_model=d_model, n_heads=heads, qk_dim=d_model, v_dim=d_model, causal=causal
        )
    ).eval()
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for ours_w, ours_b, weight, bias in (
            (attn.W_Q, attn.b_Q, w_q, b_q),
            (attn.W_K, attn.b_K, w_k, b_k),
            (attn.W_V, attn.b_V, w_v, b_v),
        ):
            # torch: [head * d_head, d_model] rows; ours: [head, d_model, d_head]
            ours_w.copy_(weight.reshape(heads, d_head, d_model).transpose(1, 2))
            ours_b.copy_(bias.reshape(heads, d_head))
        attn.W_O.copy_(mha.out_proj.weight.detach().T.reshape(heads, d_head, d_model))
        attn.b_O.copy_(mha.out_proj.bias.detach())

    x = torch.randn(3, 6, d_model)
    torch_mask = torch.ones(6, 6, dtype=torch.bool).triu(1) if causal else None
    expected, expected_weights = mha(
        x, x, x, attn_mask=torch_mask, need_weights=True, average_attn_weights=False
    )
    seen = {}
    attn.hook_pattern.add_hook(lambda t, hook: seen.setdefault("pattern", t))
    out = attn(x)
    # float32: both sides round differently in O(d_model) sums of O(1) terms.
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(seen["pattern"], expected_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["linear_rms_head", "hyla", "hyla_mlp_linear"])
def test_rms_head_gives_exact_zero_on_masked_pairs(variant: str) -> None:
    attn = random_attention(variant, causal=True)
    seen = {}
    attn.hook_pattern.add_hook(lambda t, hook: seen.setdefault("a", t))
    attn(torch.randn(2, 6, 6, dtype=torch.float64))
    masked = ~torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.all(seen["a"][:, :, masked] == 0.0)
    assert torch.all(seen["a"][:, :, ~masked] != 0.0)


def test_rms_head_normalises_each_code_across_heads() -> None:
    attn = random_attention("linear_rms_head")
    seen = {}
    attn.hook_pattern.add_hook(lambda t, hook: seen.setdefault("a", t))
    attn(torch.randn(2, 5, 6, dtype=torch.float64))
    rms = seen["a"].square().mean(dim=1).sqrt()
    # rms(a) = rms(s) / sqrt(rms(s)^2 + eps): 1 up to eps / (2 rms(s)^2) for O(1) scores.
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=0, atol=1e-4)


def test_attention_dropout_mask_is_shared_by_batch_and_heads_and_unbiased() -> None:
    attn = random_attention("softmax", dropout=0.5).train()
    x = torch.randn(1, 4, 6, dtype=torch.float64).expand(3, 4, 6)
    torch.manual_seed(0)
    out = attn(x)
    # one mask for the whole batch: identical inputs stay identical
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)
    torch.testing.assert_close(out[0], out[2], rtol=0, atol=0)
    # inverted scaling: the mean over many masks is the evaluation output
    draws = torch.stack([attn(x[:1]) for _ in range(4000)]).mean(0)
    expected = attn.eval()(x[:1])
    assert relative_error(draws, expected) < 0.05

"""The fused residual add and layer norm against the equations in float64, and a
transformer's fused residual stream against its PyTorch forward and gradients.

Tolerances: the kernel sums a row's C terms (and, backward, a column's N rows) in float32
in another order than the float64 reference; with C = 96 and N up to 3 * 17 rows the
relative error of a sum is a few float32 ulps (~1e-6), so values are compared at 1e-5
relative and absolute."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from latentlens.kernels import layer_norm
from latentlens.kernels.layer_norm import (
    add_layer_norm,
    embed_forward_values,
    embed_layer_norm,
    forward_values,
    kept_add_layer_norm,
    library,
)
from latentlens.models import use_fused_kernels
from latentlens.models.config import TransformerConfig
from latentlens.models.layer_norm import LayerNorm
from latentlens.models.transformer import DecoderTransformer

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def add_norm_float64(x, delta, delta_bias, weight, bias, eps):
    """s = x + delta + delta_bias; y = (s - mean) / sqrt(mean((s - mean)^2) + eps) w + b,
    over the last dimension: the equations, in float64."""
    s = x.double()
    if delta is not None:
        s = s + delta.double()
    if delta_bias is not None:
        s = s + delta_bias.double()
    mean = s.mean(-1, keepdim=True)
    variance = ((s - mean) ** 2).mean(-1, keepdim=True)
    return s, (s - mean) / torch.sqrt(variance + eps) * weight.double() + bias.double()


@pytest.mark.parametrize("has_delta", [True, False])
@pytest.mark.parametrize("has_delta_bias", [True, False])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_kernel_computes_the_equations(has_delta, has_delta_bias, threads) -> None:
    """Values and every gradient, with the sum's own gradient (the residual stream's)
    flowing in beside the normed output's; 96 columns and 3 x 17 rows, so that no count
    is a multiple of a vector's or of the thread count."""
    gen = torch.Generator().manual_seed(0)
    shape = (3, 17, 96)
    leaves = {
        "x": torch.randn(shape, generator=gen) * 2 + 0.5,
        "delta": torch.randn(shape, generator=gen) if has_delta else None,
        "delta_bias": torch.randn(96, generator=gen) if has_delta_bias else None,
        "weight": torch.randn(96, generator=gen),
        "bias": torch.randn(96, generator=gen),
    }
    ours = {k: None if v is None else v.clone().requires_grad_() for k, v in leaves.items()}
    exact = {k: None if v is None else v.double().requires_grad_() for k, v in leaves.items()}
    d_total, d_normed = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        total, normed, _, _ = add_layer_norm(*ours.values(), 1e-6)
        ((total * d_total).sum() + (normed * d_normed).sum()).backward()
    finally:
        torch.set_num_threads(before)
    total_exact, normed_exact = add_norm_float64(*exact.values(), 1e-6)
    ((total_exact * d_total.double()).sum() + (normed_exact * d_normed.double()).sum()).backward()
    torch.testing.assert_close(total.double(), total_exact.detach(), **TOLERANCE)
    torch.testing.assert_close(normed.double(), normed_exact.detach(), **TOLERANCE)
    for name, leaf in ours.items():
        if leaf is not None:
            torch.testing.assert_close(leaf.grad.double(), exact[name].grad, **TOLERANCE,
                                       msg=name)  # fmt: skip


@pytest.mark.parametrize("width", [1, 5, 8])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_embedding_kernel_computes_the_equations(width, threads) -> None:
    """s = inputs embed^T + embed_bias, then s's layer norm: values and the gradients of
    embed, embed_bias and the norm's weight and bias, with s's own gradient flowing in;
    100 columns (6 vectors of 16 and a remainder) and 3 x 17 rows."""
    gen = torch.Generator().manual_seed(3)
    inputs = torch.randn(3, 17, width, generator=gen)
    leaves = {
        "embed": torch.randn(100, width, generator=gen),
        "embed_bias": torch.randn(100, generator=gen),
        "weight": torch.randn(100, generator=gen),
        "bias": torch.randn(100, generator=gen),
    }
    ours = {k: v.clone().requires_grad_() for k, v in leaves.items()}
    exact = {k: v.double().requires_grad_() for k, v in leaves.items()}
    d_total, d_normed = (torch.randn(3, 17, 100, generator=gen) for _ in range(2))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        total, normed, _, _ = embed_layer_norm(inputs, *ours.values(), 1e-6)
        ((total * d_total).sum() + (normed * d_normed).sum()).backward()
    finally:
        torch.set_num_threads(before)
    embedded = F.linear(inputs.double(), exact["embed"], exact["embed_bias"])
    total_exact, normed_exact = add_norm_float64(
        embedded, None, None, exact["weight"], exact["bias"], 1e-6
    )
    ((total_exact * d_total.double()).sum() + (normed_exact * d_normed.double()).sum()).backward()
    torch.testing.assert_close(total.double(), total_exact.detach(), **TOLERANCE)
    torch.testing.assert_close(normed.double(), normed_exact.detach(), **TOLERANCE)
    for name, leaf in ours.items():
        torch.testing.assert_close(leaf.grad.double(), exact[name].grad, **TOLERANCE, msg=name)


@pytest.mark.parametrize("width", [1, 5, 8])
def test_the_embedding_kernel_gives_the_same_numbers_at_every_vector_width(
    width, monkeypatch
) -> None:
    """The embedding's row loop on 8-float vectors (AVX2's) and on 16-float ones
    (AVX-512's) computes the same bits, on 1 and 3 threads: a machine's build chooses its
    width for speed only. 100 columns: 6 blocks of 16 and a remainder."""
    gen = torch.Generator().manual_seed(4)
    inputs = torch.randn(3, 17, width, generator=gen) * 3
    embed = torch.randn(100, width, generator=gen)
    embed_bias, weight, bias = (torch.randn(100, generator=gen) for _ in range(3))
    before = torch.get_num_threads()
    results = {}
    try:
        for lanes in (8, 16):
            monkeypatch.setattr(layer_norm, "library", partial(library, (("LANES", lanes),)))
            for threads in (1, 3):
                torch.set_num_threads(threads)
                results[lanes, threads] = embed_forward_values(
                    inputs, embed, embed_bias, weight, bias, 1e-6
                )
    finally:
        torch.set_num_threads(before)
    first = results[8, 1]
    names = ("sum", "normed", "mean", "rstd")
    for key, values in results.items():
        for name, ours, theirs in zip(names, values, first, strict=True):
            assert torch.equal(ours, theirs), f"{name} at {key} (lanes, threads)"


@pytest.mark.parametrize("kept_gradients", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_kept_rows_kernel_computes_the_equations(kept_gradients, threads) -> None:
    """The last block's form: the sum at the kept positions (5 on, of 17), the normed
    output at every position and again at the kept ones; every input's gradient, with
    gradients flowing into all three outputs or into two (the kept normed rows', or the
    kept sum's, left out: None reaches the kernel)."""
    gen = torch.Generator().manual_seed(6)
    shape, keep_from = (3, 17, 96), 5
    leaves = {
        "x": torch.randn(shape, generator=gen) * 2 + 0.5,
        "delta": torch.randn(shape, generator=gen),
        "delta_bias": torch.randn(96, generator=gen),
        "weight": torch.randn(96, generator=gen),
        "bias": torch.randn(96, generator=gen),
    }
    ours = {k: v.clone().requires_grad_() for k, v in leaves.items()}
    exact = {k: v.double().requires_grad_() for k, v in leaves.items()}
    kept_shape = (3, 17 - keep_from, 96)
    d_kept_total, d_kept_normed = (torch.randn(kept_shape, generator=gen) for _ in range(2))
    d_normed = torch.randn(shape, generator=gen)

    def loss(kept_total, normed, kept_normed):
        terms = [(normed * d_normed.to(normed.dtype)).sum()]
        for wanted, output, weight in zip(kept_gradients, (kept_total, kept_normed),
                                          (d_kept_total, d_kept_normed), strict=True):  # fmt: skip
            if wanted:
                terms.append((output * weight.to(output.dtype)).sum())
        return sum(terms)

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        outputs = kept_add_layer_norm(*ours.values(), 1e-6, keep_from)[:3]
        loss(*outputs).backward()
    finally:
        torch.set_num_threads(before)
    total_exact, normed_exact = add_norm_float64(*exact.values(), 1e-6)
    expected = (total_exact[:, keep_from:], normed_exact, normed_exact[:, keep_from:])
    loss(*expected).backward()
    for output, exact_output in zip(outputs, expected, strict=True):
        torch.testing.assert_close(output.double(), exact_output.detach(), **TOLERANCE)
    for name, leaf in ours.items():
        torch.testing.assert_close(leaf.grad.double(), exact[name].grad, **TOLERANCE, msg=name)


def test_the_row_statistics_are_the_mean_and_reciprocal_deviation() -> None:
    x = torch.randn(5, 40, dtype=torch.float64).float()
    _, _, mean, rstd = forward_values(x, None, None, torch.ones(40), torch.zeros(40), 1e-5)
    torch.testing.assert_close(mean, x.mean(-1), **TOLERANCE)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5), **TOLERANCE)


def test_the_residual_sum_is_exact_where_nothing_or_a_bias_is_added() -> None:
    """The stream the kernel passes on is x itself (inf included) with nothing to add, and
    x + bias in float32 with a bias: an absent term adds nothing, not 0 * x."""
    x = torch.randn(4, 33)
    x[1, 5], x[2, 7] = float("inf"), float("-inf")
    bias = torch.randn(33)
    ones, zeros = torch.ones(33), torch.zeros(33)
    total, _, _, _ = forward_values(x, None, None, ones, zeros, 1e-5)
    assert torch.equal(total, x)
    total, _, _, _ = forward_values(x, None, bias, ones, zeros, 1e-5)
    assert torch.equal(total, x + bias)


def test_inputs_that_need_a_gradient_take_pytorchs_embedding() -> None:
    """The embedding kernel gives the inputs no gradient: inputs that need one (an
    attribution) take PyTorch's embedding, and get the plain model's gradient."""
    plain, fused = model_pair()
    gradients = []
    for model in (plain, fused):
        inputs = model_inputs(model).requires_grad_()
        model(inputs).sum().backward()
        gradients.append(inputs.grad)
    assert gradients[1] is not None
    torch.testing.assert_close(gradients[1], gradients[0], **TOLERANCE)


def test_an_embedding_weight_that_does_not_fit_the_inputs_is_refused() -> None:
    with pytest.raises(ValueError, match="last dimension must be 3"):
        embed_forward_values(torch.randn(2, 4), torch.randn(6, 3), torch.randn(6),
                             torch.ones(6), torch.zeros(6), 1e-5)  # fmt: skip


def model_pair(**overrides) -> tuple[DecoderTransformer, DecoderTransformer]:
    """A small transformer and a copy switched to the fused kernels, in eval mode (no
    dropout draws to align)."""
    cfg = TransformerConfig(**{"n_ctx": 12, "d_output": 3, "d_input": 5, "d_model": 32,
                               "n_heads": 4, "qk_dim": 8, "v_dim": 8, "d_mlp": 48,
                               **overrides})  # fmt: skip
    torch.manual_seed(0)
    plain = DecoderTransformer(cfg).eval()
    fused = DecoderTransformer(cfg).eval()
    fused.load_state_dict(plain.state_dict())
    use_fused_kernels(fused)
    return plain, fused


def model_inputs(model: DecoderTransformer) -> torch.Tensor:
    gen = torch.Generator().manual_seed(2)
    if model.cfg.vocab_size is not None:
        return torch.randint(0, model.cfg.vocab_size, (4, 10), generator=gen)
    return torch.randn(4, 10, model.cfg.d_input, generator=gen)


def gradient_error(model: DecoderTransformer, exact: DecoderTransformer) -> float:
    """The largest error of ``model``'s parameter gradients against ``exact``'s, relative
    to the largest exact gradient of any parameter (some are 0 in exact arithmetic:
    softmax's key bias)."""
    grads = dict(model.named_parameters())
    pairs = [(grads[name].grad, parameter.grad) for name, parameter in exact.named_parameters()
             if parameter.grad is not None]  # fmt: skip
    scale = max(e.abs().max().item() for _, e in pairs)
    return max((g.double() - e).abs().max().item() for g, e in pairs) / scale


@pytest.mark.parametrize(
    "overrides, last_positions",
    [
        ({}, None),
        ({}, 3),
        ({"attention": "hyla", "n_layers": 3}, 1),
        ({"d_input": None, "vocab_size": 11, "absolute_position": True}, None),
    ],
)
def test_the_fused_stream_is_the_models_function_and_gradient(overrides, last_positions) -> None:
    """Against the model in float64: the fused stream's outputs within 1e-5, and its
    gradients as close as PyTorch's float32 path's (within 3x its error, 1e-7 to 1e-5 of
    the largest gradient, the most in the 3-layer HYLA stack)."""
    plain, fused = model_pair(**overrides)
    exact = DecoderTransformer(plain.cfg).eval().double()
    exact.load_state_dict(plain.state_dict())
    inputs = model_inputs(plain)
    weight = None
    for model in (exact, plain, fused):
        cast = inputs.double() if model is exact and inputs.is_floating_point() else inputs
        output = model(cast, last_positions=last_positions)
        weight = torch.randn_like(output) if weight is None else weight
        (output.double() * weight).sum().backward()
        if model is exact:
            expected = output.detach()
        else:
            torch.testing.assert_close(output.double(), expected, **TOLERANCE)
    assert gradient_error(fused, exact) <= max(3 * gradient_error(plain, exact), 1e-6)


def test_the_fused_stream_runs_the_kernels_and_a_hook_takes_pytorchs_path(monkeypatch) -> None:
    """Without hooks the stream's layer norms are the kernel's (PyTorch's is never
    called); a hook on the stream sees its tensor, and the output is PyTorch's bit for
    bit but for the attention core (which stays fused)."""
    plain, fused = model_pair(n_layers=2)
    inputs = model_inputs(plain)
    calls = []
    forward = LayerNorm.forward  # the models' layer norm, PyTorch's path
    monkeypatch.setattr(LayerNorm, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    fused(inputs)
    assert calls == []
    seen = []
    fused.blocks[1].hook_resid_mid.add_hook(lambda tensor, hook: seen.append(tensor.shape))
    try:
        hooked = fused(inputs)
    finally:
        fused.reset_hooks()
    assert seen == [torch.Size([4, 10, 32])] and len(calls) == 2 * 2 + 1
    torch.testing.assert_close(hooked, plain(inputs), **TOLERANCE)
    fused.fused = False
    assert torch.equal(fused(inputs), hooked)


def test_a_hook_inside_the_attention_keeps_the_fused_stream() -> None:
    """A hook on an attention's pattern takes that attention's PyTorch path inside the
    fused stream, which still adds the attention's output bias in its layer norm's pass:
    the output is the plain model's."""
    plain, fused = model_pair(n_layers=2)
    inputs = model_inputs(plain)
    seen = []
    fused.blocks[1].attn.hook_pattern.add_hook(lambda tensor, hook: seen.append(tensor.shape))
    with torch.no_grad():
        plain.blocks[1].attn.b_O.normal_()
        fused.blocks[1].attn.b_O.copy_(plain.blocks[1].attn.b_O)
    try:
        hooked = fused(inputs, last_positions=2)
    finally:
        fused.reset_hooks()
    assert seen == [torch.Size([4, 4, 2, 10])]
    torch.testing.assert_close(hooked, plain(inputs, last_positions=2), **TOLERANCE)

"""The thread-count-independent layer norm against ``nn.LayerNorm`` and across threads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from latentlens.models.layer_norm import LayerNorm


def _pair(d: int = 48) -> tuple[nn.LayerNorm, LayerNorm]:
    torch.manual_seed(0)
    plain = nn.LayerNorm(d, eps=1e-5)
    with torch.no_grad():
        plain.weight.normal_()
        plain.bias.normal_()
    ours = LayerNorm(d, eps=1e-5)
    ours.load_state_dict(plain.state_dict())
    return plain, ours


def _grads(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_()
    module.zero_grad()
    module(x).backward(dy)
    return [x.grad, module.weight.grad, module.bias.grad]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_are_nn_layer_norms(dtype: torch.dtype) -> None:
    plain, ours = _pair()
    plain, ours = plain.to(dtype), ours.to(dtype)
    x = torch.randn(7, 11, 48, dtype=dtype) * 3 + 1
    dy = torch.randn(7, 11, 48, dtype=dtype)
    # the same forward kernel: equal bit for bit
    torch.testing.assert_close(ours(x), plain(x), rtol=0, atol=0)
    # the input's gradient is PyTorch's own kernel; the weight's and bias's are the same
    # sums in another order: a few float rounding steps of a 77-row sum
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for mine, theirs in zip(_grads(ours, x, dy), _grads(plain, x, dy), strict=True):
        torch.testing.assert_close(mine, theirs, **tol)


def test_gradients_against_the_formula_in_float64() -> None:
    """dweight = sum_rows dy * (x - mean) / sqrt(var + eps), dbias = sum_rows dy."""
    _, ours = _pair(16)
    ours = ours.double()
    x = torch.randn(30, 16, dtype=torch.float64)
    dy = torch.randn(30, 16, dtype=torch.float64)
    _, dweight, dbias = _grads(ours, x, dy)
    normed = (x - x.mean(-1, keepdim=True)) / (
        x.var(-1, unbiased=False, keepdim=True) + 1e-5
    ).sqrt()
    torch.testing.assert_close(dweight, (dy * normed).sum(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dbias, dy.sum(0), rtol=1e-12, atol=1e-12)


def test_gradients_are_the_same_on_one_and_two_threads() -> None:
    _, ours = _pair(128)
    x = torch.randn(128 * 16, 128)
    dy = torch.randn(128 * 16, 128)
    before = torch.get_num_threads()
    try:
        found = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            found.append(_grads(ours, x, dy))
    finally:
        torch.set_num_threads(before)
    for one, two in zip(*found, strict=True):
        assert torch.equal(one, two)


def test_without_gradients_it_is_the_plain_layer_norm() -> None:
    plain, ours = _pair()
    x = torch.randn(5, 48)
    with torch.no_grad():
        assert torch.equal(ours(x), plain(x))

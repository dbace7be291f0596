"""T5 relative position buckets and sinusoidal encodings."""

from __future__ import annotations

import math

import pytest
import torch

from latentlens.models import RelativePositionBias, relative_position_buckets, sinusoidal_encoding
from tests.models.reference_attention import t5_bucket


@pytest.mark.parametrize("length", [16, 36, 5])
def test_buckets_match_the_scalar_t5_formula(length: int) -> None:
    grid = relative_position_buckets(length, length, length, length)
    expected = torch.tensor(
        [[t5_bucket(q, k, length, length) for k in range(length)] for q in range(length)]
    )
    assert torch.equal(grid, expected)


def test_unidirectional_buckets_at_the_fuzzy_logic_default() -> None:
    grid = relative_position_buckets(16, 16, 16, 16)
    # keys after the query share distance 0's bucket; distances below 8 are exact
    assert torch.all(grid.triu() == 0)
    assert [int(grid[15, 15 - n]) for n in range(8)] == list(range(8))
    assert int(grid[15, 0]) == 15 and int(grid.max()) == 15


def test_bidirectional_buckets_separate_before_and_after() -> None:
    grid = relative_position_buckets(4, 4, 8, 8, bidirectional=True)
    assert int(grid[0, 1]) != int(grid[1, 0])
    assert int(grid[2, 2]) == 0


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_precomputed_grid_lives_on_the_device_the_bias_is_built_on(device: str) -> None:
    """Computed on the CPU and moved (on the meta device, where the fit check counts
    parameters, the arithmetic itself would import torch._dynamo)."""
    with torch.device(device):
        bias = RelativePositionBias(n_heads=2, num_buckets=8, max_distance=12, bidirectional=True)
    assert bias.bucket_grid.device.type == device
    if device == "cpu":
        assert torch.equal(bias.bucket_grid, relative_position_buckets(12, 12, 8, 12, True))


def test_bias_longer_than_its_grid_still_follows_the_formula() -> None:
    bias = RelativePositionBias(n_heads=2, num_buckets=4, max_distance=4)
    torch.nn.init.normal_(bias.table)
    out = bias(6, 6)
    buckets = torch.tensor([[t5_bucket(q, k, 4, 4) for k in range(6)] for q in range(6)])
    torch.testing.assert_close(out, bias.table[:, buckets])


@pytest.mark.parametrize("grid_size", [8, 4])
def test_queries_from_an_offset_take_their_own_rows_of_the_bias(grid_size: int) -> None:
    """Queries at positions 4 and 5 of 6 get rows 4 and 5 of the full bias, from the
    precomputed grid (size 8) or from the formula beyond it (size 4)."""
    bias = RelativePositionBias(n_heads=2, num_buckets=grid_size, max_distance=grid_size)
    torch.nn.init.normal_(bias.table)
    torch.testing.assert_close(bias(2, 6, query_start=4), bias(6, 6)[:, 4:], rtol=0, atol=0)
    buckets = relative_position_buckets(2, 6, 8, 8, query_start=4)
    assert torch.equal(buckets, relative_position_buckets(6, 6, 8, 8)[4:])


def test_sinusoidal_encoding_values() -> None:
    enc = sinusoidal_encoding(10, 8)
    assert enc.shape == (10, 8)
    assert torch.all(enc[0, :4] == 0) and torch.all(enc[0, 4:] == 1)
    # channel 0 has frequency 1: sin(position)
    torch.testing.assert_close(enc[3, 0], torch.tensor(math.sin(3.0)))


def test_bias_is_the_gather_exactly_and_its_gradient_the_scatter_sum() -> None:
    """The one-hot product picks each table entry exactly; its gradient sums each bucket's
    positions, which the gather's scatter-add also does (in another order)."""
    bias = RelativePositionBias(n_heads=3, num_buckets=8, max_distance=8)
    torch.nn.init.normal_(bias.table, std=5.0)
    buckets = relative_position_buckets(8, 8, 8, 8)
    out = bias(8, 8)
    assert torch.equal(out, bias.table[:, buckets])
    grad = torch.randn(3, 8, 8, dtype=torch.float64)
    table = bias.table.detach().double().requires_grad_()
    table[:, buckets].backward(grad)
    expected = torch.zeros(3, 8, dtype=torch.float64)
    for q in range(8):
        for k in range(8):
            expected[:, buckets[q, k]] += grad[:, q, k]
    torch.testing.assert_close(table.grad, expected, rtol=1e-12, atol=1e-12)
    bias.table.grad = None
    bias(8, 8).backward(grad.float())
    torch.testing.assert_close(bias.table.grad, expected.float(), rtol=1e-5, atol=1e-5)

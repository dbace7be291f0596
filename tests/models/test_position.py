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


def test_bias_longer_than_its_grid_still_follows_the_formula() -> None:
    bias = RelativePositionBias(n_heads=2, num_buckets=4, max_distance=4)
    torch.nn.init.normal_(bias.table)
    out = bias(6, 6)
    buckets = torch.tensor([[t5_bucket(q, k, 4, 4) for k in range(6)] for q in range(6)])
    torch.testing.assert_close(out, bias.table[:, buckets])


def test_sinusoidal_encoding_values() -> None:
    enc = sinusoidal_encoding(10, 8)
    assert enc.shape == (10, 8)
    assert torch.all(enc[0, :4] == 0) and torch.all(enc[0, 4:] == 1)
    # channel 0 has frequency 1: sin(position)
    torch.testing.assert_close(enc[3, 0], torch.tensor(math.sin(3.0)))

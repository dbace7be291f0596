"""Fig. A8's measures (latentlens.probes.head_sharing) against loops written from their
definitions, on planted codes: one-hot codes give one head, shared codes several, and the
per-combination means of codes that alternate between heads hide single-head examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from latentlens.figures.head_sharing import head_sharing_figure
from latentlens.probes.head_sharing import active_heads, head_sharing, participation


def slow_participation(code: list[float]) -> float:
    magnitudes = [abs(v) for v in code]
    squares = sum(m * m for m in magnitudes)
    return math.nan if squares == 0 else sum(magnitudes) ** 2 / squares


def slow_active(code: list[float], share: float = 0.5) -> int:
    largest = max(abs(v) for v in code)
    return 0 if largest == 0 else sum(abs(v) >= share * largest for v in code)


def test_participation_and_active_heads_follow_their_definitions() -> None:
    generator = torch.Generator().manual_seed(0)
    codes = torch.randn(50, 6, generator=generator) * torch.rand(50, 6, generator=generator)
    codes[3] = 0.0  # an all-zero code: undefined, no active head
    codes[4] = torch.tensor([0.0, 0.0, -2.0, 0.0, 0.0, 0.0])  # one head, negative
    codes[5] = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0])  # every head
    expected = [slow_participation(row) for row in codes.tolist()]
    got = participation(codes).tolist()
    assert math.isnan(got[3]) and math.isnan(expected[3])
    np.testing.assert_allclose(np.delete(got, 3), np.delete(expected, 3), rtol=1e-12)
    assert got[4] == 1.0 and got[5] == pytest.approx(6.0)
    assert active_heads(codes).tolist() == [slow_active(row) for row in codes.tolist()]
    with pytest.raises(ValueError, match="share=0 is invalid"):
        active_heads(codes, share=0)


def test_averages_can_hide_single_head_examples_and_the_per_example_measures_do_not() -> None:
    """Each combination's examples use one head each, alternating between two heads: the
    mean code has two active heads, yet no example does (Fig. A8A's point)."""
    n, heads = 400, 4
    groups = torch.arange(n) % 2
    codes = torch.zeros(n, heads)
    head = torch.where(groups == 0, torch.arange(n) % 4 // 2, 2 + torch.arange(n) % 4 // 2)
    codes[torch.arange(n), head] = 1.0
    result = head_sharing(codes, groups)
    assert result["group_active"] == [2, 2] and result["group_participation"] == [2.0, 2.0]
    assert result["participation_mean"] == 1.0 and result["share_two_or_more_active"] == 0.0
    assert result["active_histogram"] == [0, n, 0, 0, 0]
    np.testing.assert_allclose(result["group_means"], [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    assert result["variation_participation"] == [4.0, 4.0]  # the groups differ in all four
    offset = torch.tensor([3.0, 0.0, 0.0, 0.0])  # a head the same for every group
    varied = head_sharing(codes * torch.tensor([0.0, 1.0, 1.0, 0.0]) + offset, groups)
    assert varied["variation_participation"] == [2.0, 2.0]  # heads 1 and 2 tell them apart
    constant = head_sharing(offset.expand(n, -1), groups)
    assert all(math.isnan(v) for v in constant["variation_participation"])
    shared = head_sharing(torch.ones(n, heads) + 0.1 * torch.rand(n, heads), groups)
    assert shared["share_two_or_more_active"] == 1.0 and shared["participation_mean"] > 3.9
    with pytest.raises(ValueError, match="expected \\[n, heads\\] and \\[n\\]"):
        head_sharing(codes[:, None], groups)


def test_the_figure_draws_each_models_row() -> None:
    codes = torch.rand(60, 8)
    groups = torch.arange(60) % 5
    result = head_sharing(codes, groups)
    figure = head_sharing_figure({"softmax": (result, codes[:10].numpy()),
                                  "hyla": (result, codes[:10].numpy())})  # fmt: skip
    assert len(figure.axes) == 2 * 3 + 2  # three panels and a colour bar per row
    assert figure.axes[0].get_images()[0].get_array().shape == (5, 8)
    with pytest.raises(ValueError, match="no model to draw"):
        head_sharing_figure({})

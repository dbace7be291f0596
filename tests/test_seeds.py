"""Statistics over seeds (latentlens.reports.seeds) and the demo's ranking built on them."""

from __future__ import annotations

import math

import pytest
import scipy.stats

from latentlens.reports.demo_text import seed_ranking_sentence
from latentlens.reports.seeds import difference_interval, mean_std

HYLA, LINEAR, SOFTMAX = [0.93, 0.92, 0.86], [0.53, 0.62, 0.66], [0.50, 0.55, 0.45]


def test_the_difference_interval_is_scipys_welch_interval() -> None:
    diff, low, high = difference_interval(HYLA, LINEAR)
    welch = scipy.stats.ttest_ind(HYLA, LINEAR, equal_var=False).confidence_interval(0.95)
    assert diff == pytest.approx(sum(HYLA) / 3 - sum(LINEAR) / 3, abs=1e-12)
    assert (low, high) == pytest.approx((welch.low, welch.high), abs=1e-12)
    # one value on a side has no interval; equal values, a zero-width one
    assert all(math.isnan(v) for v in difference_interval([0.9], LINEAR)[1:])
    assert difference_interval([0.5, 0.5], [0.25, 0.25]) == (0.25, 0.25, 0.25)


def test_mean_std_is_the_sample_spread_over_the_seeds_present() -> None:
    assert mean_std([1.0, 2.0, 3.0]) == "2.000 ± 1.000"  # sample std: sqrt(2 / 2)
    assert mean_std([0.5, None]) == "0.500" and mean_std([None]) == "n/a"


def test_the_demo_names_a_best_variant_only_when_its_lead_holds_over_seeds() -> None:
    clear = seed_ranking_sentence({"softmax": SOFTMAX, "HYLA": HYLA, "linear": LINEAR})
    lead, low, high = difference_interval(HYLA, LINEAR)  # against the runner-up
    assert low > 0 and clear.startswith(
        f"Best on new combinations: HYLA, ahead of linear by {lead:.3f} [{low:+.3f}, {high:+.3f}]"
    )
    means = f"HYLA {mean_std(HYLA)}; linear {mean_std(LINEAR)}; softmax {mean_std(SOFTMAX)}."
    assert clear.endswith(f"mean ± std over 3 seeds: {means}")
    # a lead whose interval holds 0 names no best variant
    tied = seed_ranking_sentence({"softmax": [0.5, 0.7, 0.3], "HYLA": [0.6, 0.8, 0.4]})
    lead, low, high = difference_interval([0.6, 0.8, 0.4], [0.5, 0.7, 0.3])
    assert low < 0 < high
    best = f"No variant is best on new combinations: HYLA leads softmax by {lead:.3f}"
    assert tied.startswith(best) and "an interval that holds 0" in tied

"""Statistics over seeds: a mean with its spread, and the 95% Welch interval of the
difference of two means, as the reports and docs/RESULTS.md print them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import scipy.stats


def mean_std(values: Sequence[float | None], digits: int = 3) -> str:
    """``mean ± std`` over seeds (sample std); one value alone; ``n/a`` when none."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    if len(present) == 1:
        return f"{present[0]:.{digits}f}"
    return f"{statistics.mean(present):.{digits}f} ± {statistics.stdev(present):.{digits}f}"


def difference_interval(ours: Sequence[float], base: Sequence[float]) -> tuple[float, float, float]:
    """Mean difference ``ours - base`` and its 95% Welch confidence interval (``nan`` bounds
    with fewer than 2 values on a side)."""
    if len(ours) < 2 or len(base) < 2:
        return statistics.mean(ours) - statistics.mean(base), math.nan, math.nan
    return summary_difference_interval(
        statistics.mean(ours), statistics.stdev(ours), len(ours),
        statistics.mean(base), statistics.stdev(base), len(base),
    )  # fmt: skip


def summary_difference_interval(
    mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int
) -> tuple[float, float, float]:
    """:func:`difference_interval` from each side's mean, sample std and count (as a
    table prints them): the difference ``a - b`` and its 95% Welch interval."""
    difference = mean_a - mean_b
    if n_a < 2 or n_b < 2:
        return difference, math.nan, math.nan
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    se = math.sqrt(va + vb)
    if se == 0:
        return difference, difference, difference
    df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    half = float(scipy.stats.t.ppf(0.975, df)) * se
    return difference, difference - half, difference + half

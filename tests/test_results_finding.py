"""The finding each RESULTS section opens with (benchmarks/reproduction/finding.py): read
from the section's own first table, with the Welch interval computed from the printed
mean ± std, checked against the interval of the raw values and scipy's Welch test."""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

import pytest
import scipy.stats

from latentlens.reports.seeds import difference_interval, summary_difference_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from reproduction.finding import Finding, finding_sentence  # noqa: E402

TABLE = """## A section

Some words first.

| attention | test R² | paper | ood R² |
|---|---|---|---|
| softmax | 0.500 ± 0.020 | 0.633 | -0.5 ± 0.1 |
| linear | 0.700 ± 0.300 | 0.599 | -0.4 ± 0.1 |
| HYLA | 0.900 ± 0.010 | 0.811 | -0.2 ± 0.1 |

| second table | ignored |
|---|---|
| x | 1.0 ± 0.1 |
"""


def test_the_summary_interval_is_the_raw_values_and_scipys_welch_interval() -> None:
    rng = random.Random(0)
    for _ in range(20):
        a = [rng.gauss(0.5, rng.uniform(0.01, 0.3)) for _ in range(rng.randint(2, 6))]
        b = [rng.gauss(0.4, rng.uniform(0.01, 0.3)) for _ in range(rng.randint(2, 6))]
        summary = summary_difference_interval(
            statistics.mean(a), statistics.stdev(a), len(a),
            statistics.mean(b), statistics.stdev(b), len(b),
        )  # fmt: skip
        assert summary == pytest.approx(difference_interval(a, b), rel=1e-12, abs=1e-12)
        welch = scipy.stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        assert summary[1:] == pytest.approx((welch.low, welch.high), rel=1e-9, abs=1e-12)


def test_the_finding_names_the_leader_its_interval_and_the_papers_order() -> None:
    text = finding_sentence(TABLE, Finding("test R²", reference="paper"), seeds=3)
    low, high = summary_difference_interval(0.9, 0.01, 3, 0.7, 0.3, 3)[1:]
    assert text == (
        "**Finding.** Highest test R²: HYLA (0.900 ± 0.010), then linear (0.700 ± 0.300); the "
        f"difference is +0.200 [{low:+.3f}, {high:+.3f}] (95% Welch interval over 3 seeds), "
        "an interval that holds 0: the two are not told apart. The paper column ranks HYLA "
        "first (0.811), as here."
    )
    lowest = finding_sentence(TABLE, Finding("test R²", lower_is_better=True), seeds=3)
    low, high = summary_difference_interval(0.5, 0.02, 3, 0.7, 0.3, 3)[1:]
    assert lowest.startswith("**Finding.** Lowest test R²: softmax (0.500 ± 0.020), then linear")
    assert f"[{low:+.3f}, {high:+.3f}]" in lowest
    clear = finding_sentence(TABLE, Finding("ood R²"), seeds=5)
    assert "HYLA (-0.2 ± 0.1), then linear (-0.4 ± 0.1)" in clear
    assert clear.endswith("(95% Welch interval over 5 seeds).")  # excludes 0: told apart


def test_a_table_of_quantities_by_system_and_a_single_seed() -> None:
    table = TABLE.replace(
        "| attention | test R² | paper | ood R² |",
        "| quantity | hypernetwork | paper | vanilla |",
    ).replace("| softmax |", "| OOD R² |")
    text = finding_sentence(table, Finding("OOD R²", reference="paper", row="OOD R²"), seeds=3)
    assert text.startswith("**Finding.** Highest OOD R²: hypernetwork (0.500 ± 0.020), then "
                           "vanilla (-0.5 ± 0.1)")  # fmt: skip
    single = TABLE.replace(" ± 0.020", "").replace(" ± 0.300", "").replace(" ± 0.010", "")
    text = finding_sentence(single, Finding("test R²", reference="paper"), seeds=1)
    assert "HYLA (0.900), then linear (0.700); one seed each, so no interval" in text


def test_a_finding_without_its_column_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no column 'accuracy'"):
        finding_sentence(TABLE, Finding("accuracy"), seeds=3)
    with pytest.raises(ValueError, match="no table"):
        finding_sentence("## Title\n\nno table here\n", Finding("test R²"), seeds=3)

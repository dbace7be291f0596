"""The demo's sentences and table cells: rankings only beyond their errors, the verdict on
what the codes carry, notes on constant codes, and the headline table as text."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from latentlens.figures.probes import beyond_noise
from latentlens.reports.demo_runs import DemoRun
from latentlens.reports.seeds import difference_interval, mean_std


def maybe_undefined(value: float | None) -> float | str:
    """A score, or "undefined" where it could not be computed (constant codes)."""
    return "undefined" if value is None else value


def heads_that_matter(rows: list[dict]) -> str:
    """``"k of n"`` heads whose ablation changes the metric beyond two standard errors."""
    beyond = beyond_noise(rows)
    return "n/a" if beyond is None else f"{beyond} of {len(rows)}"


def constant_code_note(names: list[str]) -> str:
    """Why the variants ``names``, whose codes came out the same for every task (topographic
    ρ undefined), show nothing to decode; empty when there are none."""
    if not names:
        return ""
    which = " and ".join(names)
    return (
        f"{which}: the codes a[:, T−1, T−1] are identical for every task, so neither the "
        "decoder nor the structure scores can read the terms from them. The code of a token "
        "on itself depends on the other tokens only where the normalisation mixes in the "
        "other keys (softmax over keys does; linear attention and RMSHead, which normalises "
        "across heads, do not); without softmax it varies with the task only through that "
        "token's own residual stream, which in this run carries no task into any layer's code."
    )


# The official code's test R² (held-out combinations) at the default model and 50,000
# steps, one seed each (docs/methods/numbers.md): how far the demo is from converged.
OFFICIAL_TEST_R2 = {"softmax": 0.704, "linear": 0.749, "hyla": 0.760}
OFFICIAL_STEPS = 50_000


def with_error(metrics: dict[str, float], name: str = "r2") -> str:
    """``metrics[name] ± metrics[name_se]`` to three decimals."""
    return f"{metrics[name]:.3f} ± {metrics[name + '_se']:.3f}"


def as_text(value: str | float) -> str:
    """A table cell as text: numbers to three decimals."""
    return value if isinstance(value, str) else f"{value:.3f}"


def decoded(row: dict[str, Any]) -> str | float:
    """A decoding score with its standard error where the results carry one."""
    error = row.get("test_se")
    return row["test"] if error is None else f"{row['test']:.3f} ± {error:.3f}"


def ranking_sentence(scores: dict[str, tuple[float, float]]) -> str:
    """Which variant is best on new combinations, only where it beats the runner-up by
    more than two standard errors of their difference; ``scores``: name -> (R², SE)."""
    ranked = sorted(scores.items(), key=lambda item: -item[1][0])
    (best, (top, top_se)), rest = ranked[0], ranked[1:]
    if not rest:
        return f"Test R² (new combinations): {best} {top:.3f} ± {top_se:.3f}."
    second, (runner, runner_se) = rest[0]
    gap, gap_se = top - runner, (top_se**2 + runner_se**2) ** 0.5
    if gap > 2 * gap_se:
        return (
            f"Best on new combinations: {best} (test R² {top:.3f} ± {top_se:.3f}), ahead of "
            f"{second} by {gap:.3f} ± {gap_se:.3f} (more than two standard errors)."
        )
    tied = [name for name, (value, se) in ranked
            if top - value <= 2 * (top_se**2 + se**2) ** 0.5]  # fmt: skip
    return (
        f"No variant is best on new combinations: {' and '.join(tied)} lie within two "
        f"standard errors of each other (test R² {top:.3f} ± {top_se:.3f} for {best}, "
        f"{runner:.3f} ± {runner_se:.3f} for {second}); more evaluation or seeds would be "
        "needed to rank them."
    )


def headline(runs: Sequence[DemoRun], results: dict[Path, dict]) -> str:
    """Per model: test and ood R² (± standard error), decoding R² of the term bits beside
    its shuffled-label control, the heads that matter; a plain-text table."""
    rows = [("model", "test R²", "ood R²", "decoding R²", "shuffled", "heads that matter")]
    for run in runs:
        probe = results[run.path]
        evaluation = probe["evaluation"]
        overall = next(r for r in probe["decoding"] if r["layer"] == "all")
        rows.append((run.label, with_error(evaluation["test"]),
                     with_error(evaluation["ood"]), as_text(decoded(overall)),
                     f"{overall['shuffled']:.3f}",
                     heads_that_matter(probe["ablation"])))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)  # fmt: skip


def seed_ranking_sentence(values: dict[str, list[float]]) -> str:
    """Which variant is best on new combinations over seeds: the best mean, named only where
    the 95% Welch interval of its lead over the runner-up excludes 0; ``values``: name ->
    test R² of each seed."""
    ranked = sorted(values.items(), key=lambda item: -statistics.mean(item[1]))
    seeds = min(len(v) for v in values.values())
    means = "; ".join(f"{name} {mean_std(v)}" for name, v in ranked)
    summary = f"Test R² (new combinations), mean ± std over {seeds} seeds: {means}."
    if len(ranked) < 2:
        return summary
    (best, top), (second, runner) = ranked[0], ranked[1]
    lead, low, high = difference_interval(top, runner)
    interval = f"{lead:.3f} [{low:+.3f}, {high:+.3f}] (95% Welch interval over seeds)"
    if low > 0:
        return f"Best on new combinations: {best}, ahead of {second} by {interval}. {summary}"
    return (
        f"No variant is best on new combinations: {best} leads {second} by {interval}, an "
        f"interval that holds 0; more seeds would be needed to rank them. {summary}"
    )


def code_verdict_sentence(values: dict[str, dict[str, list[float]]], layer: int) -> str:
    """What the codes carry, causally: ``values`` name -> {"moved", "random", "same",
    "clean"} over seeds, from the swaps of layer ``layer``'s final-query codes
    (:mod:`latentlens.probes.code_interventions`)."""
    moved = "; ".join(f"{name} {mean_std(v['moved'])}" for name, v in values.items())
    other = "; ".join(f"{name} {mean_std(v['random'])}" for name, v in values.items())
    kept = "; ".join(
        f"{name} {mean_std(v['same'])} (unswapped {mean_std(v['clean'])})"
        for name, v in values.items()
    )
    return (
        f"What the codes carry: swapping the final query's codes to every key in layer "
        f"{layer} for those of the same inputs under a function one term away moves the "
        f"prediction this fraction of the way to that function's output (1: all of it, 0: "
        f"none; mean ± std over seeds where there are several): {moved}. For a random other "
        f"combination: {other}. Codes taken from the same function on other inputs leave "
        f"test R² at {kept}: where that stays high and the one-term swap moves far, the "
        "codes select the function; where both fall, the swap only disrupts."
    )

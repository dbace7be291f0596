"""One head at Table A1's fuzzy-logic setting (the paper's Fig. 5C intervention): softmax,
linear and HYLA attention with a single head and the same number of parameters (the
query-key and value widths of all heads given to the one), 3 seeds each (as one seed group
per variant, or each run alone by ``latentlens sweep
benchmarks/reproduction/sweeps/fuzzy-logic-a1-one-head.yaml``), set beside the 8-head runs
of Table A1's configs (the ``fuzzy-logic-a1`` section's, or else the
``fuzzy-logic-a1-cpu`` section's, each trained alone and eagerly) with the 95% interval of
each difference; then every one-head run's latent-code protocol. With one head the latent
code is a single number: there is no set of value networks to compose, only one to
rescale (the authors' response)."""

from __future__ import annotations

from pathlib import Path

from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.sweep.run import STATUS_FILE
from latentlens.training import RunDirectory, TrainConfig
from reproduction.fuzzy_logic_a1_ablations_section import full_results
from reproduction.fuzzy_logic_a1_section import (
    SEQ_LEN,
    SIZES,
    VARIANTS,
    latent_code_lines,
    plan_variants,
    task,
    timings_of,
)
from reproduction.fuzzy_logic_section import final_r2
from reproduction.runs import RunSpec

TITLE = "One head at Table A1's fuzzy-logic setting (Fig. 5C)"
# none read from a table: the report writes its own finding, one head against eight
FINDING = None
ONE_HEAD = {"n_heads": 1}  # qk_dim and v_dim are the heads' total widths: kept
# what one head does to HYLA, from the equations (docs/methods/attention.md)
ONE_HEAD_HYLA = (
    "With one head, HYLA's RMSHead, a = s / √(mean over heads of s² + ε) with ε = 10⁻⁶, "
    "divides each score by its own magnitude: every attention weight is ±1 (|a| > 0.99 "
    "wherever |s| > 0.007), so HYLA's one-head code is a sign per query-key pair and its "
    "value network is never given a graded weight. Softmax's and linear attention's one head "
    "keeps graded weights."
)
# where the 8-head runs of Table A1's configs are read from, in this order
EIGHT_HEAD_SECTIONS = ("fuzzy-logic-a1", "fuzzy-logic-a1-cpu")


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return plan_variants(VARIANTS, size, seeds, out, ONE_HEAD)


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    steps = TrainConfig.for_task("fuzzy-logic", **SIZES[size]["train"]).steps
    one = {v: [final_r2(out / f"{v}-s{s}") for s in range(seeds)] for v in VARIANTS}
    section, eight = eight_heads(out, size, seeds)
    lines = [
        f"## {TITLE}",
        "",
        finding(one, eight),
        "",
        f"T = {SEQ_LEN}, frac_test {task()['frac_test']} (split_seed {task()['split_seed']}), "
        f"{steps:,} steps, {seeds} seed(s) {how_trained(out)}; one head with the query-key "
        "and value widths of all eight (the same parameters). 8 heads: the "
        f"{section} section's runs. test = held-out combinations of seen terms (the "
        "paper's OOD), ood = never-seen terms.",
        "",
        "| attention | test R², one head | test R², 8 heads | ood R², one head | "
        "one head − 8 heads, test R² [95% Welch] |",
        "|---|---|---|---|---|",
    ]
    for variant, label in VARIANTS.items():
        ours = [r["test"] for r in one[variant]]
        theirs = [r["test"] for r in eight.get(variant, [])]
        if theirs:
            diff, low, high = difference_interval(ours, theirs)
            shown, base = f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]", mean_std(theirs)
        else:
            shown = base = "n/a"
        lines.append(
            f"| {label} | {mean_std(ours)} | {base} | "
            f"{mean_std([r['ood'] for r in one[variant]])} | {shown} |"
        )
    lines += ["", ONE_HEAD_HYLA]
    lines += latent_code_lines(out, seeds, SIZES[size]["probe_examples"], timings_of(out),
                               VARIANTS, (), which="every one-head run")  # fmt: skip
    return "\n".join(lines)


def eight_heads(out: Path, size: str, seeds: int) -> tuple[str, dict[str, list[dict]]]:
    """The section whose finished 8-head runs stand beside these (``fuzzy-logic-a1``'s,
    else ``fuzzy-logic-a1-cpu``'s) and their final R²; the first name and nothing where
    neither has finished."""
    for section in EIGHT_HEAD_SECTIONS:
        if results := full_results(out, size, seeds, section):
            return section, results
    return EIGHT_HEAD_SECTIONS[0], {}


def how_trained(out: Path) -> str:
    """How the runs under ``out`` were trained, from their sweep's record and configs."""
    if not (out / STATUS_FILE).is_file():
        return "trained as one seed group per variant"
    configs = [RunDirectory(run).read_config() for run in sorted(out.glob("*-s*"))]
    paths = sorted({c["train"].get("path") or "eager" for c in configs})
    threads = sorted({c["train"].get("threads") for c in configs} - {None})
    on = f" on {'/'.join(map(str, threads))} thread(s)" if threads else ""
    return f"per variant, each run alone by `latentlens sweep`, path {', '.join(paths)}{on}"


def finding(one: dict[str, list[dict]], eight: dict[str, list[dict]]) -> str:
    """The section's opening sentence: each variant's change in test R² from eight heads to
    one, with its 95% Welch interval, beside the paper's claim."""
    if not all(eight.get(v) for v in VARIANTS):
        return "**Finding.** (none yet: the 8-head runs beside these are not finished)"
    parts = []
    for variant, label in VARIANTS.items():
        diff, low, high = difference_interval(
            [r["test"] for r in one[variant]], [r["test"] for r in eight[variant]]
        )
        verdict = "lower" if high < 0 else "higher" if low > 0 else "not told apart"
        parts.append(f"{label} {diff:+.3f} [{low:+.3f}, {high:+.3f}] ({verdict})")
    return (
        "**Finding.** One head instead of eight, parameters kept, changes test R² on held-out "
        "combinations by: " + "; ".join(parts) + " (95% Welch intervals over seeds). The paper "
        "(Fig. 5C) reports a drop for every variant."
    )

"""Table A1's HYLA ablations in its fuzzy-logic setting (T = 32, frac_test 0.7, the
reference's model and 50,000 steps): linear attention + RMSHead, HYLA − nonlinearity,
HYLA − RMSHead, HYLA − both and HYLA + softmax (the reviewers' ablation), 3 seeds each as
one seed group per variant. The paper gives no number for these rows in its text, only
that each modification helps by itself; so each row is set beside linear attention (what
it modifies) and full HYLA (all modifications together), read from the ``fuzzy-logic-a1``
section's runs beside this one, with the 95% interval of each difference; then every
ablation run's latent-code protocol."""

from __future__ import annotations

from pathlib import Path

from latentlens.reports.seeds import mean_std
from latentlens.training import RunDirectory, TrainConfig
from reproduction.finding import Finding
from reproduction.fuzzy_logic_a1_section import (
    SEQ_LEN,
    SIZES,
    difference_lines,
    latent_code_lines,
    plan_variants,
    task,
    timings_of,
)
from reproduction.fuzzy_logic_a1_section import plan as a1_plan
from reproduction.fuzzy_logic_section import VARIANTS as FULL
from reproduction.fuzzy_logic_section import final_r2
from reproduction.runs import RunSpec, trained_on

TITLE = "HYLA's ablations at Table A1's fuzzy-logic setting"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("test R²")
# Table A1's ablation rows (docs/methods/attention.md, the table of named variants)
VARIANTS = {
    "linear_rms_head": "linear + RMSHead",
    "hyla_mlp_linear": "HYLA − nonlinearity",
    "hyla_no_rms_head": "HYLA − RMSHead",
    "hyla_mlp_linear_no_rms_head": "HYLA − both",
    "softmax_hyla": "HYLA + softmax",
}
FULL_SECTION = "fuzzy-logic-a1"
# each ablation against what it modifies and against all modifications together
PAIRS = tuple((v, "linear") for v in VARIANTS) + tuple(("hyla", v) for v in VARIANTS)
CODE_PAIRS = tuple((v, "linear_rms_head") for v in VARIANTS if v != "linear_rms_head")


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return plan_variants(VARIANTS, size, seeds, out)


def full_results(
    out: Path, size: str, seeds: int, section: str = FULL_SECTION
) -> dict[str, list[dict[str, float]]]:
    """The full variants' final R² from the ``section`` runs beside ``out`` (Table A1's
    configs; their metrics alone suffice: the committed runs carry no checkpoints); an
    empty mapping unless every one of them evaluated at its last step."""
    full = out.parent / section
    results = {}
    for spec in a1_plan(size, seeds, full):
        evaluation = RunDirectory(spec.path).last_evaluation()
        steps = {record["step"] for record in evaluation.values()}
        if steps != {spec.config["train"]["steps"]}:
            return {}
        variant = spec.config["model"]["attention"]
        results.setdefault(variant, []).append(final_r2(spec.path))
    return results


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    steps = TrainConfig.for_task("fuzzy-logic", **SIZES[size]["train"]).steps
    results = {v: [final_r2(out / f"{v}-s{s}") for s in range(seeds)] for v in VARIANTS}
    full = full_results(out, size, seeds)
    lines = [
        f"## {TITLE}",
        "",
        f"T = {SEQ_LEN}, frac_test {task()['frac_test']} (split_seed {task()['split_seed']}), "
        f"{steps:,} steps, {seeds} seed(s) trained as one seed group per variant. test = "
        "held-out combinations of seen terms (the paper's OOD), ood = never-seen terms. "
        "Table A1 states only that each modification helps by itself.",
        "",
        "| attention | test R² | ood R² |",
        "|---|---|---|",
    ]
    rows = {**results, **full}
    labels = {**VARIANTS, **FULL}
    # the full variants' runs may come from another machine than the fuzzy-logic-a1 section's
    machine = trained_on(out.parent / FULL_SECTION).split(",")[0]
    full_source = f" ({FULL_SECTION}{', ' + machine if machine else ''})"
    for variant, runs in rows.items():
        source = "" if variant in VARIANTS else full_source
        lines.append(
            f"| {labels[variant]}{source} | {mean_std([r['test'] for r in runs])} | "
            f"{mean_std([r['ood'] for r in runs])} |"
        )
    test = {v: [r["test"] for r in runs] for v, runs in rows.items()}
    if full:
        lines += difference_lines(test, "test R²", PAIRS, labels)
    else:
        lines += ["", f"(no differences: the {FULL_SECTION} runs beside {out} are not finished)"]
    lines += latent_code_lines(out, seeds, SIZES[size]["probe_examples"], timings_of(out),
                               VARIANTS, CODE_PAIRS)  # fmt: skip
    return "\n".join(lines)

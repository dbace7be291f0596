"""Fuzzy logic at paper Table A1's setting (T = 32 samples per sequence, 70% of the term
combinations held out), sized for one GPU sitting: softmax, linear and HYLA with 3 seeds,
every variant's seeds trained as one vmapped seed group; R² on the held-out combinations
(the paper's OOD) beside Table A1, and on never-seen terms, with the 95% interval of each
difference between variants; then the latent-code protocol of every run (the seed's probe:
ridge from the last token's self-codes to the term bits, clustering, topographic similarity,
head ablations), each with its control and error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from latentlens.figures import metric_curves, save_figure
from latentlens.figures.training import metric_curve
from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.sweep.run import STATUS_FILE
from latentlens.training import RunDirectory, TrainConfig, Trainer, model_for_task
from reproduction.finding import Finding
from reproduction.fuzzy_logic_section import PAPER_TABLE_A1, VARIANTS, final_r2, task_config
from reproduction.runs import RunSpec, recorded_seconds, trained_on
from reproduction.sraven_section import read_probes

TITLE = "Fuzzy logic at Table A1's setting"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("test R²", reference="paper Table A1")
SEQ_LEN, FRAC_TEST = 32, 0.7
SIZES: dict[str, dict[str, Any]] = {
    # the reference's model and 50,000 steps of batch 128
    "gpu": dict(model={}, train=dict(eval_every=5_000, eval_examples=4_096),
                probe_examples=2_048),
    "cpu": dict(model=dict(d_model=64, d_mlp=128),
                train=dict(steps=2_000, lr=3e-3, warmup_steps=100, eval_every=500,
                           eval_examples=1_024), probe_examples=1_024),
    "tiny": dict(model=dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32),
                 train=dict(steps=20, batch_size=32, warmup_steps=5, eval_every=20,
                            eval_examples=64, tracking_examples=256), probe_examples=64),
}  # fmt: skip


def task() -> dict[str, Any]:
    return {**task_config(FRAC_TEST), "seq_len": SEQ_LEN}


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return plan_variants(VARIANTS, size, seeds, out)


def plan_variants(
    variants: dict[str, str],
    size: str,
    seeds: int,
    out: Path,
    model: dict[str, Any] | None = None,
) -> list[RunSpec]:
    """Every variant's ``seeds`` runs at this setting (the size's model with ``model``'s
    overrides), one seed group per variant."""
    chosen, config = SIZES[size], task()
    overrides = {**chosen["model"], **(model or {})}
    return [
        RunSpec(
            out / f"{variant}-s{seed}",
            Trainer.resolve_config(
                "fuzzy-logic",
                model_for_task("fuzzy-logic", config, attention=variant, **overrides),
                TrainConfig.for_task("fuzzy-logic", seed=seed, **chosen["train"]),
                config,
            ),
            chosen["probe_examples"],
            group=variant,
        )
        for variant in variants
        for seed in range(seeds)
    ]


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    lines = [f"## {TITLE}", "", *r2_lines(out, size, seeds)]
    lines += latent_code_lines(out, seeds, SIZES[size]["probe_examples"], timings_of(out),
                               VARIANTS, PAIRS)  # fmt: skip
    lines += eager_check_lines(out)
    lines += elsewhere_lines(out, seeds)
    lines += seed0_curve_lines(out, figures, "fuzzy-logic-a1-curves", "R² over training, seed 0")
    return "\n".join(lines)


def seed0_curve_lines(out: Path, figures: Path, stem: str, caption: str) -> list[str]:
    """Seed 0's R² curves of every variant drawn to ``figures/stem.png``, and the lines
    that show it."""
    curves = {label: out / f"{variant}-s0" for variant, label in VARIANTS.items()}
    save_figure(metric_curves(curves, metric="r2", ylim=(-1.0, 1.0)), figures / stem, ("png",))
    return ["", f"![{caption}]({figures.name}/{stem}.png)"]


def r2_lines(out: Path, size: str, seeds: int) -> list[str]:
    """The setting, each variant's test and ood R² (mean ± std over seeds) beside Table A1,
    and the 95% interval of each difference in test R²."""
    steps = TrainConfig.for_task("fuzzy-logic", **SIZES[size]["train"]).steps
    results = {v: [final_r2(out / f"{v}-s{s}") for s in range(seeds)] for v in VARIANTS}
    lines = [
        f"T = {SEQ_LEN}, frac_test {FRAC_TEST} (split_seed {task()['split_seed']}), {steps:,} "
        f"steps, {seeds} seed(s) {how_trained(out)}. test = held-out combinations of seen "
        "terms (the paper's OOD), ood = never-seen terms.",
        "",
        "| attention | test R² | paper Table A1 | ood R² |",
        "|---|---|---|---|",
    ]
    for variant, label in VARIANTS.items():
        rows = results[variant]
        lines.append(
            f"| {label} | {mean_std([r['test'] for r in rows])} | "
            f"{PAPER_TABLE_A1[variant]:.3f} | {mean_std([r['ood'] for r in rows])} |"
        )
    return lines + difference_lines({v: [r["test"] for r in results[v]] for v in VARIANTS},
                                    "test R²")  # fmt: skip


def how_trained(out: Path) -> str:
    """How the section's runs were trained: by `latentlens sweep` (benchmarks/reproduction/sweeps/
    fuzzy-logic-a1.yaml, which leaves its sweep.json in the folder), each run alone, or by
    reproduce.py, one seed group per variant."""
    if (out / STATUS_FILE).is_file():
        return "per variant, each run trained alone by `latentlens sweep`"
    return "trained as one seed group per variant"


# Runs of this section's configs trained again eagerly (without --compile and
# --cuda-graphs), in OUT/eager-check/<run>: HYLA trained on the compiled and graphed CUDA
# path failed on 4-layer SRAVEN (benchmarks/results/h200_2026-11-26), and these runs were
# trained on that path.
EAGER_CHECK = "eager-check"


def eager_check_lines(out: Path) -> list[str]:
    """Each eagerly retrained run's test R² beside its fast-path run's at every
    evaluation both reached: whether the GPU's compiled and graphed training can be trusted
    here."""
    checks = sorted(p.parent for p in (out / EAGER_CHECK).glob("*/metrics.jsonl"))
    if not checks:
        return []
    lines = [
        "",
        "Eager check: HYLA trained with `--compile --cuda-graphs` on CUDA failed on 4-layer "
        "SRAVEN where eager training learned (benchmarks/results/h200_2026-11-26), and the "
        "runs above were trained that way. The same configs trained again eagerly on the "
        "CPU, test R² at each evaluation both reached:",
        "",
    ]
    for check in checks:
        eager, fast = (metric_curve(RunDirectory(run).read_metrics(), "test", "r2")
                       for run in (check, out / check.name))  # fmt: skip
        steps = sorted(set(eager) & set(fast) - {0})
        lines += [
            f"| {check.name} | " + " | ".join(f"step {s:,}" for s in steps) + " |",
            "|---" * (len(steps) + 1) + "|",
            "| compiled + graphed, GPU | " + " | ".join(f"{fast[s]:.3f}" for s in steps) + " |",
            "| eager, CPU | " + " | ".join(f"{eager[s]:.3f}" for s in steps) + " |",
            "",
        ]
    return lines[:-1]


# The same configs trained another way, in OUT/elsewhere/<run> with its own TRAINED_ON.txt
# (a link to another sweep's or lease's folder): the CPU's eager runs beside the GPU's
# compiled and graphed ones, whichever of them the section reports.
ELSEWHERE = "elsewhere"


def elsewhere_lines(out: Path, seeds: int) -> list[str]:
    """Each variant's final test R² here beside the same configs' in ``OUT/elsewhere``,
    with the 95% Welch interval of the difference; nothing where that folder holds no
    finished run of every variant and seed."""
    there = out / ELSEWHERE
    runs = [f"{variant}-s{seed}" for variant in VARIANTS for seed in range(seeds)]
    if not all((there / run / "metrics.jsonl").is_file() for run in runs):
        return []
    where = trained_on(there)
    lines = [
        "",
        "The same configs trained elsewhere"
        + (f" ({where.rstrip('.')})" if where else "")
        + ": final test R² per seed, here and there, and the difference of the means "
        "(here − there) with its 95% Welch interval.",
        "",
        "| attention | here | there | here − there |",
        "|---|---|---|---|",
    ]
    for variant, label in VARIANTS.items():
        ours = [final_r2(out / f"{variant}-s{s}")["test"] for s in range(seeds)]
        theirs = [final_r2(there / f"{variant}-s{s}")["test"] for s in range(seeds)]
        diff, low, high = difference_interval(ours, theirs)
        lines.append(
            f"| {label} | {' / '.join(f'{v:.3f}' for v in ours)} | "
            f"{' / '.join(f'{v:.3f}' for v in theirs)} | {diff:+.3f} [{low:+.3f}, {high:+.3f}] |"
        )
    return lines


PAIRS = (("hyla", "softmax"), ("hyla", "linear"), ("linear", "softmax"))


def difference_lines(
    values: dict[str, list[float]],
    what: str,
    pairs: tuple[tuple[str, str], ...] = PAIRS,
    labels: dict[str, str] = VARIANTS,
) -> list[str]:
    """Each pair's difference of means with its 95% Welch interval, over seeds."""

    def term(variant: str) -> str:  # "HYLA − nonlinearity": a label of several words
        return f"({labels[variant]})" if " " in labels[variant] else labels[variant]

    cells = []
    for ours, base in pairs:
        diff, low, high = difference_interval(values[ours], values[base])
        cells.append(f"{term(ours)} − {term(base)} {diff:+.3f} [{low:+.3f}, {high:+.3f}]")
    return ["", f"Differences in {what} (95% Welch interval over seeds): " + "; ".join(cells) + "."]


def timings_of(out: Path) -> dict[str, float]:
    return recorded_seconds(out.parent)


def _or_na(value: float | None) -> str:
    """A score to 3 decimals; ``n/a`` where it is undefined (codes that never vary)."""
    return "n/a" if value is None else f"{value:.3f}"


def latent_code_lines(
    out: Path,
    seeds: int,
    examples: int,
    timings: dict[str, float],
    variants: dict[str, str],
    pairs: tuple[tuple[str, str], ...],
    which: str = "every run",
) -> list[str]:
    """Every run's latent-code protocol (latentlens.probes.run), one row per run, then the
    differences of the decoding R² between the ``pairs`` of ``variants`` (none without
    pairs); ``which`` names the runs in the text."""
    lines = [
        "",
        f"Latent codes of {which} (`latentlens probe`, {examples:,} held-out-combination "
        "examples): decoding = ridge R² of the term bits from the last token's self-codes "
        "a(·, T, T) of every layer and head, scored on the held-out half (± its standard "
        "error), beside the same decoder fit on shuffled labels (chance is 0); k-means ARI "
        "of the codes against the term combination (0 = chance); topographic ρ between code "
        "distances and term-bit distances with its permutation p; the largest change of test "
        "R² when one head is zero-ablated (± its standard error), and how many of the "
        "layers' heads change it by more than two standard errors.",
        "",
        "| run | test R² | decoding R² | shuffled | k-means ARI | topographic ρ (p) | "
        "largest head ablation | heads > 2 s.e. | training s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    decoding: dict[str, list[float]] = {v: [] for v in variants}
    for variant, label in variants.items():
        for seed in range(seeds):
            run = out / f"{variant}-s{seed}"
            if not (run / "probes" / "results.json").is_file():
                return lines[:1] + [f"(no latent-code results: {run} is not probed)"]
            probes = read_probes(run)
            whole = probes["decoding"][0]  # every layer and head together
            decoding[variant].append(whole["test"])
            ablation = probes["ablation"]
            largest = min(ablation, key=lambda row: row["change"])
            beyond = sum(abs(r["change"]) > 2 * r["standard_error"] for r in ablation)
            topography = probes["topography"]
            seconds = timings.get(f"{out.name}/{run.name}")
            lines.append(
                f"| {label} s{seed} | {final_r2(run)['test']:.3f} | "
                f"{whole['test']:.3f} ± {whole['test_se']:.3f} | {whole['shuffled']:.3f} | "
                f"{_or_na(probes['clustering']['kmeans']['ari'])} | "
                f"{_or_na(topography['rho'])} ({_or_na(topography['p_value'])}) | "
                f"{largest['change']:+.3f} ± {largest['standard_error']:.3f} "
                f"(L{largest['layer']}H{largest['head']}) | {beyond} | "
                f"{'n/a' if seconds is None else f'{seconds:.0f}'} |"
            )
    if pairs:
        lines += difference_lines(decoding, "decoding R²", pairs, variants)
    return lines

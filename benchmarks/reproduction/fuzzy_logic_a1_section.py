"""Fuzzy logic at paper Table A1's setting (T = 32 samples per sequence, 70% of the term
combinations held out), sized for one GPU sitting: softmax, linear and HYLA with 3 seeds,
every variant's seeds trained as one vmapped seed group; R² on the held-out combinations
(the paper's OOD) beside Table A1, and on never-seen terms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from latentlens.figures import metric_curves, save_figure
from latentlens.training import TrainConfig, Trainer, model_for_task
from reproduction.fuzzy_logic_section import PAPER_TABLE_A1, VARIANTS, final_r2, task_config
from reproduction.runs import RunSpec, mean_std

TITLE = "Fuzzy logic at Table A1's setting"
SEQ_LEN, FRAC_TEST = 32, 0.7
SIZES: dict[str, dict[str, Any]] = {
    # the reference's model and 50,000 steps of batch 128
    "gpu": dict(model={}, train=dict(eval_every=5_000, eval_examples=4_096)),
    "cpu": dict(model=dict(d_model=64, d_mlp=128),
                train=dict(steps=2_000, lr=3e-3, warmup_steps=100, eval_every=500,
                           eval_examples=1_024)),
    "tiny": dict(model=dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32),
                 train=dict(steps=20, batch_size=32, warmup_steps=5, eval_every=20,
                            eval_examples=64)),
}  # fmt: skip


def task() -> dict[str, Any]:
    return {**task_config(FRAC_TEST), "seq_len": SEQ_LEN}


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    chosen, config = SIZES[size], task()
    return [
        RunSpec(
            out / f"{variant}-s{seed}",
            Trainer.resolve_config(
                "fuzzy-logic",
                model_for_task("fuzzy-logic", config, attention=variant, **chosen["model"]),
                TrainConfig.for_task("fuzzy-logic", seed=seed, **chosen["train"]),
                config,
            ),
            group=variant,
        )
        for variant in VARIANTS
        for seed in range(seeds)
    ]


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    steps = TrainConfig.for_task("fuzzy-logic", **SIZES[size]["train"]).steps
    results = {v: [final_r2(out / f"{v}-s{s}") for s in range(seeds)] for v in VARIANTS}
    lines = [
        f"## {TITLE}",
        "",
        f"T = {SEQ_LEN}, frac_test {FRAC_TEST} (split_seed {task()['split_seed']}), {steps:,} "
        f"steps, {seeds} seed(s) trained as one seed group per variant. test = held-out "
        "combinations of seen terms (the paper's OOD), ood = never-seen terms.",
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
    curves = {label: out / f"{variant}-s0" for variant, label in VARIANTS.items()}
    save_figure(metric_curves(curves, metric="r2", ylim=(-1.0, 1.0)),
                figures / "fuzzy-logic-a1-curves", ("png",))  # fmt: skip
    lines += ["", f"![R² over training, seed 0]({figures.name}/fuzzy-logic-a1-curves.png)"]
    return "\n".join(lines)

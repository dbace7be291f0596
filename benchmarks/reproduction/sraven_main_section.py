"""SRAVEN's headline alone, sized for one GPU sitting: softmax, linear and HYLA (multi-head,
the paper's Table A1 rows) with 3 seeds each, every variant's seeds trained as one vmapped
seed group (compiled and captured in a CUDA graph on CUDA); OOD accuracy beside the paper's
and the latent-code analyses of the final query (rule decoding OOD with chance and
shuffled controls, clustering, topographic similarity). The full ``sraven`` experiment adds
the ablations, single-head runs and nonlinearities."""

from __future__ import annotations

from pathlib import Path

from latentlens.figures import code_embedding, save_figure
from latentlens.models.config import VARIANTS as ATTENTION_VARIANTS
from latentlens.tasks import make_task
from latentlens.training import TrainConfig, Trainer
from reproduction.finding import Finding
from reproduction.runs import RunSpec
from reproduction.sraven_section import (
    MAIN,
    PAPER_TABLE_A1,
    SIZES,
    accuracy_cell,
    ambiguous_rate,
    latent_code_lines,
    model_config,
    read_probes,
)

TITLE = "SRAVEN: softmax, linear and HYLA"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("OOD accuracy %", reference="paper OOD %")


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    chosen = SIZES[size]
    return [
        RunSpec(
            out / f"{variant}-s{seed}",
            Trainer.resolve_config(
                "sraven",
                model_config(chosen["task"], chosen["model"], {"attention": variant}),
                TrainConfig.for_task("sraven", seed=seed, **chosen["train"]),
                chosen["task"],
            ),
            chosen["probe_examples"],
            group=variant,
        )
        for variant in MAIN
        for seed in range(seeds)
    ]


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    task = SIZES[size]["task"]
    sraven = make_task("sraven", task)
    cfg = sraven.config
    runs = {variant: [out / f"{variant}-s{s}" for s in range(seeds)] for variant in MAIN}
    steps = TrainConfig.for_task("sraven", **SIZES[size]["train"]).steps
    lines = [
        f"## {TITLE}",
        "",
        f"{cfg.num_features} features of {cfg.num_values} values, {steps:,} steps, {seeds} "
        f"seed(s) trained as one seed group per variant. Accuracy = the whole answer panel "
        f"right (chance {100 / cfg.num_values**cfg.num_features:.1f}%); "
        f"{100 * ambiguous_rate(task, 'ood'):.1f}% of OOD problems are ambiguous. Paper: "
        "Table A1 (4 layers, 20M problems).",
        "",
        "| attention | test accuracy % | OOD accuracy % | OOD per feature % | paper OOD % |",
        "|---|---|---|---|---|",
    ]
    for variant in MAIN:
        lines.append(
            f"| {ATTENTION_VARIANTS[variant].paper_name} | {accuracy_cell(runs[variant], 'test')} "
            f"| {accuracy_cell(runs[variant], 'ood')} | "
            f"{accuracy_cell(runs[variant], 'ood', 'feature_accuracy')} | "
            f"{PAPER_TABLE_A1[variant]:.1f} |"
        )
    lines += latent_code_lines(runs, [(v, v, "multi") for v in MAIN])
    for variant in MAIN:
        embedding = code_embedding(read_probes(runs[variant][0]), title=f"{variant}, seed 0")
        save_figure(embedding, figures / f"sraven-main-codes-{variant}", ("png",))
    lines += [""] + [
        f"![{variant}'s final-query codes on OOD tasks, coloured by rule]"
        f"({figures.name}/sraven-main-codes-{variant}.png)"
        for variant in MAIN
    ]
    return "\n".join(lines)

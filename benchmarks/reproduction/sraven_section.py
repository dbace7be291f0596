"""SRAVEN (docs/methods/tasks.md): OOD accuracy of softmax, linear and HYLA;
multi-head against single-head (per-head width kept); the Table A1 ablations; the value
network's nonlinearity; and the latent code of the final query on OOD tasks: the rule of
its feature decoded by a classifier fit in-distribution, clustering, and topographic
similarity (the probes of :func:`latentlens.probes.run.probe_run`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from latentlens.figures import code_embedding, save_figure
from latentlens.models.config import VARIANTS as ATTENTION_VARIANTS
from latentlens.reports.seeds import mean_std
from latentlens.tasks import make_task
from latentlens.training import TrainConfig, Trainer, model_for_task
from reproduction.finding import Finding
from reproduction.runs import RunSpec, metrics_at_end

TITLE = "SRAVEN"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("OOD accuracy %", reference="paper OOD %")
SIZES: dict[str, dict[str, Any]] = {
    # the reference: F=4, V=8, D=128, H=16, 4 layers, 156,250 steps of batch 128
    "gpu": dict(task={}, model={}, train=dict(eval_every=10_000, eval_examples=4_096),
                probe_examples=4_096),
    # two features of five values, 36 rule combinations (9 held out), 2 layers, 3,000 steps
    "cpu": dict(task=dict(num_features=2, num_values=5),
                model=dict(d_model=64, n_heads=8, qk_dim=32, v_dim=32, d_mlp=128, n_layers=2,
                           attention_dropout=0.0),
                train=dict(steps=3_000, batch_size=64, lr=3e-3, warmup_steps=100,
                           eval_every=750, eval_examples=1_024),
                probe_examples=1_024),
    "tiny": dict(task=dict(num_features=2, num_values=5),
                 model=dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32, n_layers=2),
                 train=dict(steps=20, batch_size=32, warmup_steps=5, eval_every=20,
                            eval_examples=64),
                 probe_examples=128),
}  # fmt: skip
MAIN = ("softmax", "linear", "hyla")
ABLATIONS = (
    "softmax", "linear", "linear_rms_head", "hyla", "hyla_mlp_linear", "hyla_no_rms_head",
    "hyla_mlp_linear_no_rms_head", "softmax_hyla",
)  # fmt: skip
NONLINEARITIES = ("relu", "silu", "gelu", "sigmoid", "tanh")
# paper Table A1 (4 layers, 20M problems): OOD accuracy, %
PAPER_TABLE_A1 = {"softmax": 56.6, "linear": 56.3, "hyla": 69.1}
# the paper's rebuttal: HYLA's value-network nonlinearity on SRAVEN, OOD accuracy, %
PAPER_NONLINEARITY = {
    "relu": "69.1 ± 1.9", "silu": "71.0 ± 1.1", "gelu": "58.9 ± 1.5",
    "sigmoid": "56.3 ± 1.8", "tanh": "54.9 ± 0.3",
}  # fmt: skip


def configurations() -> dict[str, dict[str, Any]]:
    """Every trained configuration by run name: attention variant, heads, nonlinearity."""
    configs: dict[str, dict[str, Any]] = {v: {"attention": v} for v in ABLATIONS}
    for variant in MAIN:
        configs[f"{variant}-single-head"] = {"attention": variant, "single_head": True}
    for activation in NONLINEARITIES[1:]:
        configs[f"hyla-{activation}"] = {"attention": "hyla", "activation": activation}
    return configs


def head_counts() -> list[tuple[str, str, str]]:
    """``(variant, run name, "multi" | "single")`` of the multi- against single-head runs."""
    return [
        (variant, name, heads)
        for variant in MAIN
        for name, heads in ((variant, "multi"), (f"{variant}-single-head", "single"))
    ]


def model_config(task: dict[str, Any], model: dict[str, Any], choice: dict[str, Any]) -> Any:
    overrides = {**model, "attention": choice["attention"]}
    if "activation" in choice:
        overrides["activation"] = choice["activation"]
    if choice.get("single_head"):  # one head of the multi-head model's per-head widths
        base = model_for_task("sraven", task, **model)
        overrides.update(n_heads=1, qk_dim=base.qk_dim // base.n_heads,
                         v_dim=base.v_dim // base.n_heads)  # fmt: skip
    return model_for_task("sraven", task, **overrides)


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    chosen = SIZES[size]
    specs = []
    for name, choice in configurations().items():
        probe = name in MAIN or name.endswith("single-head")
        for seed in range(seeds):
            config = Trainer.resolve_config(
                "sraven",
                model_config(chosen["task"], chosen["model"], choice),
                TrainConfig.for_task("sraven", seed=seed, **chosen["train"]),
                chosen["task"],
            )
            specs.append(
                RunSpec(out / f"{name}-s{seed}", config, chosen["probe_examples"] if probe else 0)
            )
    return specs


def read_probes(run: Path) -> dict[str, Any]:
    return json.loads((run / "probes" / "results.json").read_text())


def accuracy_cell(runs: list[Path], split: str, metric: str = "accuracy") -> str:
    return mean_std([100 * metrics_at_end(run)[split][metric] for run in runs], digits=1)


def ambiguous_rate(task: dict[str, Any], split: str, examples: int = 4_096) -> float:
    sraven = make_task("sraven", task)
    batch = sraven.sample(examples, split, sraven.make_generator(0))
    return float(sraven.ambiguous(batch).float().mean())


def accuracy_figure(out: Path, seeds: int) -> Figure:
    """OOD per-feature accuracy of every configuration, mean and std over seeds."""
    names = list(configurations())
    values = [
        np.array([100 * metrics_at_end(out / f"{n}-s{s}")["ood"]["feature_accuracy"]
                  for s in range(seeds)])
        for n in names
    ]  # fmt: skip
    figure = Figure(figsize=(7.0, 3.4), layout="constrained")
    ax = figure.subplots()
    ax.bar(range(len(names)), [v.mean() for v in values], yerr=[v.std() for v in values],
           color=["C0" if "single" not in n else "C1" for n in names], capsize=2)  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel("OOD accuracy per feature, %")
    ax.set_title("SRAVEN: held-out rule combinations")
    return figure


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    task = SIZES[size]["task"]
    sraven = make_task("sraven", task)
    chance = 100 / sraven.config.num_values
    panel_chance = 100 / sraven.config.num_values**sraven.config.num_features
    runs = {name: [out / f"{name}-s{s}" for s in range(seeds)] for name in configurations()}
    lines = [
        f"## {TITLE}",
        "",
        f"Task {sraven.config.num_features} features of {sraven.config.num_values} values, "
        f"{seeds} seed(s). OOD = the held-out rule combinations; accuracy = the whole answer "
        f"panel right (chance {panel_chance:.1f}%), "
        f"per feature = each feature right (chance {chance:.1f}%). Instances whose first 8 "
        f"panels another rule also fits with a different answer: "
        f"{100 * ambiguous_rate(task, 'ood'):.1f}% of OOD problems. Paper: 4 layers, 20M "
        "problems (Table A1).",
        "",
        "| attention | heads | test accuracy % | OOD accuracy % | OOD per feature % "
        "| paper OOD % |",
        "|---|---|---|---|---|---|",
    ]
    for variant, name, heads in head_counts():
        paper = f"{PAPER_TABLE_A1[variant]:.1f}" if heads == "multi" else "n/a"
        lines.append(
            f"| {ATTENTION_VARIANTS[variant].paper_name} | {heads} | "
            f"{accuracy_cell(runs[name], 'test')} | {accuracy_cell(runs[name], 'ood')} | "
            f"{accuracy_cell(runs[name], 'ood', 'feature_accuracy')} | {paper} |"
        )
    lines += [
        "",
        "Table A1 ablations (the paper reports SRAVEN for three of its rows):",
        "",
        "| variant | official name | OOD accuracy % | OOD per feature % | paper OOD % |",
        "|---|---|---|---|---|",
    ]
    for name in ABLATIONS:
        variant = ATTENTION_VARIANTS[name]
        paper = f"{PAPER_TABLE_A1[name]:.1f}" if name in PAPER_TABLE_A1 else "n/a"
        lines.append(
            f"| {variant.paper_name} | {variant.official_name} | "
            f"{accuracy_cell(runs[name], 'ood')} | "
            f"{accuracy_cell(runs[name], 'ood', 'feature_accuracy')} | {paper} |"
        )
    lines += [
        "",
        "HYLA's value-network nonlinearity (the paper's rebuttal):",
        "",
        "| nonlinearity | OOD accuracy % | OOD per feature % | paper OOD % |",
        "|---|---|---|---|",
    ]
    for activation in NONLINEARITIES:
        name = "hyla" if activation == "relu" else f"hyla-{activation}"
        lines.append(
            f"| {activation} | {accuracy_cell(runs[name], 'ood')} | "
            f"{accuracy_cell(runs[name], 'ood', 'feature_accuracy')} | "
            f"{PAPER_NONLINEARITY[activation]} |"
        )
    lines += latent_code_lines(runs, head_counts())
    save_figure(accuracy_figure(out, seeds), figures / "sraven-accuracy", ("png",))
    for name in ("hyla", "hyla-single-head"):
        embedding = code_embedding(read_probes(runs[name][0]), title=f"{name}, seed 0")
        save_figure(embedding, figures / f"sraven-codes-{name}", ("png",))
    lines += [
        "",
        f"![OOD accuracy per configuration]({figures.name}/sraven-accuracy.png)",
        f"![HYLA's final-query codes, PCA]({figures.name}/sraven-codes-hyla.png)",
        f"![single-head HYLA's final-query codes, PCA]"
        f"({figures.name}/sraven-codes-hyla-single-head.png)",
    ]
    return "\n".join(lines)


def latent_code_lines(runs: dict[str, list[Path]], rows: list[tuple[str, str, str]]) -> list[str]:
    """The latent-code table, one row per ``(variant, run name, "multi" | "single")``."""
    lines = [
        "",
        "The final query's latent code towards the same feature in the first two panels of "
        "the last row (every layer and head): a logistic-regression classifier of that "
        "feature's rule fit on in-distribution tasks ('test_unpermuted') and scored on OOD "
        "tasks ('ood_unpermuted'), beside chance (the majority rule) and a shuffled-label "
        "control; clustering of the OOD codes against the rule (k-means ARI); topographic "
        "similarity = Spearman ρ between code distances and rule distances on OOD tasks, "
        "with its permutation p-value.",
        "",
        "| attention | heads | rule decoding OOD acc. % | chance % | shuffled % | k-means ARI | "
        "topographic ρ | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, name, heads in rows:
        probes = [read_probes(run) for run in runs[name]]
        whole = [p["decoding"][0] for p in probes]  # every layer and head together
        topography = [p["topography"] for p in probes]
        lines.append(
            f"| {ATTENTION_VARIANTS[variant].paper_name} | {heads} | "
            f"{mean_std([100 * w['test'] for w in whole], digits=1)} | "
            f"{mean_std([100 * w['chance'] for w in whole], digits=1)} | "
            f"{mean_std([100 * w['shuffled'] for w in whole], digits=1)} | "
            f"{mean_std([p['clustering']['kmeans']['ari'] for p in probes])} | "
            f"{mean_std([t['rho'] for t in topography])} | "
            f"{mean_std([t['p_value'] for t in topography])} |"
        )
    return lines

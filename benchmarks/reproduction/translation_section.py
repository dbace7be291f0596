"""Compositional translation (reference/fusion_gca.md): the encoder-decoder baseline
against FUSION in the encoder, the decoder and both (CTER, BLEU), the layer connection
with the original and the GCA initialisation, and the fuse weights over training. The
runs and the summaries are those of ``benchmarks/fusion_gca.py``."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import fusion_gca

from latentlens.figures import fuse_weight_curves, routing_evolution, save_figure
from reproduction.runs import RunSpec, mean_std

TITLE = "Translation: FUSION and the layer connection (GCA)"
SIZES: dict[str, dict[str, Any]] = {
    **fusion_gca.SIZES,
    "tiny": dict(
        task=dict(frac_heldout=0.5),
        model=dict(d_model=16, n_heads=2, qk_dim=16, v_dim=16, d_mlp=32, n_layers_encoder=2,
                   n_layers_decoder=2),
        train=dict(steps=10, batch_size=16, warmup_steps=2, eval_every=5, eval_examples=32),
    ),
}  # fmt: skip
LABELS = {"cter_instance": "CTER instance", "cter_aggregate": "CTER aggregate",
          "bleu_compound": "BLEU compounds", "bleu_test": "BLEU test"}  # fmt: skip


def run_path(out: Path, system: str, seed: int) -> Path:
    return out / f"{system}-s{seed}"


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return [
        RunSpec(run_path(out, system, seed), fusion_gca.run_config(system, seed, SIZES[size]))
        for system in fusion_gca.SYSTEMS
        for seed in range(seeds)
    ]


def relative_cter(systems: dict[str, Any], system: str, key: str) -> str:
    """The change of mean CTER from the baseline's, in percent."""
    ours = statistics.mean(q[key] for q in systems[system]["quality"])
    base = statistics.mean(q[key] for q in systems["baseline"]["quality"])
    return "n/a (baseline CTER 0)" if base == 0 else f"{100 * (ours / base - 1):+.1f}%"


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    runs = {s: [run_path(out, s, seed) for seed in range(seeds)] for s in fusion_gca.SYSTEMS}
    systems = fusion_gca.summarise(runs)
    chosen = SIZES[size]
    steps = fusion_gca.run_config("baseline", 0, chosen)["train"]["steps"]
    lines = [
        f"## {TITLE}",
        "",
        f"latentlens's synthetic compositional translation (CoGnition is not available "
        f"offline), {chosen['task']['frac_heldout']:.0%} of the compounds held out, "
        f"{steps:,} steps, {seeds} seed(s). CTER: the "
        "compound translation error rate (lower is better); ΔCTER: the change of the mean "
        "from the baseline; paper: CoGnition (reference/fusion_gca.md section 1).",
        "",
        "| system | " + " | ".join(LABELS.values()) + " | ΔCTER inst. / aggr. | paper |",
        "|---|" + "---|" * (len(LABELS) + 2),
    ]
    for system, entry in systems.items():
        cells = [mean_std([q[key] for q in entry["quality"]]) for key in LABELS]
        if system == "baseline":
            delta = paper = "—"
        else:
            delta = " / ".join(relative_cter(systems, system, k) for k in list(LABELS)[:2])
            published = fusion_gca.PAPER_RELATIVE_CTER.get(system)
            paper = f"{published[0]:+.1f}% / {published[1]:+.1f}%" if published else "n/a"
        lines.append(f"| {system} | " + " | ".join(cells) + f" | {delta} | {paper} |")
    lines += [
        "",
        "Fuse weights of fusion-both (mean over batch, heads and positions, per source "
        "layer: the embedding first), at the first record (step 0: the initialisation) and "
        "at the end, and their "
        "largest distance from uniform at the end over seeds:",
        "",
        "| fused layer | first record (seed 0) | end (seed 0) | max abs(w − uniform) at the end |",
        "|---|---|---|---|",
    ]
    fuse = systems["fusion-both"]["fuse"]
    for layer, first in fuse[0].items():
        gaps = mean_std([seed[layer]["last_from_uniform"] for seed in fuse])
        lines.append(
            f"| {layer} | step {first['first_step']}: {first['first']} | {first['last']} | {gaps} |"
        )
    routing = systems["connection-gca"]["routing"]
    moved = [r["moved"] for r in routing]
    lines += [
        "",
        f"Routing matrix of the GCA layer connection: largest change from step "
        f"{routing[0]['first_step']} to the end {mean_std(moved)}.",
    ]
    both, gca = run_path(out, "fusion-both", 0), run_path(out, "connection-gca", 0)
    save_figure(fuse_weight_curves(both), figures / "translation-fuse-weights", ("png",))
    save_figure(routing_evolution(gca), figures / "translation-routing-gca", ("png",))
    lines += [
        "",
        f"![fuse weights over training, fusion-both, seed 0]"
        f"({figures.name}/translation-fuse-weights.png)",
        f"![GCA routing matrix over training, seed 0]({figures.name}/translation-routing-gca.png)",
    ]
    return "\n".join(lines)

"""Compositional translation (docs/methods/models.md): FUSION's experiment on the
synthetic CoGnition twin: the encoder-decoder baseline against fuse-attention in the
encoder, the decoder and both (CTER overall and per subset, BLEU; ΔCTER with 95% confidence
intervals), and where the fuse weights end up. The runs are those of
``benchmarks/reproduction/fusion_gca.py`` (which also trains the layer-connection systems)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from latentlens.figures import fuse_weight_curves, save_figure
from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.tasks import make_task
from reproduction import fusion_gca
from reproduction.finding import Finding
from reproduction.runs import RunSpec

TITLE = "Translation: FUSION on a CoGnition-hard benchmark"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("CTER instance", lower_is_better=True)
SIZES: dict[str, dict[str, Any]] = {
    **fusion_gca.SIZES,
    "tiny": dict(
        task=dict(train_sentences=400, valid_sentences=20, test_sentences=40,
                  compounds_per_subset=36),
        model=dict(d_model=16, n_heads=2, qk_dim=16, v_dim=16, d_mlp=32, n_layers_encoder=2,
                   n_layers_decoder=2),
        train=dict(steps=10, batch_size=16, warmup_steps=2, eval_every=5, eval_examples=32),
    ),
}  # fmt: skip
LABELS = {"cter_instance": "CTER instance", "cter_aggregate": "CTER aggregate",
          "bleu_cg": "BLEU CG test", "bleu_test": "BLEU random test"}  # fmt: skip
LEVELS = ("instance", "aggregate")
# docs/methods/numbers.md: the CoGnition Transformer baseline (mean of 6 seeds)
COGNITION_BASELINE = {"cter_instance": 0.2842, "cter_aggregate": 0.6288, "bleu_cg": 59.5,
                      "bleu_test": 69.48, "cter_NP_instance": 0.2474, "cter_NP_aggregate": 0.5516,
                      "cter_VP_instance": 0.2482, "cter_VP_aggregate": 0.5954,
                      "cter_PP_instance": 0.3571, "cter_PP_aggregate": 0.7394}  # fmt: skip


def run_path(out: Path, system: str, seed: int) -> Path:
    return out / f"{system}-s{seed}"


# FUSION's experiment (docs/methods/models.md): the baseline and fuse-attention on each side
SYSTEMS = ("baseline", "fusion-encoder", "fusion-decoder", "fusion-both")


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return [
        RunSpec(run_path(out, system, seed), fusion_gca.run_config(system, seed, SIZES[size]))
        for system in SYSTEMS
        for seed in range(seeds)
    ]


def delta_cell(quality: dict[str, list[dict[str, float]]], system: str, key: str) -> str:
    """ΔCTER in points with its 95% CI, and the relative change of the means."""
    ours = [q[key] for q in quality[system]]
    base = [q[key] for q in quality["baseline"]]
    diff, low, high = difference_interval(ours, base)
    relative = statistics.mean(base) and 100 * diff / statistics.mean(base)
    return f"{100 * diff:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] ({relative:+.0f}%)"


def source_name(block: int, source: int) -> str:
    """Source ``source`` of fused block ``block`` (its sources: the embedding, then the
    outputs of blocks 0 .. block - 1)."""
    if source == 0:
        return "the embedding"
    return "the block below" if source == block else f"block {source - 1}'s output"


def fuse_convergence(fuse: list[dict[str, Any]]) -> list[str]:
    """Per fused layer: the mean end weight of each source over seeds (± std), and the
    source it draws on most."""
    lines = []
    for layer in fuse[0]:
        weights = [seed[layer]["last"] for seed in fuse]
        sources = len(weights[0])
        cells = [mean_std([w[k] for w in weights], 2) for k in range(sources)]
        top = max(range(sources), key=lambda k: statistics.mean(w[k] for w in weights))
        name = source_name(int(layer.split(".")[1]), top)
        lines.append(f"| {layer} | " + ", ".join(cells) + f" | {name} |")
    return lines


def convergence_sentence(fuse: list[dict[str, Any]]) -> str:
    """What the fused layers converge to, side by side: the source each draws on most,
    with its mean end weight ± std over seeds."""
    parts = []
    for side in ("encoder", "decoder"):
        layers = sorted((k for k in fuse[0] if k.startswith(side)), key=lambda k: int(k[-1]))
        cells = []
        for layer in layers:
            weights = [seed[layer]["last"] for seed in fuse]
            means = [statistics.mean(w[k] for w in weights) for k in range(len(weights[0]))]
            top = max(range(len(means)), key=means.__getitem__)
            block = int(layer.split(".")[1])
            name = source_name(block, top)
            spread = mean_std([w[top] for w in weights], 2)
            cells.append(f"block {block} on {name} ({spread})")
        if cells:
            parts.append(f"in the {side}, " + ", ".join(cells))
    return (
        "At the end of training each fused block draws most on: "
        + "; ".join(parts)
        + " (weight mean ± std over seeds; uniform would be 1 / number of sources)."
    )


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    runs = {s: [run_path(out, s, seed) for seed in range(seeds)] for s in SYSTEMS}
    quality = {s: [fusion_gca.final_quality(p) for p in paths] for s, paths in runs.items()}
    chosen = SIZES[size]
    config = fusion_gca.run_config("baseline", 0, chosen)
    task = make_task("translation", config["task"]["config"])
    description = task.describe()
    steps = config["train"]["steps"]
    lines = [
        f"## {TITLE}",
        "",
        "FUSION's experiment ([Methods: models](methods/models.md#fusion-fuse-attention-over-the-"
        "previous-layers)) on latentlens's synthetic "
        "CoGnition twin ([Methods: tasks](methods/tasks.md#the-synthetic-twin-latentlens-"
        "generates); CoGnition itself is not available offline, and "
        "`--data-dir` runs the same commands on the release): "
        f"{description['sentences']['train']:,} training sentences, "
        f"{description['compounds']:,} novel compounds (NP / VP / PP) in "
        f"{task.config.contexts} contexts each, {steps:,} steps of batch "
        f"{config['train']['batch_size']}, encoder-decoder with "
        f"{config['model']['n_layers_encoder']} + {config['model']['n_layers_decoder']} layers, "
        f"d_model {config['model']['d_model']}, {seeds} seeds. CTER by CoGnition's rule on "
        "the whole CG test (lower is better), mean ± std over seeds; the CoGnition row is the "
        "published Transformer baseline (6 + 6 layers, d 512, 100k updates).",
        "",
        "| system | " + " | ".join(LABELS.values()) + " |",
        "|---|" + "---|" * len(LABELS),
        "| CoGnition baseline (published) | "
        + " | ".join(f"{COGNITION_BASELINE[k]:.{1 if 'bleu' in k else 3}f}" for k in LABELS)
        + " |",
    ]
    for system in SYSTEMS:
        cells = [mean_std([q[key] for q in quality[system]], 1 if "bleu" in key else 3)
                 for key in LABELS]  # fmt: skip
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "By subset (instance / aggregate CTER):", "",
              "| system | NP | VP | PP |", "|---|---|---|---|"]  # fmt: skip
    rows = [("CoGnition baseline (published)", [COGNITION_BASELINE])]
    rows += [(system, quality[system]) for system in SYSTEMS]
    for name, entries in rows:
        cells = [
            " / ".join(mean_std([q[f"cter_{sub}_{level}"] for q in entries], 3) for level in LEVELS)
            for sub in ("NP", "VP", "PP")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "ΔCTER against the baseline: the difference of the means in points with its 95% "
        "confidence interval (Welch's t over seeds) and, in parentheses, the relative change "
        "of the means, beside the paper's relative change on CoGnition:",
        "",
        "| system | ΔCTER instance | ΔCTER aggregate | paper (instance / aggregate) |",
        "|---|---|---|---|",
    ]
    for system in SYSTEMS[1:]:
        paper = fusion_gca.PAPER_RELATIVE_CTER[system]
        lines.append(
            f"| {system} | {delta_cell(quality, system, 'cter_instance')} | "
            f"{delta_cell(quality, system, 'cter_aggregate')} | "
            f"{paper[0]:+.1f}% / {paper[1]:+.1f}% |"
        )
    fuse = [fusion_gca.fuse_summary(path) for path in runs["fusion-both"]]
    lines += [
        "",
        "Fuse weights of fusion-both at the end of training (mean over batch, heads and "
        "positions; per source layer, the embedding first; mean ± std over seeds) and the "
        "source each layer draws on most (block 0 fuses the embedding alone and is left "
        "out):",
        "",
        "| fused layer | end weight per source | largest |",
        "|---|---|---|",
        *fuse_convergence(fuse),
        "",
        convergence_sentence(fuse),
    ]
    both = run_path(out, "fusion-both", 0)
    save_figure(fuse_weight_curves(both), figures / "translation-fuse-weights", ("png",))
    heatmap = figures / "translation-fuse-weights-heatmap"
    save_figure(fuse_weight_curves(both, heatmaps=True), heatmap, ("png",))
    lines += [
        "",
        f"![fuse weights over training, fusion-both, seed 0]"
        f"({figures.name}/translation-fuse-weights.png)",
        f"![fuse weights per layer over training, fusion-both, seed 0]"
        f"({figures.name}/translation-fuse-weights-heatmap.png)",
    ]
    return "\n".join(lines)

"""Modular in-context regression (docs/methods/numbers.md): the
hypernetwork transformer against the vanilla transformer on the Connected+, Connected and
Disconnected supports, with z decoded from every layer over training. The runs and the
table are those of ``benchmarks/reproduction/hyperteacher.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from latentlens.figures import decoding_curves, metric_curves, save_figure
from reproduction import hyperteacher
from reproduction.finding import Finding
from reproduction.runs import RunSpec

TITLE = "Hyperteacher: modular in-context regression"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("OOD R² (Connected+)", reference="paper", row="OOD R² (Connected+)")
SIZES: dict[str, dict[str, Any]] = {
    **hyperteacher.SIZES,
    "tiny": dict(steps=10, batch_size=16, lr=3e-3, warmup_steps=2, eval_every=10,
                 eval_examples=64),
}  # fmt: skip


def run_path(out: Path, kind: str, support: str, seed: int) -> Path:
    return out / f"{kind}-{support}-s{seed}"


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return [
        RunSpec(
            run_path(out, kind, support, seed),
            hyperteacher.run_config(kind, support, seed, SIZES[size]),
        )
        for kind in hyperteacher.MODELS
        for support in hyperteacher.SUPPORTS
        for seed in range(seeds)
    ]


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    results = {
        kind: {
            support: [
                hyperteacher.final_numbers(run_path(out, kind, support, seed))
                for seed in range(seeds)
            ]
            for support in hyperteacher.SUPPORTS
        }
        for kind in hyperteacher.MODELS
    }
    table = hyperteacher.table_of(results)
    train = SIZES[size]
    kinds = list(hyperteacher.MODELS)
    lines = [
        f"## {TITLE}",
        "",
        f"{train['steps']:,} steps of batch {train['batch_size']}, lr {train['lr']}, "
        f"{seeds} seed(s); R² on {train['eval_examples']:,} sequences. Paper: 100,000 steps, "
        "numbers read from its figures ([Methods: numbers](methods/numbers.md#modular-in-context-"
        "regression)). Probes: "
        "ridge from each layer's last-token residual stream (and from the hypernetwork's "
        "bottleneck ẑ) to the task code z, fit in-distribution, R² out-of-distribution.",
        "",
        "| quantity | " + " | ".join(f"{hyperteacher.MODELS[k]} | paper" for k in kinds) + " |",
        "|---|" + "---|---|" * len(kinds),
    ]
    for key, label in hyperteacher.ROWS:
        cells = []
        for kind in kinds:
            paper = hyperteacher.PAPER.get((kind, key))
            cells.append(f"{table[kind][key]} | {'n/a' if paper is None else f'{paper:.3f}'}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    runs = {hyperteacher.MODELS[k]: run_path(out, k, "connected-plus", 0) for k in kinds}
    lines += connected_plus_figures(runs, figures, "hyperteacher")
    return "\n".join(lines)


def connected_plus_figures(runs: dict[str, Path], figures: Path, name: str) -> list[str]:
    """R² and z-decoding curves of the Connected+ runs (by model label), saved as
    ``{name}-r2`` and ``{name}-decoding``; the report's lines that show them."""
    figure = metric_curves(runs, metric="r2", ylim=(-1.0, 1.0))
    figure.suptitle("modular ICL, Connected+ support, seed 0")
    save_figure(figure, figures / f"{name}-r2", ("png",))
    save_figure(decoding_curves(runs), figures / f"{name}-decoding", ("png",))
    return [
        "",
        f"![R² over training, Connected+]({figures.name}/{name}-r2.png)",
        f"![z decoded from each layer over training]({figures.name}/{name}-decoding.png)",
    ]

"""The hyperteacher headline alone, sized for one GPU sitting: the hypernetwork transformer
against the vanilla transformer on the Connected+ support at the reference's 100,000 steps,
3 seeds each trained as one vmapped seed group per model (compiled on CUDA; the teacher's
SVD keeps the step out of a CUDA graph). The full ``hyperteacher`` experiment adds the
Connected and Disconnected supports."""

from __future__ import annotations

from pathlib import Path

from latentlens.reports.seeds import mean_std
from reproduction import hyperteacher
from reproduction.finding import Finding
from reproduction.hyperteacher_section import SIZES, connected_plus_figures
from reproduction.runs import RunSpec

TITLE = "Hyperteacher on Connected+"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("OOD R² (Connected+)", reference="paper", row="OOD R² (Connected+)")
SUPPORT = "connected-plus"
ROWS = hyperteacher.ROWS[:6]  # the Connected+ rows


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    return [
        RunSpec(
            out / f"{kind}-s{seed}",
            hyperteacher.run_config(kind, SUPPORT, seed, SIZES[size]),
            group=kind,
        )
        for kind in hyperteacher.MODELS
        for seed in range(seeds)
    ]


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    kinds = list(hyperteacher.MODELS)
    numbers = {k: [hyperteacher.final_numbers(out / f"{k}-s{s}") for s in range(seeds)]
               for k in kinds}  # fmt: skip
    train = SIZES[size]
    lines = [
        f"## {TITLE}",
        "",
        f"{train['steps']:,} steps of batch {train['batch_size']}, lr {train['lr']}, {seeds} "
        "seed(s), each model's seeds one seed group. Paper: 100,000 steps, read from its "
        "figures ([Methods: numbers](methods/numbers.md#modular-in-context-regression)).",
        "",
        "| quantity | " + " | ".join(f"{hyperteacher.MODELS[k]} | paper" for k in kinds) + " |",
        "|---|" + "---|---|" * len(kinds),
    ]
    for key, label in ROWS:
        cells = []
        for kind in kinds:
            paper = hyperteacher.PAPER.get((kind, key))
            values = mean_std([r[key] for r in numbers[kind]])
            cells.append(f"{values} | {'n/a' if paper is None else f'{paper:.3f}'}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    runs = {hyperteacher.MODELS[k]: out / f"{k}-s0" for k in kinds}
    lines += connected_plus_figures(runs, figures, "hyperteacher-plus")
    return "\n".join(lines)

"""The learning curves of the SRAVEN runs under a folder, as markdown: for each run (a
folder with a metrics.jsonl), the training loss and the OOD per-feature accuracy at each
evaluation, so that a run stuck near chance (loss ln 8 = 2.079, per-feature accuracy 1/8)
stands out beside the ones that learn.

    python benchmarks/gpu/sraven_curves.py FOLDER [--every 2000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.figures.training import metric_curve
from latentlens.training import RunDirectory


def table(runs: list[Path], split: str, key: str, every: int) -> list[str]:
    curves = {run.name: metric_curve(RunDirectory(run).read_metrics(), split, key) for run in runs}
    steps = sorted({s for c in curves.values() for s in c if s % every == 0})
    lines = [f"{split} {key}:", "", "| run | " + " | ".join(f"{s:,}" for s in steps) + " |"]
    lines.append("|---" * (len(steps) + 1) + "|")
    for name, values in curves.items():
        cells = [f"{values[s]:.3f}" if s in values else "" for s in steps]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--every", type=int, default=2000, help="show every Nth step")
    args = parser.parse_args(argv)
    runs = sorted(p.parent for p in args.folder.glob("*/metrics.jsonl"))
    if not runs:
        raise SystemExit(f"error: no run (a folder with metrics.jsonl) under {args.folder}")
    for split, key in (("train", "loss"), ("ood", "feature_accuracy"), ("ood", "accuracy")):
        print("\n".join(table(runs, split, key, args.every)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

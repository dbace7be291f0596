"""Wall time of a tiny 8-cell sweep through Ray (``latentlens sweep``) against training
the same cells one after another in one process.

    python benchmarks/speed/sweep_wall_time.py [--cpus 2] [--steps 300] [--out runs/sweep-bench]

Prints both wall times and their ratio. Ray's start-up is counted: it is what a user pays.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from latentlens.probes import tracking_callbacks
from latentlens.sweep import SweepSpec, run_sweep
from latentlens.training import train_or_resume


def spec(steps: int) -> SweepSpec:
    return SweepSpec.from_dict({
        "task": "fuzzy-logic",
        "base": {"model": {"d_model": 32, "n_heads": 4, "qk_dim": 8, "v_dim": 8, "d_mlp": 64},
                 "train": {"steps": steps, "eval_every": steps, "batch_size": 32,
                           "eval_examples": 64, "warmup_steps": 5}},
        "axes": {"model.attention": ["softmax", "linear", "hyla", "linear_rms_head"],
                 "train.seed": [0, 1]},
    })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("runs/sweep-bench"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    grid = spec(args.steps)
    start = time.perf_counter()
    run_sweep(grid, args.out / "ray", num_cpus=args.cpus)
    ray_s = time.perf_counter() - start
    start = time.perf_counter()
    for cell in grid.cells():
        train_or_resume(args.out / "sequential" / cell.name, cell.config,
                        tracking_callbacks(cell.config), device="cpu", quiet=True)  # fmt: skip
    sequential_s = time.perf_counter() - start
    print(
        f"8 cells of {args.steps} steps on {args.cpus} CPUs: Ray {ray_s:.1f} s, one after "
        f"another {sequential_s:.1f} s, ratio {sequential_s / ray_s:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``latentlens sweep``: a grid of runs from a spec file, on Ray."""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.cli.choices import DEVICE_CHOICES, MAX_CELLS


def add_sweep_parser(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="run a grid of training runs from a spec file on Ray (local or a cluster)",
        description="Expand SPEC (JSON or YAML: task, model, base sections and axes such as "
        "model.attention: [softmax, hyla] and train.seed: [0, 1]) into its grid and train "
        "every cell as a run directory OUT/<cell> on Ray: a local instance by default, one "
        "CPU core or GPU per run, or a cluster with --address. Finished cells are skipped "
        "and interrupted ones resumed, so the same command continues a sweep.",
    )
    sweep.add_argument("spec", nargs="?", type=Path, help="the sweep spec (.json, .yaml)")
    sweep.add_argument("--out", type=Path, help="default: runs/sweep-SPECNAME")
    sweep.add_argument(
        "--address", help="a Ray cluster (ray://HOST:PORT, or RAY_ADDRESS); default: local"
    )
    sweep.add_argument("--num-cpus", type=int, help="local Ray's CPUs (default: all)")
    sweep.add_argument("--device", choices=DEVICE_CHOICES, default="cpu")
    sweep.add_argument(
        "--seeds",
        action="store_true",
        help="train the cells that differ only in train.seed as one vmapped seed group "
        "(one task; pays on a GPU)",
    )
    sweep.add_argument(
        "--fused",
        action="store_true",
        help="train every cell with the fused CPU kernels (as train --fused; one cell a core)",
    )
    sweep.add_argument(
        "--max-cells",
        type=int,
        default=MAX_CELLS,
        help="refuse a grid of more cells than this (default: %(default)s)",
    )
    sweep.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="stop every cell by then, checkpointed (exit status 3 while some are left); "
        "the same command continues them",
    )
    sweep.add_argument(
        "--status", type=Path, metavar="SWEEP_DIR", help="print a sweep's cells and exit"
    )
    sweep.set_defaults(handler=run_sweep_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    from latentlens.sweep import SweepSpec, run_sweep, status_lines

    if args.status is not None:
        print("\n".join(status_lines(args.status)))
        return 0
    if args.spec is None:
        raise ValueError("give a sweep spec file, or --status SWEEP_DIR")
    spec = SweepSpec.read(args.spec)
    out = args.out or Path("runs") / f"sweep-{args.spec.stem}"
    states = run_sweep(spec, out, args.address, args.device, args.num_cpus, args.seeds,
                       args.max_cells, args.time_budget, fused=args.fused)  # fmt: skip
    print("\n".join(status_lines(out)))
    if any(s["state"] == "failed" for s in states.values()):
        return 1
    if paused := sum(s["state"] == "paused" for s in states.values()):
        print(f"{paused} cells paused for --time-budget, checkpointed; run the same command "
              "again to continue them")  # fmt: skip
        return 3
    return 0

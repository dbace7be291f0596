"""`latentlens train` with the kernels' operators' C++ bodies against their Python ones.

    python benchmarks/speed/operator_bodies.py [--tasks fuzzy-logic] [--variants linear
        softmax] [--rounds 3] [--budgets SECONDS SECONDS | --lengths STEPS STEPS]
        [--out FILE.json]

The command a user types at its defaults (``command_side_by_side.py``'s, its rate the
difference of two ``--time-budget`` runs, so that start-up cancels), once with the C++
bodies (``latentlens.kernels.native``, the default) and once with
``LATENTLENS_NATIVE_OPERATORS=0`` (the Python bodies), in turns within each round, the
order swapped every round. Both runs share the path calibration's cache, so they take the
same path; what differs is the operators' bodies alone. The budgets are
``command_side_by_side.py``'s per task (``BUDGETS``), and a pair of runs that did not start
alike is timed again as there (``checked_rate``). Prints each round's ratio (C++ / Python)
and their mean with its 95% interval (Student's t). ``--lengths 1500 3000`` runs
both commands to the end at those steps instead (``command_side_by_side.py``'s option):
runs of 1,000 to 4,999 steps compile nothing and take the fused kernels eagerly where
those are faster, whose autograd functions call the same bodies.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.kernels.native import SWITCH  # noqa: E402
from speed.command_rounds import Cell  # noqa: E402
from speed.command_side_by_side import (  # noqa: E402
    TASKS,
    budgets_for,
    budgets_said,
    checked_rate,
    lengths_refused,
    limits_of,
    prime,
    processor,
)

BODIES = {"cpp": None, "python": "0"}  # each side's LATENTLENS_NATIVE_OPERATORS


def use_bodies(bodies: str) -> None:
    """Set this process's environment, which the timed commands inherit, for ``bodies``."""
    if BODIES[bodies] is None:
        os.environ.pop(SWITCH, None)
    else:
        os.environ[SWITCH] = BODIES[bodies]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["fuzzy-logic"], choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=["linear", "softmax"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budgets", type=float, nargs=2,
                        help="seconds of training of each run (default: per task)")  # fmt: skip
    parser.add_argument("--lengths", type=int, nargs=2, metavar="STEPS",
                        help="run both commands to the end at these --steps instead")  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.lengths is not None and (refused := lengths_refused(args.lengths)):
        parser.error(refused)
    budgets = budgets_for(args.tasks, args.budgets)
    if args.lengths is None:
        measure = budgets_said(budgets)
    else:
        measure = f"runs of {args.lengths[0]} and {args.lengths[1]} steps"
    print(f"{processor()}; the command at its defaults, rates by the difference of {measure}")
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for task in args.tasks:
            limits = limits_of(args.lengths, budgets[task])
            for variant in args.variants:
                for bodies in BODIES:
                    use_bodies(bodies)
                    prime(task, variant, 1, folder)
                ratios, rates, retimed = [], {bodies: [] for bodies in BODIES}, 0
                for round_ in range(args.rounds):
                    order = list(BODIES) if round_ % 2 == 0 else list(BODIES)[::-1]
                    rate = {}
                    for bodies in order:
                        use_bodies(bodies)
                        tag = f"{bodies}-r{round_}"
                        rate[bodies], again = checked_rate(task, variant, 1, limits, folder, tag)
                        retimed += again
                        rates[bodies].append(rate[bodies].total)
                    ratios.append(rate["cpp"].total / rate["python"].total)
                    print(f"{task} {variant} round {round_ + 1}: C++ {rate['cpp'].total:.1f}, "
                          f"Python {rate['python'].total:.1f} steps/s ({rate['cpp'].paths[0]}, "
                          f"{rate['python'].paths[0]}): {ratios[-1]:.3f}x", flush=True)  # fmt: skip
                interval = Cell(task, variant, "single", tuple(ratios)).mean_interval()
                shown = "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
                print(f"{task} {variant}: {statistics.fmean(ratios):.3f}x{shown} over "
                      f"{len(ratios)} rounds")  # fmt: skip
                results.append({"task": task, "variant": variant, "ratios": ratios,
                                "rates": rates, "retimed": retimed})  # fmt: skip
    use_bodies("cpp")
    if args.out:
        args.out.write_text(json.dumps({"processor": processor(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

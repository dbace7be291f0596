"""Add a finished experiment to the model zoo: every run ``RUNS/SECTION/<variant>-s<seed>``
(of ``--variants`` only, when given) becomes the zoo entry ``SECTION/<variant>/s<seed>``, its
card holding the command, machine, commit and date given here and the run's wall time: its
share of its seed group's from ``RUNS/timings.json`` (``reproduce.py``'s seed groups), or,
for runs trained alone by ``latentlens sweep``, its own from ``RUNS/SECTION/sweep.json``.

    python benchmarks/reproduction/zoo_add.py RUNS fuzzy-logic-a1 --machine "..." --commit SHA \
        --command "python benchmarks/gpu/gpu_sections.py ..." --date 2026-11-25
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.zoo.build import add  # noqa: E402
from reproduction.fuzzy_logic_section import PAPER_TABLE_A1  # noqa: E402

# The published figure each section's entries are set beside.
PAPERS = {
    "fuzzy-logic-a1": lambda variant: {
        "source": "HYLA paper, Table A1 (fuzzy logic, T = 32, frac_test 0.7; mean of 3 seeds)",
        "test_r2": PAPER_TABLE_A1[variant],
    },
}
RUN_NAME = re.compile(r"^(?P<variant>[a-z0-9_]+)-s(?P<seed>\d+)$")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("section", choices=sorted(PAPERS))
    parser.add_argument("--machine", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--variants", nargs="+", help="add these variants' runs only")
    args = parser.parse_args(argv)
    wall_time = wall_times(args.runs, args.section)
    for run in sorted((args.runs / args.section).iterdir()):
        match = RUN_NAME.match(run.name)
        if not match or not (run / "config.json").is_file():
            continue
        variant, seed = match["variant"], match["seed"]
        if args.variants and variant not in args.variants:
            continue
        seconds, note = wall_time(run.name)
        training = {
            "command": args.command,
            "machine": args.machine,
            "commit": args.commit,
            "date": args.date,
            "wall_seconds": seconds,
            "wall_note": note,
        }
        paper = PAPERS[args.section](variant)
        folder = add(run, f"{args.section}/{variant}/s{seed}", training, args.examples, paper)
        print(f"added {folder}")
    return 0


def wall_times(runs: Path, section: str) -> Callable[[str], tuple[float, str]]:
    """``run name -> (seconds, what they are)``, from the section's seed-group timings or
    its sweep's record; an error naming both files when neither is there."""
    groups, sweep = runs / "timings.json", runs / section / "sweep.json"
    if groups.is_file():
        timings = json.loads(groups.read_text())
        share = "this run's share of its seed group's wall time"
        return lambda name: (timings[f"{section}/{name}"], share)
    if sweep.is_file():
        cells = json.loads(sweep.read_text())["cells"]
        own = "this run's own training time (latentlens sweep's record)"
        return lambda name: (cells[name]["seconds"], own)
    raise SystemExit(f"error: neither {groups} nor {sweep} exists: no wall time for the runs")


if __name__ == "__main__":
    sys.exit(main())

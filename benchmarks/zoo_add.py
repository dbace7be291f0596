"""Add a finished seed-grouped experiment of ``reproduce.py`` to the model zoo: every run
``RUNS/SECTION/<variant>-s<seed>`` becomes the zoo entry ``SECTION/<variant>/s<seed>``, its
card holding the command, machine, commit and wall time given here and the run's share of
its group's wall time from ``RUNS/timings.json``.

    python benchmarks/zoo_add.py RUNS fuzzy-logic-a1 --machine "..." --commit SHA \
        --command "python benchmarks/gpu_sections.py ..." --date 2026-11-25
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reproduction.fuzzy_logic_section import PAPER_TABLE_A1  # noqa: E402

from latentlens.zoo.build import add  # noqa: E402

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
    args = parser.parse_args(argv)
    timings = json.loads((args.runs / "timings.json").read_text())
    for run in sorted((args.runs / args.section).iterdir()):
        match = RUN_NAME.match(run.name)
        if not match or not (run / "config.json").is_file():
            continue
        variant, seed = match["variant"], match["seed"]
        training = {
            "command": args.command,
            "machine": args.machine,
            "commit": args.commit,
            "date": args.date,
            "wall_seconds": timings[f"{args.section}/{run.name}"],
            "wall_note": "this run's share of its seed group's wall time",
        }
        paper = PAPERS[args.section](variant)
        folder = add(run, f"{args.section}/{variant}/s{seed}", training, args.examples, paper)
        print(f"added {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

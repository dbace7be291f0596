"""`latentlens train` when CPU-busy neighbours arrive after it starts, and later leave.

    python benchmarks/speed/neighbours_arrive.py [--task fuzzy-logic] [--attention softmax]
        [--neighbours 2] [--alone 20] [--busy 90] [--after 40] [--rounds 2] [--out FILE.json]

The command a user types (``latentlens train --task T --attention V --device cpu``, its
defaults: the path it chooses, its thread counts), in two ways a round, in turns:

- ``follows``: as it runs by default; a run whose step computes the same numbers on
  several thread counts follows the load within them while it runs
  (:mod:`latentlens.training.load_following`);
- ``kept``: with ``--threads`` the machine's CPUs, so the count is recorded and kept
  whatever the load, as every run did from its start before it followed the load.

Once a run has trained for a while (``--alone`` seconds after its first 200 steps),
``--neighbours`` processes spinning one CPU each start beside it for ``--busy`` seconds,
then stop, and it runs ``--after`` seconds more before it is stopped. The run's progress
line (tqdm's, on stderr, with the thread count where it follows) is read as it is written,
and each phase's steps/s is the steps between its first and last line over the time between
them. A first command fills the caches (calibration, inductor) as a user's first run
would. Prints each round's rates and thread counts, and each phase's ratio
``follows / kept`` as median [min–max] over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.threads import available_cpus  # noqa: E402
from speed.command_side_by_side import Limit, command, prime, processor  # noqa: E402

NEIGHBOUR = "while True:\n    pass\n"
MODES = ("follows", "kept")
PHASES = ("alone", "busy", "after")
PROGRESS = re.compile(rb"\|\s*(\d+)/\d+ \[")
THREADS = re.compile(rb"threads=(\d+)")
STARTED_AT = 200  # steps: compiled, calibrated and training
BUDGET_SLACK = 600.0  # seconds of --time-budget beyond the phases: the run is stopped first


@dataclass(frozen=True)
class Phase:
    """One phase of a run: its steps/s and the thread counts its progress lines showed
    (empty where the run keeps its count and shows none)."""

    name: str
    seconds: float
    steps: int
    threads: tuple[int, ...]

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")


class ProgressReader:
    """Reads a command's progress lines from its stderr on a thread of its own: (seconds
    since ``began``, steps, threads shown or None) per line."""

    def __init__(self, stream, began: float) -> None:
        self.lines: list[tuple[float, int, int | None]] = []
        self.stream, self.began = stream, began
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        pending = b""
        while chunk := self.stream.read1(4096):
            pending += chunk
            *done, pending = re.split(rb"[\r\n]", pending)
            for line in done:
                found = PROGRESS.search(line)
                if found:
                    shown = THREADS.search(line)
                    self.lines.append((time.perf_counter() - self.began, int(found.group(1)),
                                       int(shown.group(1)) if shown else None))  # fmt: skip

    def steps(self) -> int:
        return self.lines[-1][1] if self.lines else 0

    def phase(self, name: str, start: float, end: float) -> Phase:
        """The lines from ``start`` to ``end`` seconds as a :class:`Phase`."""
        inside = [line for line in self.lines if start <= line[0] <= end]
        if len(inside) < 2:
            raise SystemExit(f"error: no progress in the {name} phase: the run was too slow")
        (t0, s0, _), (t1, s1, _) = inside[0], inside[-1]
        shown = tuple(sorted({n for _, _, n in inside if n is not None}))
        return Phase(name, t1 - t0, s1 - s0, shown)


def timed_run(args: list[str], neighbours: int, alone: float, busy: float, after: float
              ) -> list[Phase]:  # fmt: skip
    """Run ``args``, bring ``neighbours`` spinning processes beside it for ``busy`` seconds
    once it has trained ``alone`` seconds, stop it ``after`` seconds after they leave;
    returns its three phases."""
    pinned = ("LATENTLENS_THREADS", "OMP_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in pinned}
    began = time.perf_counter()
    process = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    reader = ProgressReader(process.stderr, began)
    spinning: list[subprocess.Popen] = []
    try:
        while reader.steps() < STARTED_AT:
            if process.poll() is not None:
                raise SystemExit(f"error: {' '.join(args)} ended before training")
            time.sleep(0.05)
        marks = [time.perf_counter() - began]
        time.sleep(alone)
        marks.append(time.perf_counter() - began)
        spinning = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) for _ in range(neighbours)]
        time.sleep(busy)
        for neighbour in spinning:
            neighbour.kill()
            neighbour.wait()
        marks.append(time.perf_counter() - began)
        time.sleep(after)
        marks.append(time.perf_counter() - began)
    finally:
        for neighbour in spinning:
            neighbour.kill()
        process.terminate()
        process.wait()
    return [reader.phase(name, marks[i], marks[i + 1]) for i, name in enumerate(PHASES)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fuzzy-logic", choices=("fuzzy-logic", "sraven"))
    parser.add_argument("--attention", default="softmax", choices=("softmax", "linear", "hyla"))
    parser.add_argument("--neighbours", type=int, default=2)
    parser.add_argument("--alone", type=float, default=20.0)
    parser.add_argument("--busy", type=float, default=90.0)
    parser.add_argument("--after", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    cpus = available_cpus()
    print(f"{processor()}, {cpus} CPUs; {args.task} {args.attention}; {args.neighbours} "
          f"neighbours for {args.busy:g} s after {args.alone:g} s alone, then "
          f"{args.after:g} s", flush=True)  # fmt: skip
    budget = Limit(seconds=args.alone + args.busy + args.after + BUDGET_SLACK)
    rounds: list[dict[str, list[Phase]]] = []
    with tempfile.TemporaryDirectory() as folder:
        prime(args.task, args.attention, 1, Path(folder))
        for index in range(args.rounds):
            found = {}
            for mode in MODES:
                run_dir = Path(folder) / f"r{index}-{mode}"
                threads = cpus if mode == "kept" else None
                line = command(args.task, args.attention, 0, run_dir, budget, Path(folder), threads)
                line.remove("--quiet")  # the progress line is what is read
                found[mode] = timed_run(line, args.neighbours, args.alone, args.busy, args.after)
                shown = ", ".join(
                    f"{p.name} {p.rate:.1f} steps/s"
                    + (f" (threads {'/'.join(map(str, p.threads))})" if p.threads else "")
                    for p in found[mode]
                )
                print(f"round {index + 1}, {mode}: {shown}", flush=True)
            rounds.append(found)
    print("follows / kept, median [min-max] over the rounds:")
    for i, name in enumerate(PHASES):
        ratios = [r["follows"][i].rate / r["kept"][i].rate for r in rounds]
        print(f"  {name}: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        rows = [{mode: [asdict(p) | {"rate": p.rate} for p in phases] for mode, phases in r.items()}
                for r in rounds]  # fmt: skip
        args.out.write_text(json.dumps({"cpus": cpus, "args": vars(args) | {"out": str(args.out)},
                                        "rounds": rows}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

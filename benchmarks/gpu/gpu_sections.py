"""Several seed groups on one GPU at once: every seed group of the named ``reproduce.py``
sections trains in its own process (with CUDA MPS running, their small kernels overlap), all
stopping checkpointed by one deadline; then ``reproduce.py`` writes each section whose runs
finished. This is how the H100 lease of 2026-11-25 trained fuzzy-logic-a1 (3 groups) beside
sraven-main (3 groups): benchmarks/results/h100_2026-11-25/.

    python benchmarks/gpu/gpu_sections.py --out DIR --time-budget SECONDS SECTION [SECTION ...]

Sections run one after another (each section's groups at once); the same command continues
unfinished runs. ``reproduce.py --jobs N`` does the same through Ray, which a bare GPU image
may lack.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reproduction import reproduce  # noqa: E402
from reproduction.runs import (  # noqa: E402
    TIMINGS,
    TRAINED_ON,
    UNFINISHED,
    Runtime,
    code_commit,
    finished,
    has_work,
    in_order,
    train_unit,
    units_of,
)


def record_timings(out: Path, units, results) -> None:
    """Add each run's seconds to ``out/timings.json`` under a lock (another section's process
    may write it at the same time); an unfinished run's slices add up as ``(partial)``."""
    with open(out / ".timings.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = out / TIMINGS
        timings = json.loads(path.read_text()) if path.is_file() else {}
        for unit, fates in zip(units, results, strict=True):
            for spec, (fate, seconds) in zip(unit, fates, strict=True):
                name = str(spec.path.relative_to(out))
                print(f"  {name}: {fate}" + ("" if seconds is None else f", {seconds:.0f} s"))
                if seconds is not None:
                    total = round(timings.pop(f"{name} (partial)", 0.0) + seconds, 1)
                    timings[f"{name} (partial)" if fate == UNFINISHED else name] = total
        path.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")


def trained_on(device: str) -> str:
    """The device, torch and date this invocation trains with, for the section's report."""
    import datetime

    import torch

    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    day = datetime.date.today().isoformat()
    return (
        f"{name}, torch {torch.__version__}, {day}, by benchmarks/gpu/gpu_sections.py. "
        f"Code: commit {code_commit()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modules = {**reproduce.EXPERIMENTS, **reproduce.SECTIONS}
    parser.add_argument("sections", nargs="+", choices=list(modules))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time-budget", type=float, required=True, metavar="SECONDS")
    parser.add_argument("--size", default="gpu", choices=["cpu", "gpu", "tiny"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per process")
    args = parser.parse_args(argv)
    deadline = time.time() + args.time_budget
    status = 0
    for name in args.sections:
        specs = modules[name].plan(args.size, args.seeds, args.out / name)
        units = units_of(specs)
        left = deadline - time.time()
        print(f"{name}: {len(units)} groups at once, {left:.0f} s left", flush=True)
        runtime = Runtime(args.device, args.threads, deadline)
        (args.out / name).mkdir(parents=True, exist_ok=True)
        (args.out / name / TRAINED_ON).write_text(trained_on(args.device) + "\n")
        # units with nothing to do (finished, or too little time left) are decided here
        busy = [unit for unit in units if has_work(unit, runtime)]
        done = iter(())
        if busy:
            with multiprocessing.get_context("spawn").Pool(len(busy)) as pool:
                done = iter(pool.starmap(train_unit, [(unit, runtime) for unit in busy]))
        results = list(in_order(units, busy, done, runtime))
        record_timings(args.out, units, results)
        if not all(finished(spec) for spec in specs):
            print(f"{name}: unfinished; the same command continues it", flush=True)
            status = 3
            continue
        results_file = args.out / f"results-{name}" / "RESULTS.md"
        reproduce.main(
            ["--size", args.size, "--seeds", str(args.seeds), "--device", args.device,
             "--only", name, "--out", str(args.out), "--results", str(results_file)]
        )  # fmt: skip
    return status


if __name__ == "__main__":
    sys.exit(main())

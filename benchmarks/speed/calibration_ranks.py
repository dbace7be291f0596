"""Which path the command's calibration ranks first, trial after trial, in fresh processes.

    python benchmarks/speed/calibration_ranks.py [--task fuzzy-logic] [--attention linear]
        [--threads 1] [--at-once 2] [--trials 5] [--out FILE.json]

A run's first start on a machine times its paths (``latentlens.training.fast_path``) and
caches what it found for every later run of that shape, so one unlucky calibration is the
path of all of them. Each trial here starts ``--at-once`` fresh processes together (two
one-thread processes are what one run per core starts on 2 cores), each times the paths
that can run here with the command's own calibration on ``--threads`` threads, the
throwaway trainers the command builds, and nothing read from or written to the cache. It
prints each calibration's steps/s per path and the path it ranks first, then how many
calibrations ranked each path first.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path


def calibrate_once(task: str, attention: str, threads: int) -> dict[str, float]:
    """In this process: the command's calibration of ``task``'s reference model."""
    import torch

    from latentlens.training import TrainConfig, Trainer, model_for_task
    from latentlens.training.fast_path import calibrate
    from latentlens.training.trainer import path_timing

    torch.set_num_threads(threads)
    config = Trainer.resolve_config(
        task, model_for_task(task, attention=attention), TrainConfig.for_task(task)
    )
    _, paths, make_step, sync = path_timing(config, "cpu")
    return calibrate(paths, make_step, sync).rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="linear")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--at-once", type=int, default=2, help="processes calibrating together")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write every calibration's rates here as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(calibrate_once(args.task, args.attention, args.threads)))
        return 0
    worker = [sys.executable, __file__, "--worker", "--task", args.task,
              "--attention", args.attention, "--threads", str(args.threads)]  # fmt: skip
    found: list[dict[str, float]] = []
    for trial in range(args.trials):
        processes = [subprocess.Popen(worker, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for _ in range(args.at_once)]  # fmt: skip
        for process in processes:
            out, err = process.communicate()
            if process.returncode:
                raise SystemExit(f"error: a calibrating process failed:\n{err[-2000:]}")
            rates = json.loads(out.strip().splitlines()[-1])
            found.append(rates)
            shown = ", ".join(f"{path} {rate:.1f}" for path, rate in rates.items())
            print(f"trial {trial}: {shown} steps/s; first: {max(rates, key=rates.get)}", flush=True)
    firsts = collections.Counter(max(rates, key=rates.get) for rates in found)
    print(f"{args.task} {args.attention}, {args.threads} thread(s), {args.at_once} at once: "
          + ", ".join(f"{path} first in {count} of {len(found)}"
                      for path, count in firsts.most_common()))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"task": args.task, "attention": args.attention,
                                        "threads": args.threads, "at_once": args.at_once,
                                        "rates": found}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

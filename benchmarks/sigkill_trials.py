"""Kill `latentlens train` with SIGKILL at random moments, resume it, and check the result
is bit for bit the uninterrupted run's: metrics.jsonl and every tensor of the final
checkpoint.

    python benchmarks/sigkill_trials.py [--trials 30] [--seed 0] [--out runs/sigkill]

Each trial starts the same small run, kills it after a random delay drawn from the
uninterrupted run's wall time (so kills land in start-up, training, evaluation and
checkpoint writes alike), then continues it the way a user would: ``--resume`` when the
run directory holds a config, the original command when the kill came before it did.
Prints one line per trial and ``N trials, K bit-exact``; exits 1 unless K == N.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from latentlens.training import list_checkpoints

FLAGS = ["--task", "fuzzy-logic", "--attention", "hyla", "--steps", "120", "--eval-every",
         "20", "--quiet", "--device", "cpu", "--d-model", "32", "--n-heads", "4", "--qk-dim",
         "8", "--v-dim", "8", "--d-mlp", "64", "--batch-size", "32", "--eval-examples", "64",
         "--warmup-steps", "5"]  # fmt: skip


def command(*args: str) -> list[str]:
    exe = shutil.which("latentlens")
    return [*([exe] if exe else [sys.executable, "-m", "latentlens.cli"]), *args]


def train(run: Path) -> subprocess.Popen:
    args = command("train", *FLAGS, "--run-dir", str(run))
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finish(run: Path) -> None:
    """Continue a killed run as a user would, until it completes."""
    if (run / "config.json").is_file():
        args = ["train", "--resume", str(run), "--quiet"]
    else:
        args = ["train", *FLAGS, "--run-dir", str(run)]
    done = subprocess.run(command(*args), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"continuing {run} failed: {done.stderr.strip()}")


def same(run: Path, reference: Path) -> bool:
    if (run / "metrics.jsonl").read_text() != (reference / "metrics.jsonl").read_text():
        return False
    ours = load_file(str(list_checkpoints(run / "checkpoints")[-1][1]))
    theirs = load_file(str(list_checkpoints(reference / "checkpoints")[-1][1]))
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/sigkill"))
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    shutil.rmtree(args.out, ignore_errors=True)
    reference = args.out / "reference"
    start = time.perf_counter()
    if train(reference).wait() != 0:
        raise SystemExit("the uninterrupted reference run failed")
    wall = time.perf_counter() - start
    rng = random.Random(args.seed)
    exact = 0
    for trial in range(args.trials):
        run = args.out / f"trial-{trial:03d}"
        victim = train(run)
        delay = rng.uniform(0.0, wall)
        time.sleep(delay)
        victim.send_signal(signal.SIGKILL)
        killed = victim.wait() == -signal.SIGKILL
        found = list_checkpoints(run / "checkpoints")
        at = f"step {found[-1][0]}" if found else "no checkpoint"
        finish(run)
        ok = same(run, reference)
        exact += ok
        state = f"killed after {delay:.1f} s ({at})" if killed else "finished before the kill"
        print(f"trial {trial}: {state}: {'bit-exact' if ok else 'DIFFERS'}", flush=True)
    print(f"{args.trials} trials, {exact} bit-exact")
    return 0 if exact == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())

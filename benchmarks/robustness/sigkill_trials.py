"""Kill `latentlens train` with SIGKILL at random moments, resume it, and check the result
is bit for bit the uninterrupted run's: metrics.jsonl, the official tracker's
tracking/logic_latents.jsonl and every tensor of the final checkpoint.

    python benchmarks/robustness/sigkill_trials.py [--trials 30] [--seed 0] [--out runs/sigkill]
                                        [--seeds 2 [--between-writes [--every-save]]]

Each trial starts the same small run, kills it after a random delay drawn from the
uninterrupted run's wall time (so kills land in start-up, training, evaluation and
checkpoint writes alike), then continues it the way a user would: ``--resume`` when the
run directory holds a config, the original command when the kill came before it did.
Prints one line per trial and ``N trials, K bit-exact``; exits 1 unless K == N.

``--seeds N`` does the same to a seed group (``train --seeds 0 .. N-1``, one run
directory per seed, resumed with ``train --resume`` of them all), every seed's run
compared with the uninterrupted group's. ``--between-writes`` aims each kill at the moment
a group writes its seeds' checkpoints one after another: it watches the run directories
and kills as soon as the first seed holds a checkpoint the last does not yet (each trial
line says whether the kill caught them apart, the state a group resume must rewind), at
a save drawn from every save the run makes, the first among them; ``--every-save`` aims
trial ``i`` at the ``i``-th save instead (as many trials as saves but the last).
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
         "--tracking-examples", "256", "--warmup-steps", "5"]  # fmt: skip
# The tracker's small sample keeps the kills spread over the run: at the official 16,000 its
# evaluations took most of the wall time, and so most of the kills.
RECORDS = ("metrics.jsonl", "tracking/logic_latents.jsonl")


def command(*args: str) -> list[str]:
    exe = shutil.which("latentlens")
    return [*([exe] if exe else [sys.executable, "-m", "latentlens.cli"]), *args]


def runs_of(run: Path, seeds: int) -> list[Path]:
    """The run directories of ``run``: itself, or one per seed of a group."""
    return [run] if seeds == 0 else [run.with_name(f"{run.name}-s{s}") for s in range(seeds)]


def train(run: Path, seeds: int) -> subprocess.Popen:
    group = ["--seeds", *map(str, range(seeds))] if seeds else []
    args = command("train", *FLAGS, *group, "--run-dir", str(run))
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finish(run: Path, seeds: int) -> None:
    """Continue a killed run (or group) as a user would, until it completes."""
    runs = runs_of(run, seeds)
    if all((r / "config.json").is_file() for r in runs):
        args = ["train", "--resume", *map(str, runs), "--quiet"]
    else:  # killed before its configs were written: the first command again
        for r in runs:
            shutil.rmtree(r, ignore_errors=True)
        group = ["--seeds", *map(str, range(seeds))] if seeds else []
        args = ["train", *FLAGS, *group, "--run-dir", str(run)]
    done = subprocess.run(command(*args), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"continuing {run} failed: {done.stderr.strip()}")


def same(run: Path, reference: Path) -> bool:
    if any((run / name).read_text() != (reference / name).read_text() for name in RECORDS):
        return False
    ours = load_file(str(list_checkpoints(run / "checkpoints")[-1][1]))
    theirs = load_file(str(list_checkpoints(reference / "checkpoints")[-1][1]))
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def newest(run: Path) -> int:
    found = list_checkpoints(run / "checkpoints") if (run / "checkpoints").is_dir() else []
    return found[-1][0] if found else -1


def kill_between_writes(victim: subprocess.Popen, runs: list[Path], after: int) -> None:
    """SIGKILL ``victim`` once the first seed holds a checkpoint newer than step ``after``
    that the last seed does not (or when it ends)."""
    while victim.poll() is None:
        first = newest(runs[0])
        if first > after and newest(runs[-1]) < first:
            break
        time.sleep(0.0005)
    victim.send_signal(signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/sigkill"))
    parser.add_argument("--seeds", type=int, default=0, help="train a group of this many seeds")
    parser.add_argument("--between-writes", action="store_true",
                        help="kill while a group writes its seeds' checkpoints")  # fmt: skip
    parser.add_argument(
        "--every-save",
        action="store_true",
        help="with --between-writes: trial i kills at the i-th save",
    )
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    if args.seeds == 1 or args.seeds < 0 or (args.between_writes and args.seeds < 2):
        parser.error("--seeds takes 2 or more (a group); --between-writes needs one")
    if args.every_save and not args.between_writes:
        parser.error("--every-save aims the kills of --between-writes: give both")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    reference = args.out / "reference"
    start = time.perf_counter()
    if train(reference, args.seeds).wait() != 0:
        raise SystemExit("the uninterrupted reference run failed")
    wall = time.perf_counter() - start
    # the saves a kill can fall between: after step s, before the next (-1: the first save)
    every, total = (
        int(FLAGS[FLAGS.index("--eval-every") + 1]),
        int(FLAGS[FLAGS.index("--steps") + 1]),
    )
    boundaries = [-1, *range(every, total, every)]
    if args.every_save:
        args.trials = len(boundaries)
    rng = random.Random(args.seed)
    exact = 0
    for trial in range(args.trials):
        run = args.out / f"trial-{trial:03d}"
        runs = runs_of(run, args.seeds)
        victim = train(run, args.seeds)
        start = time.perf_counter()
        if args.between_writes:
            after = boundaries[trial] if args.every_save else rng.choice(boundaries)
            kill_between_writes(victim, runs, after=after)
        else:
            time.sleep(rng.uniform(0.0, wall))
            victim.send_signal(signal.SIGKILL)
        delay = time.perf_counter() - start
        killed = victim.wait() == -signal.SIGKILL
        at = ", ".join(f"step {step}" if step >= 0 else "no checkpoint"
                       for step in map(newest, runs))  # fmt: skip
        finish(run, args.seeds)
        ok = all(same(r, ref) for r, ref in zip(runs, runs_of(reference, args.seeds), strict=True))
        exact += ok
        state = f"killed after {delay:.1f} s ({at})" if killed else "finished before the kill"
        print(f"trial {trial}: {state}: {'bit-exact' if ok else 'DIFFERS'}", flush=True)
    print(f"{args.trials} trials, {exact} bit-exact")
    return 0 if exact == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())

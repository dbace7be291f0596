"""SRAVEN at Table A1's setting in one GPU lease (15 device-minutes, at most 10 a command):
softmax, linear and HYLA x 3 seeds, compiled and captured in CUDA graphs, then the latent-code
probes on the device (Fig. 5F's rule decoding ID -> OOD with 20 label permutations, k-means
ARI, topographic similarity, rule swaps), and the CUDA tests beside the probes.

Two commands, back to back on one warm machine (it keeps /tmp between calls made within its
idle window: the rates and the compile cache carry over):

    python benchmarks/gpu/gpu_sraven_lease.py measure OUT [--rate-seconds 55] [--side-by-side 110]
    python benchmarks/gpu/gpu_sraven_lease.py train OUT --budget SECONDS

``measure`` times the two ways of training the 9 runs at once under CUDA MPS: 3 processes
of 3-seed vmapped groups, and 9 single-seed processes, each for ``--rate-seconds`` on the
paper's schedule (its steps/s read off the evaluations' times, compile excluded), writes the
rates to /tmp/latentlens-lease/rates.json, then runs benchmarks/gpu/gpu_side_by_side.py (the
official JAX code beside latentlens, one process each) with that many seconds' deadline.
Compiling and capturing takes about 55 s a process (the H200 of 2026-11-27, where 9 singles
compiling at once had not stepped after 55 s): ``--rate-seconds 0`` skips the rates, and
``train`` then plans with that lease's.

``train`` trains the 9 runs the faster way for ``--budget`` seconds in all: the paper's
schedule (warm-up 1,000, cosine to lr/10) scaled to the steps that fit the budget at the
measured rate (the paper's 156,250 where they fit); a run stopped by the budget first is
checkpointed and probed where it stopped. Then the probes of every run (``latentlens probe
--examples 4096``) and the CUDA tests (tests/training/test_cuda.py, test_multiseed.py), at
once. OUT gets runs.tgz (each run's config.json, metrics.jsonl and probes/results.json),
seed 0's last checkpoint of each variant, the test output and the log.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LEASE = Path("/tmp/latentlens-lease")
VARIANTS = ("softmax", "linear", "hyla")
SEEDS = (0, 1, 2)
PAPER_STEPS = 156_250
# Table A1's SRAVEN: latentlens's reference preset (4 features of 8 values, 4 layers,
# D = 128, 16 heads, batch 128, lr 1e-3, warm-up 1,000, attention dropout 0.1)
COMMON = ["--task", "sraven", "--compile", "--cuda-graphs", "--quiet", "--keep-checkpoints", "1"]
PROBE_EXAMPLES = 4_096
# seconds the train command keeps for the probes, the tests and packing after training
AFTER_TRAINING = 150.0


LOGS = LEASE / "logs"  # each process's output (packed into runs.tgz: OUT takes 8 files)
# --smoke: the plumbing on a CPU, a tiny model, no fast path and no tests
SMOKE = ["--device", "cpu", "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--qk-dim",
         "8", "--v-dim", "8", "--d-mlp", "16", "--warmup-steps", "10"]  # fmt: skip


def log(message: str, out: Path) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    with open(out / "lease.log", "a") as handle:
        handle.write(line + "\n")


def train_command(run_dir: Path, variant: str, seeds: tuple[int, ...], steps: int,
                  eval_every: int, budget: float, smoke: bool) -> list[str]:  # fmt: skip
    seed_flags = ["--seeds", *map(str, seeds)] if len(seeds) > 1 else ["--seed", str(seeds[0])]
    common = [c for c in COMMON if c not in ("--compile", "--cuda-graphs")] + SMOKE if smoke else [
        *COMMON, "--device", "cuda"]  # fmt: skip
    return [sys.executable, "-m", "latentlens", "train", *common, "--attention", variant,
            "--steps", str(steps), "--eval-every", str(eval_every), "--eval-examples",
            str(PROBE_EXAMPLES), "--time-budget", str(int(budget)), "--run-dir", str(run_dir),
            *seed_flags]  # fmt: skip


def arrangement(kind: str, folder: Path) -> list[tuple[str, Path, tuple[int, ...]]]:
    """The processes of an arrangement: (variant, run dir, seeds); a group's runs are
    ``run_dir-s{seed}``, a single run's is ``run_dir`` itself."""
    if kind == "groups":
        return [(v, folder / v, SEEDS) for v in VARIANTS]
    return [(v, folder / f"{v}-s{s}", (s,)) for v in VARIANTS for s in SEEDS]


def run_dirs(kind: str, folder: Path) -> list[Path]:
    dirs = []
    for _, run_dir, seeds in arrangement(kind, folder):
        if len(seeds) > 1:
            dirs += [run_dir.with_name(f"{run_dir.name}-s{s}") for s in seeds]
        else:
            dirs.append(run_dir)
    return dirs


def last_step(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        return -1
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line]
    return max(steps, default=-1)


Samples = dict[str, list[tuple[float, int]]]  # run -> (seconds, newest evaluated step)


def start(command: list[str], output: Path) -> subprocess.Popen:
    """``command`` running from the repository root, its output to the file ``output``."""
    with open(output, "w") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)


def launch(
    kind: str, folder: Path, steps: int, eval_every: int, budget: float, smoke: bool
) -> tuple[list[subprocess.Popen], Samples]:
    """Start an arrangement's processes and record, once a second until they end, each
    run's newest evaluated step and the time it was first seen."""
    folder.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    processes = [
        start(
            train_command(run_dir, variant, seeds, steps, eval_every, budget, smoke),
            LOGS / f"{folder.name}-{run_dir.name}.log",
        )
        for variant, run_dir, seeds in arrangement(kind, folder)
    ]
    started = time.time()
    seen: Samples = {str(r): [] for r in run_dirs(kind, folder)}
    while any(p.poll() is None for p in processes):
        time.sleep(1.0)
        for run, samples in seen.items():
            step = last_step(Path(run))
            if step >= 0 and (not samples or step > samples[-1][1]):
                samples.append((time.time() - started, step))
    return processes, seen


def rate_of(samples: list[tuple[float, int]]) -> tuple[float, float] | None:
    """(steps/s after the first evaluation past step 0, seconds before stepping began)."""
    stepping = [(t, s) for t, s in samples if s > 0]
    if len(stepping) < 2:
        return None
    (t0, s0), (t1, s1) = stepping[0], stepping[-1]
    rate = (s1 - s0) / (t1 - t0)
    return rate, t0 - s0 / rate


def measure(args: argparse.Namespace) -> int:
    out = args.out
    result: dict[str, dict] = {}
    for kind in ("groups", "singles") if args.rate_seconds > 0 else ():
        folder = LEASE / f"rate-{kind}"
        log(f"rate of {kind}: {args.rate_seconds} s", out)
        processes, seen = launch(kind, folder, PAPER_STEPS, 500, args.rate_seconds, args.smoke)
        rates = {Path(run).name: rate_of(samples) for run, samples in seen.items()}
        measured = [r for r in rates.values() if r]
        if not measured:
            log(f"{kind}: no rate (exit codes {[p.returncode for p in processes]})", out)
            continue
        per_run = [r[0] for r in measured]
        result[kind] = {
            "per_run_steps_per_s": {k: v[0] for k, v in rates.items() if v},
            "start_s": max(r[1] for r in measured),
            "slowest_run_steps_per_s": min(per_run),
            # a group's runs step together: count each run's steps once
            "seed_steps_per_s": sum(per_run),
        }
        log(f"{kind}: {json.dumps(result[kind])}", out)
    LEASE.mkdir(parents=True, exist_ok=True)
    (LEASE / "rates.json").write_text(json.dumps(result, indent=1))
    (out / "rates.json").write_text(json.dumps(result, indent=1))
    if args.side_by_side > 0:
        log(f"side by side with the official code, deadline {args.side_by_side} s", out)
        start(
            [sys.executable, str(REPO / "benchmarks/gpu/gpu_side_by_side.py"), "--official",
             str(REPO / ".official"), "--tasks", "sraven-default", "fuzzy-logic",
             "--variants", "hyla", "softmax", "linear", "--deadline", str(args.side_by_side),
             "--out", str(out / "side_by_side.json")],
            out / "side_by_side.txt",
        ).wait()  # fmt: skip
        log((out / "side_by_side.txt").read_text(), out)
    return 0


def plan(budget: float) -> tuple[str, int, float]:
    """The faster arrangement, the steps that fit ``budget`` seconds of training at its
    slowest run's rate (in thousands, at most the paper's), and that rate."""
    path = LEASE / "rates.json"
    rates = json.loads(path.read_text()) if path.is_file() else {}
    if not rates:  # a fresh machine: HYLA's group beside the two others on the H200 of
        # 2026-11-27 (benchmarks/results/h200_2026-11-27b: 28,000 steps in ~355 s)
        rates = {"groups": {"slowest_run_steps_per_s": 79.0, "start_s": 60.0,
                            "seed_steps_per_s": 711.0}}  # fmt: skip
    kind = max(rates, key=lambda k: rates[k]["seed_steps_per_s"])
    chosen = rates[kind]
    # the compile cache is warm now: start-up takes at most what it took in the measure
    stepping = budget - chosen["start_s"] - 15.0
    steps = int(0.92 * stepping * chosen["slowest_run_steps_per_s"]) // 1000 * 1000
    return kind, max(2_000, min(PAPER_STEPS, steps)), chosen["slowest_run_steps_per_s"]


def pack(runs: list[Path], out: Path) -> None:
    with tarfile.open(out / "runs.tgz", "w:gz") as tar:
        tar.add(LOGS, arcname="logs")
        for run in runs:
            for name in ("config.json", "metrics.jsonl", "probes/results.json"):
                if (run / name).is_file():
                    tar.add(run / name, arcname=f"{run.name}/{name}")
    for run in runs:
        variant, seed = run.name.rsplit("-s", 1)
        checkpoints = sorted((run / "checkpoints").glob("*.safetensors"))
        if seed == "0" and checkpoints:
            (out / f"{variant}-s0-{checkpoints[-1].name}").write_bytes(checkpoints[-1].read_bytes())


def train(args: argparse.Namespace) -> int:
    out = args.out
    began = time.time()
    training = args.budget - AFTER_TRAINING
    kind, steps, rate = plan(training)
    eval_every = max(500, min(1000, steps // 40 // 500 * 500))
    log(f"training the 9 runs as {kind}: {steps} steps (paper {PAPER_STEPS}), eval every "
        f"{eval_every}, {training:.0f} s at {rate:.1f} steps/s per run", out)  # fmt: skip
    folder = LEASE / "sraven-a1"
    processes, seen = launch(kind, folder, steps, eval_every, training, args.smoke)
    log(f"training exit codes {[p.returncode for p in processes]}; last steps "
        f"{ {Path(r).name: s[-1][1] if s else None for r, s in seen.items()} }", out)  # fmt: skip
    runs = run_dirs(kind, folder)
    device = "cpu" if args.smoke else "cuda"
    examples = str(64 if args.smoke else PROBE_EXAMPLES)
    probes = [
        start([sys.executable, "-m", "latentlens", "probe", *map(str, runs[i::3]), "--examples",
               examples, "--device", device, "--quiet"], LOGS / f"probe-{i}.log")
        for i in range(3)
    ]  # fmt: skip
    # xdist hands each test's captured output to -rP: the drift tables of test_cuda.py
    tests = [] if args.smoke else [start(
        [sys.executable, "-m", "pytest", "-q", "-rP", "-o", "addopts=", "-p", "no:cacheprovider",
         "-n", "6", "--durations=8", "tests/training/test_cuda.py",
         "tests/training/test_multiseed.py"],
        out / "tests.txt",
    )]  # fmt: skip
    deadline = began + args.budget - 25
    for process in [*probes, *tests]:
        try:
            process.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            log(f"stopped at the deadline: {process.args[:5]}", out)
            process.kill()
    for i in range(3):
        log((LOGS / f"probe-{i}.log").read_text()[-3000:], out)
    pack(runs, out)
    if tests:
        log(f"tests: {(out / 'tests.txt').read_text().strip().splitlines()[-1]}", out)
    log(f"done in {time.time() - began:.0f} s", out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["measure", "train"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rate-seconds", type=float, default=55.0)
    parser.add_argument("--side-by-side", type=float, default=110.0, metavar="SECONDS")
    parser.add_argument("--budget", type=float, help="train: seconds for the whole command")
    parser.add_argument("--smoke", action="store_true", help="the plumbing on the CPU, tiny")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phase == "train":
        if args.budget is None or args.budget < AFTER_TRAINING + 60:
            parser.error(f"train needs --budget of at least {AFTER_TRAINING + 60:.0f} seconds")
        return train(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())

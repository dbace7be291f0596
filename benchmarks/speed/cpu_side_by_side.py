"""CPU training steps/s of latentlens beside the official JAX code, on the same machine, in
alternating rounds, with the arithmetic each reaches against the machine's measured peak.

    python benchmarks/speed/cpu_side_by_side.py --official PATH [--tasks fuzzy-logic sraven]
        [--variants softmax linear hyla] [--modes eager compile bf16 seeds]
        [--rounds 3] [--steps 40] [--threads 2] [--group 3] [--out FILE.json]

``PATH`` is a checkout of smonsays/hypernetwork-attention (the ``parity`` extra runs it).
For each task and variant the official code trains in its own process
(``parity_official.py --serve``, XLA given ``--threads`` threads) and latentlens in this
one (torch given as many); each round times ``--steps`` whole training steps of the
official code, then of each latentlens mode, so that a drift of a shared machine hits every
side of a round alike. The ratio is taken per round and reported as its median [min–max]
over rounds.

Tasks (both sides built from one spec, as ``parity.py`` builds them):
``fuzzy-logic`` the reference's default (T = 16, D = 128, 8 heads, 2 layers, batch 128);
``fuzzy-logic-a1`` Table A1's setting of it (T = 32, frac_test 0.7), whose 9 runs of 50,000
steps the last lines project from the measured rates; ``sraven`` ``parity.py``'s small SRAVEN
configuration (2 features of 5 values, T = 18, D = 64, 2 layers, batch 64);
``sraven-default`` the reference's (4 features of 8 values, T = 36, D = 128, 16 heads of 64,
4 layers, batch 128).

Modes of latentlens's step: ``eager`` (the default); ``compile`` (the training objective
compiled by inductor's C++ backend, ``train --compile``); ``fused`` (the fused CPU
kernels of ``latentlens.kernels``, ``train --fused``); ``fused-compile`` (both: the
compiled step calls the attention kernel); ``bf16`` (bfloat16 autocast,
``--precision bf16``, a precision choice); ``seeds`` (``--group`` seeds in one vmapped step,
``--seeds``, counted as seed-steps/s: the throughput of a seed sweep); ``cores``,
``cores-compile``, ``cores-fused`` and ``cores-fused-compile`` (``--threads`` runs at once,
each in its own process with one thread, in that mode: how a sweep uses the cores; their
seed-steps/s added up).

The peak is a large float32 and bfloat16 matmul timed here before and after (the better of
the two); a step's arithmetic is counted by ``step_flops.py``'s FlopCounterMode (forward and
backward of the objective; AdamW's element-wise update left out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))
from parity.parity import CONFIGS, VARIANTS, official_spec  # noqa: E402

from latentlens.training import (  # noqa: E402
    SeedGroup,
    TrainConfig,
    Trainer,
    model_for_task,
    seed_configs,
)
from latentlens.training.objective import TrainingObjective  # noqa: E402
from speed.step_flops import step_flops  # noqa: E402

MODES = ("eager", "compile", "fused", "fused-compile", "bf16", "seeds", "cores", "cores-compile",
         "cores-fused", "cores-fused-compile")  # fmt: skip
FLAGS = {"compile": ["--compile"], "fused": ["--fused"], "fused-compile": ["--fused", "--compile"]}
# Table A1's fuzzy-logic setting: its 9 runs (3 variants x 3 seeds) of 50,000 steps
A1 = {"seq_len": 32, "frac_test": 0.7}
A1_RUNS, A1_STEPS = 9, 50_000
# the reference's SRAVEN (latentlens's defaults: model_for_task("sraven"), TrainConfig)
SRAVEN_DEFAULT = {
    "data": {"num_features": 4, "num_values": 8, "frac_ood": 0.25, "permute_features": True},
    "model": {"n_layers": 4, "d_model": 128, "n_heads": 16, "qk_dim": 64, "v_dim": 64,
              "d_mlp": 256, "attention_dropout": 0.1},
    "batch_size": 128, "lr": 1e-3, "warmup_steps": 1000, "output_dim": 8,
}  # fmt: skip
TASKS = ("fuzzy-logic", "fuzzy-logic-a1", "sraven", "sraven-default")


def task_spec(task: str, variant: str) -> dict[str, Any]:
    """The run spec both sides are built from (``parity.official_spec``'s form)."""
    if task == "fuzzy-logic-a1":
        spec = official_spec("fuzzy-logic", CONFIGS["fuzzy-logic"], variant, seed=0)
        return {**spec, "data": {**spec["data"], **A1}}
    if task == "sraven-default":
        return {**official_spec("sraven", CONFIGS["sraven"], variant, seed=0), **SRAVEN_DEFAULT}
    return official_spec(task, CONFIGS[task], variant, seed=0)


def latentlens_config(spec: dict[str, Any], precision: str, threads: int) -> dict[str, Any]:
    """latentlens's resolved config of ``spec`` (as ``parity.run_latentlens`` builds it),
    computing with ``threads`` threads (a run's count is part of its config)."""
    task, data = spec["task"], {**spec["data"], "split_seed": spec["seed"]}
    train = TrainConfig.for_task(
        task,
        steps=spec["steps"],
        batch_size=spec["batch_size"],
        lr=spec["lr"],
        warmup_steps=spec["warmup_steps"],
        weight_decay=spec["weight_decay"],
        seed=spec["seed"],
        precision=precision,
        threads=threads,
    )
    model = model_for_task(task, data, attention=spec["variant"], **spec["model"])
    return Trainer.resolve_config(task, model, train, data)


def latentlens_steps(
    spec: dict[str, Any], modes: list[str], group: int, threads: int, folder: Path
) -> dict[str, Any]:
    """Each mode's timing function (steps -> seed-steps/s) of ``spec``."""
    # Every row compiles afresh: dynamo recompiles one code object at most 8 times per
    # process, then runs it eagerly, so a 9th row's ``compile`` would time the eager step.
    torch.compiler.reset()
    steps: dict[str, Any] = {}
    for mode in modes:
        if mode.startswith("cores"):
            steps[mode] = RunsPerCore(spec, threads, mode.removeprefix("cores-"), folder)
            continue
        config = latentlens_config(spec, "bf16" if mode == "bf16" else "fp32", threads)
        if mode == "seeds":
            trainers = [
                Trainer(None, seeded, device="cpu", quiet=True)
                for seeded in seed_configs(config, range(group))
            ]
            steps[mode] = StepTimer(SeedGroup(trainers).train_step, group)
        else:
            flags = FLAGS.get(mode, [])
            trainer = Trainer(None, config, device="cpu", quiet=True,
                              compile="--compile" in flags, fused="--fused" in flags)  # fmt: skip
            steps[mode] = StepTimer(trainer.train_step, 1)
    return steps


class StepTimer:
    """Seed-steps per second of a step function in this process (warmed up first). On a
    CUDA ``device`` the clock is read after the device has finished, once before and once
    after the timed steps (not after each: that would time a wait per step)."""

    def __init__(self, step: Callable[[], object], seeds: int,
                 device: torch.device | str = "cpu", warmup: int = 5):  # fmt: skip
        self.step, self.seeds, self.device = step, seeds, torch.device(device)
        for _ in range(warmup):  # compilation, graph capture, the allocator's first sizes
            step()
        self.synchronize()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, steps: int) -> float:
        self.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.synchronize()
        return steps * self.seeds / (time.perf_counter() - start)

    def close(self) -> None:
        pass


class Server:
    """A process that trains one run and times ``N`` steps for each line ``N`` it reads,
    printing steps/s (after ``ready``)."""

    def __init__(self, command: list[str], env: dict[str, str]):
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        if self.read() != "ready":
            raise SystemExit(f"error: {command[1]} did not start (see its error above)")

    def read(self) -> str:
        line = self.process.stdout.readline().strip()
        if not line:
            self.close()
            raise SystemExit("error: a timing process stopped (see its error above)")
        return line

    def ask(self, steps: int) -> None:
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()

    def __call__(self, steps: int) -> float:
        self.ask(steps)
        return float(self.read())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def official_server(official: Path, spec: dict[str, Any], threads: int, folder: Path,
                    device: str = "cpu") -> Server:  # fmt: skip
    """The official code training ``spec`` (``parity_official.py --serve``): on the CPU
    with XLA given ``threads`` threads; on ``cuda`` on the GPU, its memory not preallocated
    so that latentlens's side fits beside it."""
    path = folder / f"{spec['task']}-{spec['variant']}.spec.json"
    if device == "cuda":
        path.write_text(json.dumps({**spec, "steps": max(spec["steps"], 20_000)}))
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    else:
        path.write_text(json.dumps(spec))
        flags = f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
        env = {**os.environ, "XLA_FLAGS": flags + f"intra_op_parallelism_threads={threads}"}
    return Server(
        [sys.executable, str(BENCHMARKS / "parity" / "parity_official.py"),
         "--official", str(official), "--spec", str(path), "--serve"],
        env,
    )  # fmt: skip


class RunsPerCore:
    """``runs`` latentlens runs of ``spec`` (seeds 0..runs-1) at once, each in its own
    process with one thread; seed-steps/s added up over them."""

    def __init__(self, spec: dict[str, Any], runs: int, step: str, folder: Path):
        self.servers = []
        for seed in range(runs):
            path = folder / f"{spec['task']}-{spec['variant']}-s{seed}.spec.json"
            path.write_text(json.dumps({**spec, "seed": seed}))
            command = [sys.executable, __file__, "--serve", str(path)]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            self.servers.append(Server(command + FLAGS.get(step, []), env))

    def __call__(self, steps: int) -> float:
        for server in self.servers:
            server.ask(steps)
        return sum(float(server.read()) for server in self.servers)

    def close(self) -> None:
        for server in self.servers:
            server.close()


def serve(spec_path: Path, compile: bool, fused: bool) -> None:
    """One run of the spec, one thread, timing steps on request (see :class:`Server`)."""
    torch.set_num_threads(1)
    spec = json.loads(spec_path.read_text())
    trainer = Trainer(None, latentlens_config(spec, "fp32", 1), device="cpu", quiet=True,
                      compile=compile, fused=fused)  # fmt: skip
    timer = StepTimer(trainer.train_step, 1)
    print("ready", flush=True)
    for line in sys.stdin:
        print(timer(int(line)), flush=True)


def peak_gflops(dtype: torch.dtype, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` square matmuls in ``dtype``, at the largest size
    of 256, 512, 1024 and 2048 whose product takes under half a second (a CPU without
    native bfloat16 multiplies it ~100x slower than float32)."""
    best = 0.0
    for size in (256, 512, 1024, 2048):
        a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
        torch.mm(a, b)
        seconds = min(matmul_seconds(a, b) for _ in range(repeats))
        best = max(best, 2 * size**3 / seconds / 1e9)
        if seconds > 0.5:
            break
    return best


def serve_matmuls(size: int = 1024) -> None:
    """One thread timing float32 ``size``-square matmuls on request: for each line ``N``
    it reads, the GFLOP/s of ``N`` of them (see :class:`Server`)."""
    torch.set_num_threads(1)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    print("ready", flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        for _ in range(int(line)):
            torch.mm(a, b)
        print(int(line) * 2 * size**3 / (time.perf_counter() - start) / 1e9, flush=True)


def peak_per_core(cores: int, rounds: int = 3, matmuls: int = 40) -> tuple[float, float]:
    """The float32 matmul GFLOP/s of one thread alone, and of each of ``cores`` one-thread
    processes multiplying at once (the setting of the ``cores`` modes; cores that share
    a physical core, power or memory each get less): the best of ``rounds`` each."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    servers = [Server([sys.executable, __file__, "--serve-matmuls"], env) for _ in range(cores)]
    try:
        alone = max(servers[0](matmuls) for _ in range(rounds))
        together = 0.0
        for _ in range(rounds):
            for server in servers:
                server.ask(matmuls)
            together = max(together, sum(float(server.read()) for server in servers) / cores)
    finally:
        for server in servers:
            server.close()
    return alone, together


def matmul_seconds(a: torch.Tensor, b: torch.Tensor) -> float:
    start = time.perf_counter()
    torch.mm(a, b)
    return time.perf_counter() - start


def spread(values: list[float], digits: int = 1) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"[{min(values):.{digits}f}–{max(values):.{digits}f}]"
    )


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Every task's and variant's rates per round, official and latentlens's modes."""
    rows = []
    for task in args.tasks:
        for variant in args.variants:
            spec = task_spec(task, variant)
            config = latentlens_config(spec, "fp32", args.threads)
            plain = Trainer(None, config, device="cpu", quiet=True)
            # step_flops counts a batch of 128
            flops = step_flops(TrainingObjective(plain.model, plain.task), plain)
            flops *= spec["batch_size"] / 128
            sides = {"official": official_server(args.official, spec, args.threads, folder)}
            try:
                sides.update(latentlens_steps(spec, args.modes, args.group, args.threads, folder))
                rates: dict[str, list[float]] = {side: [] for side in sides}
                for _ in range(args.rounds):
                    for side, rate in sides.items():
                        rates[side].append(rate(args.steps))
            finally:
                for side in sides.values():
                    side.close()
            rows.append({"task": task, "variant": variant, "gflop": flops / 1e9, "rates": rates})
            print(row_line(rows[-1], args.modes), flush=True)
    return {"rows": rows}


def widths(mode: str) -> tuple[int, int]:
    """The widths of a mode's rate and ratio columns (its name and a space at least)."""
    return max(20, len(mode) + 2), max(24, len(mode) + 13)


def row_line(row: dict[str, Any], modes: list[str]) -> str:
    rates = row["rates"]
    cells = [f"{row['task']:<15}{row['variant']:<9}{spread(rates['official']):>20}"]
    for mode in modes:
        ratios = [
            ours / theirs for ours, theirs in zip(rates[mode], rates["official"], strict=True)
        ]
        rate, ratio = widths(mode)
        cells.append(f"{spread(rates[mode]):>{rate}}{spread(ratios, 2) + 'x':>{ratio}}")
    return "".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # a cores-mode run
    parser.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fused", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-matmuls", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tasks", nargs="+", default=["fuzzy-logic", "sraven-default"],
                        choices=TASKS)  # fmt: skip
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--modes", nargs="+", default=["eager"], choices=MODES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per side a round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group", type=int, default=3, help="seeds of the seeds mode")
    parser.add_argument("--out", type=Path, help="write every rate as JSON here")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.compile, args.fused)
        return 0
    if args.serve_matmuls:
        serve_matmuls()
        return 0
    if args.official is None or not (args.official / "hyla" / "experiment.py").is_file():
        parser.error(f"--official {args.official}: not a checkout of the official code")
    if min(args.rounds, args.steps, args.threads, args.group) < 1:
        parser.error("--rounds, --steps, --threads and --group must be at least 1")
    torch.set_num_threads(args.threads)
    peak = {"fp32": peak_gflops(torch.float32), "bf16": peak_gflops(torch.bfloat16)}
    print(
        f"CPU training steps/s, latentlens beside the official JAX code on this machine "
        f"({args.threads} threads each, torch {torch.__version__}, "
        f"{torch.backends.cpu.get_cpu_capability()}); {args.rounds} alternating rounds of "
        f"{args.steps} steps; median [min–max] over rounds, the ratio taken per round\n"
    )
    header = f"{'task':<15}{'variant':<9}{'official':>20}"
    for mode in args.modes:
        rate, ratio = widths(mode)
        header += f"{mode:>{rate}}{mode + ' / official':>{ratio}}"
    print(header, flush=True)  # rows follow as each task and variant is measured
    with tempfile.TemporaryDirectory() as folder:
        result = measure(args, Path(folder))
    peak = {k: max(v, peak_gflops(getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[k])))
            for k, v in peak.items()}  # fmt: skip
    result.update(peak_gflops=peak, threads=args.threads, torch=torch.__version__,
                  rounds=args.rounds, steps=args.steps, modes=args.modes)  # fmt: skip
    print(f"\npeak matmul here: float32 {peak['fp32']:.0f} GFLOP/s, bfloat16 "
          f"{peak['bf16']:.1f} GFLOP/s (square matmuls up to 2048, best of 5, before and "
          "after)")  # fmt: skip
    alone, together = peak_per_core(args.threads)
    result.update(peak_per_core={"alone": alone, "together": together})
    print(f"one-thread float32 matmul (1024): {alone:.0f} GFLOP/s alone, {together:.0f} "
          f"GFLOP/s on each of {args.threads} cores at once (best of 3)")  # fmt: skip
    print(f"{'task':<15}{'variant':<9}{'GFLOP/step':>11}  achieved GFLOP/s (share of fp32 peak)")
    for row in result["rows"]:
        cells = []
        for mode in args.modes:
            per_step = statistics.median(row["rates"][mode]) * row["gflop"]
            cells.append(f"{mode} {per_step:.0f} ({per_step / peak['fp32']:.0%})")
        print(f"{row['task']:<15}{row['variant']:<9}{row['gflop']:>11.2f}  " + ", ".join(cells))
    projection_lines(result["rows"], args.modes, args.threads * together)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


def projection_lines(rows: list[dict[str, Any]], modes: list[str], cores_gflops: float) -> None:
    """Table A1's 9 runs of 50,000 steps at the measured fuzzy-logic-a1 rates (each mode's
    median over rounds, and the range of the projections of single rounds: the machine
    drifts between them), and the arithmetic alone at ``cores_gflops`` (every core
    multiplying at once): no mode can beat that floor."""
    a1 = [row for row in rows if row["task"] == "fuzzy-logic-a1"]
    if len(a1) != len(VARIANTS):
        return
    print(f"\nTable A1's fuzzy-logic runs ({A1_RUNS} of {A1_STEPS:,} steps, 3 per variant), one "
          "after another at each mode's median rate (seeds: one group per variant), and "
          "at each round's rates:")  # fmt: skip
    for mode in ["official", *modes]:
        hours = a1_hours([statistics.median(row["rates"][mode]) for row in a1])
        by_round = zip(*(row["rates"][mode] for row in a1), strict=True)
        rounds = [a1_hours(list(rates)) for rates in by_round]
        print(f"  {mode:<9}{hours:6.2f} h  (rounds {min(rounds):.2f}-{max(rounds):.2f} h)")
    gflop = sum(A1_RUNS // len(a1) * A1_STEPS * row["gflop"] for row in a1)
    print(
        f"  the arithmetic alone at the matmul rate of every core at once "
        f"({cores_gflops:.0f} GFLOP/s): {gflop / cores_gflops / 3600:.2f} h"
    )


def a1_hours(rates: list[float]) -> float:
    """Hours of Table A1's runs, an equal share at each variant's seed-steps/s ``rates``."""
    return sum(A1_RUNS // len(rates) * A1_STEPS / rate for rate in rates) / 3600


if __name__ == "__main__":
    raise SystemExit(main())

"""`latentlens train` as a user runs it, beside the official JAX code, on this machine.

    python benchmarks/speed/command_side_by_side.py --official PATH
        [--tasks fuzzy-logic fuzzy-logic-a1 sraven] [--variants softmax linear hyla]
        [--modes single cores] [--rounds 2] [--budgets 20 60] [--official-steps 300]
        [--out FILE.json]

latentlens's side is the command a user types, at its defaults: ``latentlens train --task
TASK --attention V --device cpu --quiet`` (50,000 steps, its evaluations and tracked
metrics every 1,000 steps, checkpoints, the path it chooses and its thread count), stopped
by ``--time-budget``. Two runs per round, with the two ``--budgets``, give the rate
``(steps₂ − steps₁) / (wall₂ − wall₁)`` of whole processes: start-up, calibration and
compilation cancel, and evaluations and checkpoints stay in as a long run pays them. A
first run per task and variant fills the caches (the path's calibration, inductor's) as a
user's first run would. ``fuzzy-logic-a1`` is Table A1's setting (T = 32, frac_test 0.7),
given as a ``--config`` file; ``sraven`` the reference's default SRAVEN.

The official side is its jitted training step timed in its own process for
``--official-steps`` steps (``parity_official.py --serve``, XLA on the same threads), with
no evaluation: a rate the official command can only fall short of. In each round the
official code runs, then latentlens's command, then latentlens's step in this process
(``Trainer.train_step``, eager; the step benchmark's rate), so that the command's loop can
be read against its own step.

``single``: one run, every core. ``cores``: one run per core at once (``--threads 1``
each, as ``reproduce --jobs`` and sweeps run them; the official servers one XLA thread
each); their rates added up. Ratios are per round, reported as median [min–max].
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
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reproduction.fuzzy_logic_section import task_config  # noqa: E402

from latentlens.threads import available_cpus  # noqa: E402
from latentlens.training import Trainer  # noqa: E402
from speed.cpu_side_by_side import (  # noqa: E402
    StepTimer,
    latentlens_config,
    official_server,
    task_spec,
)

TASKS = {"fuzzy-logic": "fuzzy-logic", "fuzzy-logic-a1": "fuzzy-logic", "sraven": "sraven"}
OFFICIAL_SPEC = {"fuzzy-logic": "fuzzy-logic", "fuzzy-logic-a1": "fuzzy-logic-a1",
                 "sraven": "sraven-default"}  # fmt: skip
A1_CONFIG = {"task": {"seq_len": 32, **task_config(0.7)}}  # the zoo's split at 0.7
STOPPED = re.compile(r"stopped at step (\d+) of")


def command(task: str, variant: str, seed: int, run_dir: Path, budget: float,
            folder: Path, threads: int | None) -> list[str]:  # fmt: skip
    """The user's command for ``task`` and ``variant``, stopped after ``budget`` seconds."""
    args = [sys.executable, "-m", "latentlens"]
    if threads is not None:
        args += ["--threads", str(threads)]
    args += ["train", "--task", TASKS[task], "--attention", variant, "--device", "cpu",
             "--quiet", "--seed", str(seed), "--run-dir", str(run_dir),
             "--time-budget", str(budget)]  # fmt: skip
    if task == "fuzzy-logic-a1":
        config = folder / "a1.json"
        config.write_text(json.dumps(A1_CONFIG))
        args += ["--config", str(config)]
    return args


def steps_reached(run_dir: Path, stderr: str) -> int:
    """The step a budgeted run stopped at (its message), or its last if it finished."""
    found = STOPPED.search(stderr)
    if found:
        return int(found.group(1))
    config = json.loads((run_dir / "config.json").read_text())
    return int(config["train"]["steps"])


def timed_commands(commands: list[tuple[list[str], Path]]) -> list[tuple[int, float, str]]:
    """Run ``commands`` at once; each one's (steps reached, wall seconds, path taken: the one
    its config records)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LATENTLENS_THREADS", "OMP_NUM_THREADS")
    }
    began = time.perf_counter()
    running = [(subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 text=True, env=env), run_dir)
               for args, run_dir in commands]  # fmt: skip
    ended: dict[int, float] = {}
    while len(ended) < len(running):
        for index, (process, _) in enumerate(running):
            if index not in ended and process.poll() is not None:
                ended[index] = time.perf_counter() - began
        time.sleep(0.02)
    results = []
    for index, (process, run_dir) in enumerate(running):
        err = process.stderr.read()
        if process.returncode not in (0, 3):
            raise SystemExit(f"error: {' '.join(process.args)} failed:\n{err}")
        path = json.loads((run_dir / "config.json").read_text())["train"].get("path")
        results.append((steps_reached(run_dir, err), ended[index], path or "?"))
    return results


def command_rate(task: str, variant: str, runs: int, budgets: tuple[float, float],
                 folder: Path, tag: str) -> tuple[float, list[float], list[str]]:  # fmt: skip
    """Steps/s of ``runs`` commands at once (added up), by the two budgets' difference;
    also each run's rate and the path each longer command took."""
    threads = 1 if runs > 1 else None
    reached = []
    for budget in budgets:
        commands = []
        for seed in range(runs):
            run_dir = folder / f"{tag}-{task}-{variant}-b{budget:g}-s{seed}"
            commands.append((command(task, variant, seed, run_dir, budget, folder, threads),
                             run_dir))  # fmt: skip
        reached.append(timed_commands(commands))
    rates = [(s2 - s1) / (w2 - w1) for (s1, w1, _), (s2, w2, _) in zip(*reached, strict=True)]
    return sum(rates), rates, [path for _, _, path in reached[-1]]


def prime(task: str, variant: str, runs: int, folder: Path) -> None:
    """Run ``runs`` short commands at once, as the timed ones will run, so that both timed
    budgets find the calibration and inductor's code cached: a pair where one calibrates
    and the other does not measures start-up, not steps (one run per core, primed with a
    two-thread run's cache only, gave a negative rate)."""
    threads = 1 if runs > 1 else None
    commands = []
    for seed in range(runs):
        run_dir = folder / f"prime-{task}-{variant}-{runs}-s{seed}"
        commands.append((command(task, variant, seed, run_dir, 5, folder, threads), run_dir))
    timed_commands(commands)


def official_rate(official: Path, task: str, variant: str, runs: int, steps: int,
                  folder: Path) -> float:  # fmt: skip
    """Steps/s of ``runs`` official processes at once, added up (after compiling)."""
    threads = available_cpus() if runs == 1 else 1
    spec = task_spec(OFFICIAL_SPEC[task], variant)
    servers = []
    try:
        for seed in range(runs):
            servers.append(official_server(official, {**spec, "seed": seed}, threads, folder))
        for server in servers:
            server.ask(steps)
        return sum(float(server.read()) for server in servers)
    finally:
        for server in servers:
            server.close()


def step_rate(task: str, variant: str, steps: int) -> float:
    """The eager step benchmark's rate: ``Trainer.train_step`` in this process."""
    spec = task_spec(OFFICIAL_SPEC[task], variant)
    threads = available_cpus()
    torch.set_num_threads(threads)
    trainer = Trainer(None, latentlens_config(spec, "fp32", threads), device="cpu", quiet=True)
    return StepTimer(trainer.train_step, 1)(steps)


def spread(values: list[float], digits: int = 1) -> str:
    ordered = sorted(values)
    middle = statistics.median(ordered)
    return f"{middle:.{digits}f} [{ordered[0]:.{digits}f}–{ordered[-1]:.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=["softmax", "linear", "hyla"])
    parser.add_argument("--modes", nargs="+", default=["single", "cores"],
                        choices=["single", "cores"])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budgets", type=float, nargs=2, default=[20.0, 60.0])
    parser.add_argument("--official-steps", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (args.official / "hyla").is_dir():
        parser.error(
            f"--official {args.official}: not a checkout of smonsays/hypernetwork-attention"
        )
    cores = available_cpus()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for task in args.tasks:
            for variant in args.variants:
                for mode in args.modes:
                    runs = cores if mode == "cores" else 1
                    # the first commands a user runs fill the caches (calibration, inductor),
                    # for the thread count this mode's runs take
                    prime(task, variant, runs, folder)
                    row: dict[str, Any] = {"task": task, "variant": variant, "mode": mode,
                                           "runs": runs, "official": [], "command": [],
                                           "per_run": [], "step": [], "paths": []}  # fmt: skip
                    for round_ in range(args.rounds):
                        tag = f"{mode}-r{round_}"
                        row["official"].append(
                            official_rate(
                                args.official, task, variant, runs, args.official_steps, folder
                            )
                        )
                        total, per_run, paths = command_rate(
                            task, variant, runs, tuple(args.budgets), folder, tag
                        )
                        row["command"].append(total)
                        row["paths"].append(paths)
                        row["per_run"].append(per_run)
                        if mode == "single":
                            row["step"].append(step_rate(task, variant, args.official_steps))
                        print(f"{task} {variant} {mode} round {round_}: official "
                              f"{row['official'][-1]:.1f}, command {total:.1f} steps/s "
                              f"(path {', '.join(paths)})",
                              file=sys.stderr, flush=True)  # fmt: skip
                    rows.append(row)
                    if args.out:  # kept as it grows: a failure later loses nothing
                        args.out.write_text(json.dumps({"rows": rows}, indent=1))
    print(
        f"`latentlens train` beside the official JAX code on this machine ({cores} CPUs, "
        f"torch {torch.__version__}); {args.rounds} rounds, budgets {args.budgets[0]:g} and "
        f"{args.budgets[1]:g} s; steps/s, median [min–max] over rounds, ratios per round\n"
    )
    print(
        f"{'task':15}{'variant':9}{'mode':8}{'official':>20}{'command':>20}{'ratio':>22}"
        f"{'step (eager)':>20}{'command / step':>22}"
    )
    for row in rows:
        ratio = [c / o for c, o in zip(row["command"], row["official"], strict=True)]
        line = (
            f"{row['task']:15}{row['variant']:9}{row['mode']:8}{spread(row['official']):>20}"
            f"{spread(row['command']):>20}{spread(ratio, 2) + 'x':>22}"
        )
        if row["step"]:
            loop = [c / s for c, s in zip(row["command"], row["step"], strict=True)]
            line += f"{spread(row['step']):>20}{spread(loop, 2):>22}"
        print(line)
    if args.out:
        meta = {"cpus": cores, "torch": torch.__version__, "rounds": args.rounds,
                "budgets": args.budgets, "official_steps": args.official_steps}  # fmt: skip
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

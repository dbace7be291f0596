"""`latentlens train` as a user runs it, beside the official JAX code, on this machine.

    python benchmarks/speed/command_side_by_side.py --official PATH
        [--tasks fuzzy-logic fuzzy-logic-a1 sraven] [--variants softmax linear hyla]
        [--modes single cores] [--rounds 2] [--budgets A B] [--official-steps 300]
        [--device cuda [--lengths 20000 50000]] [--out FILE.json]

latentlens's side is the command a user types, at its defaults: ``latentlens train --task
TASK --attention V --device cpu --quiet`` (50,000 steps, its evaluations and tracked
metrics every 1,000 steps, checkpoints, the path it chooses and its thread count), stopped
by ``--time-budget``. Two runs per round, with the two ``--budgets`` (by default 20 and
60 s of training, 40 and 160 s for SRAVEN, so that the difference holds its evaluations:
``BUDGETS``), give the rate
``(steps₂ − steps₁) / (wall₂ − wall₁)`` of whole processes: start-up, calibration and
compilation cancel, and evaluations and checkpoints stay in as a long run pays them. A
first run per task and variant fills the caches (the path's calibration, inductor's) as a
user's first run would. They cancel only where the two runs start up alike: each run's
start-up (its wall time less the training seconds its last checkpoint records) and path are
kept, and a round whose two runs took different paths, or whose start-ups differ by more
than a tenth of the two runs' difference in training time, is timed again, once
(``START_UP_SLACK``); the JSON keeps every run's steps, wall and training seconds and path
(``pairs``), and how many rounds were timed again (``retimed``). ``fuzzy-logic-a1`` is
Table A1's setting (T = 32, frac_test 0.7), given as a ``--config`` file; ``sraven`` the
reference's default SRAVEN.

The official side is its jitted training step timed in its own process for
``--official-steps`` steps (``parity_official.py --serve``, XLA on the same threads), with
no evaluation: a rate the official command can only fall short of. In each round the
official code runs, then latentlens's command, then latentlens's step in this process
(``Trainer.train_step``, eager; the step benchmark's rate), so that the command's loop can
be read against its own step.

``single``: one run, every core. ``cores``: one run per core at once (``--threads 1``
each, as ``reproduce --jobs`` and sweeps run them; the official servers one XLA thread
each); their rates added up. Ratios are per round, reported as median [min–max].

``--device cuda`` times the same on a GPU: the command with ``--device cuda``, the
official code with JAX on the card (its memory not preallocated, so that both fit), the
eager step read after the device has finished; single runs only. There a default run's
50,000 steps take under a minute after a start-up of about as long (calibration,
compilation, graph capture), so budgets would cut runs before their first step or after
their last: the two runs of a round instead go to the end at ``--lengths`` steps (20,000
and 50,000 by default; both must be long enough that the run chooses its path as a default
one does: under ``CALIBRATE_FROM`` steps, 5,000, a run compiles nothing, and the script
refuses such lengths), the rate is their difference, and the longer run's steps over its
whole wall time, start-up included, are printed beside it as what a user's default command
gets.
``--lengths`` works on the CPU too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reproduction.fuzzy_logic_section import task_config  # noqa: E402

from latentlens.devices import cpu_model  # noqa: E402
from latentlens.threads import available_cpus  # noqa: E402
from latentlens.training import Trainer  # noqa: E402
from latentlens.training.fast_path import CALIBRATE_FROM  # noqa: E402
from latentlens.training.run_dir import RunDirectory  # noqa: E402
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
CUDA_LENGTHS = (20_000, 50_000)  # steps; see the module docstring
# Seconds of training of a round's two runs, per task: their difference holds an evaluation
# or more (every 1,000 steps), as a long run pays them; SRAVEN runs at 13-16 steps/s here
BUDGETS = {"fuzzy-logic": (20.0, 60.0), "fuzzy-logic-a1": (20.0, 60.0), "sraven": (40.0, 160.0)}
# A pair's start-ups may differ by this share of its training-time difference before
# the round is timed again: beyond it the difference of walls is not the steps' rate
START_UP_SLACK = 0.1


@dataclass(frozen=True)
class Limit:
    """Where a timed command stops: after ``seconds`` (``--time-budget``), or at the end of
    a run of ``steps`` steps."""

    seconds: float | None = None
    steps: int | None = None

    @property
    def tag(self) -> str:
        return f"b{self.seconds:g}" if self.steps is None else f"n{self.steps}"


def command(task: str, variant: str, seed: int, run_dir: Path, limit: Limit, folder: Path,
            threads: int | None, device: str = "cpu") -> list[str]:  # fmt: skip
    """The user's command for ``task`` and ``variant`` on ``device``, stopped after
    ``limit.seconds`` or run to ``limit.steps`` steps."""
    args = [sys.executable, "-m", "latentlens"]
    if threads is not None:
        args += ["--threads", str(threads)]
    args += ["train", "--task", TASKS[task], "--attention", variant, "--device", device,
             "--quiet", "--seed", str(seed), "--run-dir", str(run_dir)]  # fmt: skip
    args += (
        ["--time-budget", str(limit.seconds)]
        if limit.steps is None
        else ["--steps", str(limit.steps)]
    )
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


@dataclass(frozen=True)
class TimedRun:
    """One timed command: the step it reached, its process's wall seconds, the training
    seconds its last checkpoint records (None where it records none) and the path its
    config records."""

    steps: int
    wall: float
    training: float | None
    path: str

    @property
    def start_up(self) -> float | None:
        """Wall seconds outside training: imports, calibration, the model, the exit."""
        return None if self.training is None else self.wall - self.training


def timed_commands(commands: list[tuple[list[str], Path]]) -> list[TimedRun]:
    """Run ``commands`` at once; each one's :class:`TimedRun`."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LATENTLENS_THREADS", "OMP_NUM_THREADS")
    }
    # each command's stderr goes to a file, not a pipe: a pipe holds 64 KiB, and a command
    # that writes more (inductor prints the code it failed to compile) would block on it
    # while this loop waits for the command to end
    with contextlib.ExitStack() as files:
        logs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
        began = time.perf_counter()
        running = [subprocess.Popen(args, stderr=log, stdout=subprocess.DEVNULL, env=env)
                   for (args, _), log in zip(commands, logs, strict=True)]  # fmt: skip
        ended: dict[int, float] = {}
        while len(ended) < len(running):
            for index, process in enumerate(running):
                if index not in ended and process.poll() is not None:
                    ended[index] = time.perf_counter() - began
            time.sleep(0.02)
        errors = []
        for log in logs:
            log.seek(0)
            errors.append(log.read())
    results = []
    for index, (process, (_, run_dir)) in enumerate(zip(running, commands, strict=True)):
        err = errors[index]
        if process.returncode not in (0, 3):  # its stderr's end: the error, not the warnings
            raise SystemExit(f"error: {' '.join(process.args)} failed:\n{err[-4000:]}")
        path = json.loads((run_dir / "config.json").read_text())["train"].get("path")
        training = RunDirectory(run_dir).train_seconds()
        results.append(TimedRun(steps_reached(run_dir, err), ended[index], training, path or "?"))
    return results


@dataclass(frozen=True)
class CommandRate:
    """``runs`` commands' steps/s at once: ``total`` (added up) and each run's
    (``per_run``), from the difference of two timed runs; ``whole``: each longer run's
    steps over its whole wall time, start-up included; ``paths``: the path each took."""

    total: float
    per_run: list[float]
    whole: list[float]
    paths: list[str]
    pairs: list[tuple[TimedRun, TimedRun]]

    def unlike(self) -> list[str]:
        """Why the difference of walls is not the steps' rate, a line per pair where it is
        not: the two runs took different paths, or their start-ups differ by more than
        :data:`START_UP_SLACK` of their difference in training time."""
        found = []
        for short, long in self.pairs:
            if short.path != long.path:
                found.append(f"the runs took different paths ({short.path}, {long.path})")
            elif short.start_up is not None and long.start_up is not None:
                apart = abs(long.start_up - short.start_up)
                if apart > START_UP_SLACK * (long.training - short.training):
                    found.append(f"the runs' start-ups differ ({short.start_up:.1f} and "
                                 f"{long.start_up:.1f} s)")  # fmt: skip
        return found


def rate_of(short: list[TimedRun], long: list[TimedRun]) -> CommandRate:
    """The rate of runs timed twice, by the difference of the longer and the shorter run of
    each."""
    pairs = list(zip(short, long, strict=True))
    rates = [(b.steps - a.steps) / (b.wall - a.wall) for a, b in pairs]
    return CommandRate(sum(rates), rates, [b.steps / b.wall for _, b in pairs],
                       [b.path for _, b in pairs], pairs)  # fmt: skip


def lengths_refused(lengths: tuple[int, int]) -> str | None:
    """Why a pair of ``--lengths`` times no one path's rate, or None: out of order, or its
    shorter run under ``CALIBRATE_FROM`` steps (which compiles nothing) and its longer not."""
    short, long = lengths
    if not 0 < short < long:
        return f"--lengths {short} {long}: give two step counts, shorter first"
    if short < CALIBRATE_FROM <= long:
        return (
            f"--lengths {short} {long}: a run of under {CALIBRATE_FROM} steps compiles "
            "nothing and the longer one compiles, so the pair's difference is no path's "
            f"rate; give both under {CALIBRATE_FROM} or both at least {CALIBRATE_FROM}"
        )
    return None


def budgets_for(tasks: list[str], given: list[float] | None) -> dict[str, tuple[float, float]]:
    """Each task's two budgets: ``given`` for all where given, else its own :data:`BUDGETS`."""
    return {task: tuple(given) if given else BUDGETS[task] for task in tasks}


def budgets_said(budgets: dict[str, tuple[float, float]]) -> str:
    """``budgets`` as the scripts print them: "budgets 20 and 60 s (fuzzy-logic); ..."."""
    return "budgets " + "; ".join(f"{a:g} and {b:g} s ({task})" for task, (a, b) in budgets.items())


def limits_of(lengths: tuple[int, int] | None, budgets: tuple[float, float]) -> tuple[Limit, Limit]:
    """Where a round's two runs stop: at ``lengths`` steps where given, else after ``budgets``
    seconds of training."""
    if lengths is not None:
        return Limit(steps=lengths[0]), Limit(steps=lengths[1])
    return Limit(seconds=budgets[0]), Limit(seconds=budgets[1])


def command_rate(task: str, variant: str, runs: int, limits: tuple[Limit, Limit], folder: Path,
                 tag: str, device: str = "cpu") -> CommandRate:  # fmt: skip
    """Steps/s of ``runs`` commands at once on ``device``, by the two ``limits``' difference."""
    threads = 1 if runs > 1 else None
    reached = []
    for limit in limits:
        commands = []
        for seed in range(runs):
            run_dir = folder / f"{tag}-{task}-{variant}-{limit.tag}-s{seed}"
            args = command(task, variant, seed, run_dir, limit, folder, threads, device)
            commands.append((args, run_dir))
        reached.append(timed_commands(commands))
    return rate_of(*reached)


def checked_rate(task: str, variant: str, runs: int, limits: tuple[Limit, Limit], folder: Path,
                 tag: str, device: str = "cpu") -> tuple[CommandRate, int]:  # fmt: skip
    """:func:`command_rate`, timed again once (in fresh run directories, ``tag-again``) where
    its pairs did not start alike (:meth:`CommandRate.unlike`, said on stderr); with how many
    times it was timed again (0 or 1)."""
    rate = command_rate(task, variant, runs, limits, folder, tag, device)
    if not (reasons := rate.unlike()):
        return rate, 0
    print(f"{task} {variant} {tag}: {'; '.join(reasons)}: timed again", file=sys.stderr,
          flush=True)  # fmt: skip
    return command_rate(task, variant, runs, limits, folder, f"{tag}-again", device), 1


def prime(task: str, variant: str, runs: int, folder: Path, device: str = "cpu") -> None:
    """Run ``runs`` short commands at once, as the timed ones will run, so that both timed
    budgets find the calibration and inductor's code cached: a pair where one calibrates
    and the other does not measures start-up, not steps (one run per core, primed with a
    two-thread run's cache only, gave a negative rate)."""
    threads = 1 if runs > 1 else None
    commands = []
    for seed in range(runs):
        run_dir = folder / f"prime-{task}-{variant}-{runs}-s{seed}"
        args = command(task, variant, seed, run_dir, Limit(seconds=5), folder, threads, device)
        commands.append((args, run_dir))
    timed_commands(commands)


def official_rate(official: Path, task: str, variant: str, runs: int, steps: int,
                  folder: Path, device: str = "cpu") -> float:  # fmt: skip
    """Steps/s of ``runs`` official processes at once on ``device``, added up (after
    compiling)."""
    threads = available_cpus() if runs == 1 else 1
    spec = task_spec(OFFICIAL_SPEC[task], variant)
    servers = []
    try:
        for seed in range(runs):
            server = official_server(official, {**spec, "seed": seed}, threads, folder, device)
            servers.append(server)
        for server in servers:
            server.ask(steps)
        return sum(float(server.read()) for server in servers)
    finally:
        for server in servers:
            server.close()


def step_rate(task: str, variant: str, steps: int, device: str = "cpu") -> float:
    """The eager step benchmark's rate: ``Trainer.train_step`` in this process (on a GPU,
    read after the device has finished)."""
    spec = task_spec(OFFICIAL_SPEC[task], variant)
    threads = available_cpus()
    torch.set_num_threads(threads)
    trainer = Trainer(None, latentlens_config(spec, "fp32", threads), device=device, quiet=True)
    return StepTimer(trainer.train_step, 1, trainer.device)(steps)


def processor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """This CPU as the results name it: its model name, family and model, and whether it
    has AVX-512 (cloud guests often show every EPYC as "AMD EPYC"); the model name alone
    where ``cpuinfo`` is not Linux's."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except OSError:
        return cpu_model()
    if "cpu family" not in fields:
        return cpu_model()
    width = "AVX-512" if "avx512f" in fields.get("flags", "").split() else "no AVX-512"
    return (f"{fields.get('model name', cpu_model())} (family {fields['cpu family']} model "
            f"{fields.get('model', '?')}, {width})")  # fmt: skip


def spread(values: list[float], digits: int = 1) -> str:
    ordered = sorted(values)
    middle = statistics.median(ordered)
    return f"{middle:.{digits}f} [{ordered[0]:.{digits}f}–{ordered[-1]:.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=["softmax", "linear", "hyla"])
    parser.add_argument("--modes", nargs="+", choices=["single", "cores"],
                        help="default: single and cores (on cuda: single)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budgets", type=float, nargs=2,
                        help="seconds of training of each run (default: BUDGETS)")  # fmt: skip
    parser.add_argument("--lengths", type=int, nargs=2, metavar="STEPS",
                        help="run both commands to the end at these --steps instead of "
                        "stopping them by the budgets (default on cuda: 20000 50000)")  # fmt: skip
    parser.add_argument("--official-steps", type=int, default=300)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (args.official / "hyla").is_dir():
        parser.error(
            f"--official {args.official}: not a checkout of smonsays/hypernetwork-attention"
        )
    modes = args.modes or (["single"] if args.device == "cuda" else ["single", "cores"])
    if args.device == "cuda" and modes != ["single"]:
        parser.error("--modes cores: one run per core is a CPU mode; on cuda give --modes single")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine's torch sees no CUDA device")
    lengths = args.lengths or (CUDA_LENGTHS if args.device == "cuda" else None)
    if lengths is not None and (refused := lengths_refused(lengths)):
        parser.error(refused)
    if lengths is not None and lengths[0] < CALIBRATE_FROM:  # one path, not a default run's
        parser.error(f"--lengths {lengths[0]} {lengths[1]}: a run of under {CALIBRATE_FROM} "
                     "steps compiles nothing, so it takes another path than a default run; "
                     f"give both at least {CALIBRATE_FROM}")  # fmt: skip
    budgets = budgets_for(args.tasks, args.budgets)
    cores = available_cpus()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for task in args.tasks:
            for variant in args.variants:
                for mode in modes:
                    runs = cores if mode == "cores" else 1
                    # the first commands a user runs fill the caches (calibration, inductor),
                    # for the thread count this mode's runs take
                    prime(task, variant, runs, folder, args.device)
                    row: dict[str, Any] = {"task": task, "variant": variant, "mode": mode,
                                           "runs": runs, "official": [], "command": [],
                                           "per_run": [], "whole": [], "step": [],
                                           "paths": [], "pairs": [], "retimed": 0}  # fmt: skip
                    limits = limits_of(lengths, budgets[task])
                    for round_ in range(args.rounds):
                        tag = f"{mode}-r{round_}"
                        row["official"].append(
                            official_rate(args.official, task, variant, runs,
                                          args.official_steps, folder, args.device)
                        )  # fmt: skip
                        rate, again = checked_rate(task, variant, runs, limits, folder, tag,
                                                   args.device)  # fmt: skip
                        row["retimed"] += again
                        row["pairs"].append([[asdict(a), asdict(b)] for a, b in rate.pairs])
                        row["command"].append(rate.total)
                        row["paths"].append(rate.paths)
                        row["per_run"].append(rate.per_run)
                        row["whole"].append(sum(rate.whole))
                        if mode == "single":
                            row["step"].append(
                                step_rate(task, variant, args.official_steps, args.device)
                            )
                        print(f"{task} {variant} {mode} round {round_}: official "
                              f"{row['official'][-1]:.1f}, command {rate.total:.1f} steps/s "
                              f"(whole run {sum(rate.whole):.1f}; path {', '.join(rate.paths)})",
                              file=sys.stderr, flush=True)  # fmt: skip
                    rows.append(row)
                    if args.out:  # kept as it grows: a failure later loses nothing
                        args.out.write_text(json.dumps({"rows": rows}, indent=1))
    how = (f"runs to {lengths[0]} and {lengths[1]} steps" if lengths is not None
           else budgets_said(budgets))  # fmt: skip
    where = (f"{torch.cuda.get_device_name()}" if args.device == "cuda"
             else f"{processor()}, {cores} CPUs")  # fmt: skip
    print(
        f"`latentlens train` beside the official JAX code on this machine ({where}, "
        f"torch {torch.__version__}); {args.rounds} rounds, {how}; steps/s, median "
        "[min–max] over rounds, ratios per round; whole run: the longer command's steps "
        "over its wall time, start-up included\n"
    )
    print(
        f"{'task':15}{'variant':9}{'mode':8}{'official':>20}{'command':>20}{'ratio':>22}"
        f"{'whole run':>20}{'step (eager)':>20}{'command / step':>22}"
    )
    for row in rows:
        ratio = [c / o for c, o in zip(row["command"], row["official"], strict=True)]
        line = (
            f"{row['task']:15}{row['variant']:9}{row['mode']:8}{spread(row['official']):>20}"
            f"{spread(row['command']):>20}{spread(ratio, 2) + 'x':>22}{spread(row['whole']):>20}"
        )
        if row["step"]:
            loop = [c / s for c, s in zip(row["command"], row["step"], strict=True)]
            line += f"{spread(row['step']):>20}{spread(loop, 2):>22}"
        print(line)
    if args.out:
        meta = {"cpus": cores, "processor": processor(), "device": args.device,
                "torch": torch.__version__,
                "rounds": args.rounds, "budgets": budgets, "lengths": lengths,
                "official_steps": args.official_steps}  # fmt: skip
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

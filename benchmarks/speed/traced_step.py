"""The fused-compile CPU step traced whole, beside the same step compiled by torch.compile,
or beside itself with its graph called through autograd's dispatch layers, compiled with
a Python wrapper, with inductor's own kernels written for two threads or with oneDNN's
weight gradients.

    python benchmarks/speed/traced_step.py [--task fuzzy-logic] [--attention softmax]
        [--against torch.compile|through-autograd|python-wrapper|two-thread-kernels|
                   onednn-weight-gradients]
        [--batch N] [--by-distance]
        [--steps 40] [--rounds 12] [--threads 2] [--out FILE.json]

``--against torch.compile`` (the default): two fused-compile trainers of the task's
reference model in one process, one as the command builds it (forward and backward traced
into one graph and compiled, :mod:`latentlens.training.traced_step`), one with the
objective compiled by torch.compile as before that (dynamo's guards, AOT autograd's
wrappers, the autograd engine's backward). ``--against through-autograd``: the command's
trainer alone, its graph called as the command calls it (below autograd's and view
tracking's dispatch layers) and, in the other turns, as an ordinary call (every operator
through them). ``--against python-wrapper``: beside a second such trainer whose graph
inductor compiled as before its wrapper was C++: a Python wrapper that checks each
operator's output sizes and strides (``WRAPPER_OPTIONS`` left out). ``--against
two-thread-kernels``: beside a second trainer whose graph's own inductor kernels are written
for two threads (``KERNEL_OPTIONS`` set to ``cpp.threads = 2``), as a run's graph was when
it compiled on two threads. ``--against onednn-weight-gradients``: the command's trainer
alone, its weights' gradients summed per core (``per-core``) and, in the other turns, by
oneDNN's matmul (:data:`latentlens.kernels.linear.WEIGHT_GRADIENTS`). ``--by-distance``
probes how far apart the two cores sit before and after each round
(``core_distance.py``) and gives the ratio near and far apart too. ``--batch`` sets the
rows a step (default: the task's; 2 leaves mostly the host's fixed work). The two take
turns, ``--steps`` steps each, the first turn alternating, for ``--rounds`` rounds; it
prints each round's milliseconds a step and the median ratio with its range. A diagnosis
of the step, in one process so that the machine's phases fall on both alike; the claim
is the command's (``command_side_by_side.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.training import TrainConfig, Trainer  # noqa: E402
from speed.core_distance import FAR_NS, place_of, round_trip_ns  # noqa: E402
from speed.host_share import trainer_for as fused_compile_trainer  # noqa: E402

WARMUP_STEPS = 20
BASELINES = ("torch.compile", "through-autograd", "python-wrapper", "two-thread-kernels",
             "onednn-weight-gradients")  # fmt: skip


def trainer_for(task: str, attention: str, traced: bool, batch: int | None = None) -> Trainer:
    """A fused-compile trainer of ``task``'s reference model, its step traced whole or
    compiled by torch.compile, at ``batch`` rows a step (None: the task's)."""
    rows = TrainConfig.for_task(task).batch_size if batch is None else batch
    with mock.patch.object(Trainer, "traces_whole_step", lambda self, graphs: traced):
        trainer = fused_compile_trainer(task, attention, rows)
    assert (trainer.traced is not None) == traced
    return trainer


def through_autograd() -> contextlib.AbstractContextManager:
    """The traced graph called with every operator through autograd's dispatch layers, as
    before they were skipped: gradient mode off in place of the guard, so that the
    parameters, which go in undetached, are recorded by nothing (before, they went in
    detached)."""
    return mock.patch("latentlens.training.traced_step.below_autograd", torch.no_grad)


def python_wrapper() -> contextlib.AbstractContextManager:
    """Graphs compiled meanwhile get inductor's Python wrapper and its size checks, as
    before the traced step set its :data:`~latentlens.training.traced_step.WRAPPER_OPTIONS`."""
    return mock.patch.dict("latentlens.training.traced_step.WRAPPER_OPTIONS", clear=True)


def two_thread_kernels() -> contextlib.AbstractContextManager:
    """Graphs compiled meanwhile get inductor's own kernels written for two threads, as a
    run's graph on two threads had before the traced step set its
    :data:`~latentlens.training.traced_step.KERNEL_OPTIONS`."""
    return mock.patch.dict("latentlens.training.traced_step.KERNEL_OPTIONS", {"cpp.threads": 2})


# the baselines that are a second traced trainer, its graph compiled under a patch
COMPILED_UNDER = {"python-wrapper": python_wrapper, "two-thread-kernels": two_thread_kernels}


def milliseconds_a_step(trainer: Trainer, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return (time.perf_counter() - start) / steps * 1e3


def turns(args: argparse.Namespace) -> dict[str, Callable[[int], float]]:
    """``{name: steps -> ms a step}``: the baseline first, then the command's step."""
    traced = trainer_for(args.task, args.attention, traced=True, batch=args.batch)
    if args.against == "torch.compile":
        compiled = trainer_for(args.task, args.attention, traced=False, batch=args.batch)
        baseline = lambda steps: milliseconds_a_step(compiled, steps)  # noqa: E731
    elif args.against in COMPILED_UNDER:
        other = trainer_for(args.task, args.attention, traced=True, batch=args.batch)

        def baseline(steps: int) -> float:
            with COMPILED_UNDER[args.against]():  # its graph is compiled in the first turn
                return milliseconds_a_step(other, steps)
    elif args.against == "onednn-weight-gradients":
        traced.weight_gradients = "per-core"  # the trainer's loop sets it each step

        def baseline(steps: int) -> float:
            traced.weight_gradients = "onednn"
            try:
                return milliseconds_a_step(traced, steps)
            finally:
                traced.weight_gradients = "per-core"
    else:

        def baseline(steps: int) -> float:
            with through_autograd():
                return milliseconds_a_step(traced, steps)

    return {args.against: baseline, "traced": lambda steps: milliseconds_a_step(traced, steps)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--against", choices=BASELINES, default="torch.compile")
    parser.add_argument("--batch", type=int, help="rows a step (default: the task's)")
    parser.add_argument("--steps", type=int, default=40, help="steps a turn")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--by-distance", action="store_true",
                        help="probe the cores' distance around each round")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the rounds and medians here as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    timed = turns(args)
    for time_steps in timed.values():
        time_steps(WARMUP_STEPS)
    rounds: dict[str, list[float]] = {name: [] for name in timed}
    names, places = list(timed), []
    for index in range(args.rounds):
        before = round_trip_ns() if args.by_distance else None
        for name in names if index % 2 == 0 else names[::-1]:
            rounds[name].append(timed[name](args.steps))
        old, new = rounds[args.against][-1], rounds["traced"][-1]
        line = f"{args.against} {old:7.2f} ms   traced {new:7.2f} ms   {old / new:.3f}x"
        if before is not None:
            trips = [before, round_trip_ns()]
            places.append(place_of(trips, FAR_NS))
            line += f"   round trip {trips[0]:4.0f} {trips[1]:4.0f} ns: {places[-1] or 'moved'}"
        print(line, flush=True)
    ratios = [a / b for a, b in zip(rounds[args.against], rounds["traced"], strict=True)]
    faster = sum(ratio > 1 for ratio in ratios)
    print(f"{args.task} {args.attention}, batch {args.batch or 'the task'}'s, {args.threads} "
          f"threads: traced at {statistics.median(ratios):.3f}x "
          f"[{min(ratios):.3f}-{max(ratios):.3f}] the {args.against} step (median [range] of "
          f"{args.rounds} rounds; faster in {faster})")  # fmt: skip
    for place in ("near", "far") if places else ():
        at = [ratio for ratio, where in zip(ratios, places, strict=True) if where == place]
        if at:
            print(f"  {place} apart: {statistics.median(at):.3f}x [{min(at):.3f}-{max(at):.3f}] "
                  f"over {len(at)} rounds (faster in {sum(r > 1 for r in at)})")  # fmt: skip
    if args.out:
        result = {"task": args.task, "attention": args.attention, "against": args.against,
                  "batch": args.batch, "threads": args.threads, "steps_a_turn": args.steps,
                  "rounds_ms": rounds, "ratios": ratios, "places": places}  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

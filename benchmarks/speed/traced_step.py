"""The fused-compile CPU step traced whole, beside the same step compiled by torch.compile.

    python benchmarks/speed/traced_step.py [--task fuzzy-logic] [--attention softmax]
        [--steps 40] [--rounds 12] [--out FILE.json]

Two fused-compile trainers of the task's reference model in one process: one as the
command builds it (forward and backward traced into one graph and compiled,
:mod:`latentlens.training.traced_step`), one with the objective compiled by torch.compile
as before that (dynamo's guards, AOT autograd's wrappers, the autograd engine's backward).
They take turns, ``--steps`` steps each, for ``--rounds`` rounds; it prints each round's
milliseconds a step and the median ratio with its range. A diagnosis of the step, in one
process so that the machine's phases fall on both alike; the claim is the command's
(``command_side_by_side.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from unittest import mock

import torch

from latentlens.training import TrainConfig, Trainer, model_for_task

WARMUP_STEPS = 20


def trainer_for(task: str, attention: str, traced: bool) -> Trainer:
    """A fused-compile trainer of ``task``'s reference model, its step traced whole or
    compiled by torch.compile."""
    config = Trainer.resolve_config(
        task, model_for_task(task, attention=attention), TrainConfig.for_task(task)
    )
    with mock.patch.object(Trainer, "traces_whole_step", lambda self, graphs: traced):
        trainer = Trainer(None, config, device="cpu", compile=True, fused=True, quiet=True)
    assert (trainer.traced is not None) == traced
    return trainer


def milliseconds_a_step(trainer: Trainer, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return (time.perf_counter() - start) / steps * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--steps", type=int, default=40, help="steps a turn")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the rounds and medians here as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    trainers = {
        "torch.compile": trainer_for(args.task, args.attention, traced=False),
        "traced": trainer_for(args.task, args.attention, traced=True),
    }
    for trainer in trainers.values():
        milliseconds_a_step(trainer, WARMUP_STEPS)
    rounds: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.rounds):
        for name, trainer in trainers.items():
            rounds[name].append(milliseconds_a_step(trainer, args.steps))
        old, new = rounds["torch.compile"][-1], rounds["traced"][-1]
        print(f"torch.compile {old:7.2f} ms   traced {new:7.2f} ms   {old / new:.3f}x", flush=True)
    ratios = [a / b for a, b in zip(rounds["torch.compile"], rounds["traced"], strict=True)]
    print(f"{args.task} {args.attention}, {args.threads} threads: traced at "
          f"{statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}] the "
          f"torch.compile step (median [range] of {args.rounds} rounds)")  # fmt: skip
    if args.out:
        result = {"task": args.task, "attention": args.attention, "threads": args.threads,
                  "steps_a_turn": args.steps, "rounds_ms": rounds, "ratios": ratios}  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

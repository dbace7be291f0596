"""How much of a fused-compile CPU step is fixed host work, and how much the batch's arithmetic.

    python benchmarks/speed/host_share.py [--task fuzzy-logic] [--attention softmax]
        [--steps 40] [--rounds 9] [--official 20.2] [--profile 30] [--out FILE.json]

The same step at two batch sizes: the task's (128) and 2 rows, whose arithmetic is next to
nothing. The small step is made to run the same operators as the large one (the fused
layer norms and the attention kernel built for the model's sizes, which a compiled step
otherwise takes only for large calls; at the reference's sizes the large step takes them
anyway, so it is the command's step), so its time is what a step costs whatever its
batch: Python, the dispatcher, autograd, the compiled graphs' wrappers, the operators'
bodies, small copies and views, AdamW. The large step's time beyond it is the batch's
work: matmuls, kernels, memory traffic. Each is timed on one thread and on two, in
interleaved rounds, and the medians are printed with the second thread's speed-up on each.

The fixed part runs on the main thread while OpenMP's other threads wait, so a second core
shortens only the batch's part. With ``--official`` (the official code's steps/s at the
same setting, from ``command_side_by_side.py``) it prints the step 3x that rate allows and
the fixed part that would leave beside the batch's part as measured. With ``--profile N``
it then lists the N operators of the small step (on two threads) that take the most time
of their own under ``torch.profiler``, what the fixed part is made of, and then those of
the task's step: how much of it is the matmuls, which no host-side change shortens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import latentlens.kernels.attention_core as attention_core
import latentlens.models.transformer as transformer
from latentlens.training import TrainConfig, Trainer, model_for_task

SMALL_BATCH = 2
WARMUP_STEPS = 20


def trainer_for(
    task: str, attention: str, batch_size: int, task_config: dict | None = None
) -> Trainer:
    """A fused-compile trainer of ``task``'s reference model at ``batch_size`` (the task
    configured by ``task_config``; None: its defaults)."""
    config = Trainer.resolve_config(
        task,
        model_for_task(task, task_config, attention=attention),
        TrainConfig.for_task(task, batch_size=batch_size),
        task_config,
    )
    return Trainer(None, config, device="cpu", compile=True, fused=True, quiet=True)


def milliseconds_a_step(trainer: Trainer, threads: int, steps: int) -> float:
    """Wall milliseconds a step over ``steps`` steps on ``threads`` threads."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return (time.perf_counter() - start) / steps * 1e3


def operator_table(trainer: Trainer, steps: int, rows: int) -> list[tuple[str, float, float]]:
    """``(operator, calls a step, microseconds of its own a step)`` of ``trainer``'s step on
    two threads under ``torch.profiler``, the ``rows`` costliest first."""
    torch.set_num_threads(2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            trainer.train_step()
    averages = sorted(prof.key_averages(), key=lambda event: -event.self_cpu_time_total)
    return [(e.key, e.count / steps, e.self_cpu_time_total / steps) for e in averages[:rows]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--steps", type=int, default=40, help="steps a timing")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--official", type=float, help="the official code's steps/s here")
    parser.add_argument("--profile", type=int, default=0, help="rows of the fixed part's ops")
    parser.add_argument("--out", type=Path, help="write the medians here as JSON")
    args = parser.parse_args(argv)
    # the small step takes the operators the large one takes (the module's docstring)
    transformer.COMPILED_FROM = 0
    attention_core.SPECIALISE_FROM = 0
    batch = TrainConfig.for_task(args.task).batch_size
    trainers = {size: trainer_for(args.task, args.attention, size) for size in (SMALL_BATCH, batch)}
    cells = [(size, threads) for size in trainers for threads in (1, 2)]
    for size, threads in cells:
        milliseconds_a_step(trainers[size], threads, WARMUP_STEPS)
    times: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    for _ in range(args.rounds):
        for size, threads in cells:
            times[(size, threads)].append(milliseconds_a_step(trainers[size], threads, args.steps))
    median = {cell: statistics.median(values) for cell, values in times.items()}
    fixed = {threads: median[(SMALL_BATCH, threads)] for threads in (1, 2)}
    work = {threads: median[(batch, threads)] - fixed[threads] for threads in (1, 2)}
    print(f"{args.task} {args.attention}, fused-compile, batch {batch} beside {SMALL_BATCH}; "
          f"median ms a step, {args.rounds} interleaved rounds of {args.steps} steps")  # fmt: skip
    print(f"{'':24}{'1 thread':>10}{'2 threads':>11}{'speed-up':>10}")
    rows = [
        (f"step, batch {batch}", median[(batch, 1)], median[(batch, 2)]),
        ("fixed part", fixed[1], fixed[2]),
        ("the batch's work", work[1], work[2]),
    ]
    for label, one, two in rows:
        print(f"{label:24}{one:10.2f}{two:11.2f}{one / two:9.2f}x")
    result = {
        "task": args.task,
        "attention": args.attention,
        "batch": batch,
        "threads": {
            str(t): {"step_ms": median[(batch, t)], "fixed_ms": fixed[t], "work_ms": work[t]}
            for t in (1, 2)
        },
        "rounds_ms": {f"batch {s}, {t} threads": v for (s, t), v in times.items()},
    }
    if args.official:
        target = 1e3 / (3 * args.official)
        print(f"3x the official {args.official} steps/s: a step of {target:.2f} ms; beside "
              f"the batch's {work[2]:.2f} ms on 2 threads that leaves {target - work[2]:.2f} "
              f"ms for the fixed part, which takes {fixed[2]:.2f}")  # fmt: skip
        result["target_ms"] = target
    if args.profile:
        for size, part in ((SMALL_BATCH, "fixed_part_ops"), (batch, "step_ops")):
            table = operator_table(trainers[size], args.steps, args.profile)
            name = "the fixed part" if size == SMALL_BATCH else "the whole step"
            print(f"\n{name} (batch {size}, 2 threads, profiled; "
                  f"{sum(row[2] for row in table) / 1e3:.2f} ms a step in these rows)")  # fmt: skip
            print(f"{'operator':<66}{'calls':>7}{'us a step':>11}")
            for op, calls, micros in table:
                print(f"{op[:64]:<66}{calls:7.1f}{micros:11.1f}")
            result[part] = [list(row) for row in table]
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

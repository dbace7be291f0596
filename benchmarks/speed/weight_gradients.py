"""A weight's gradient on oneDNN, its narrower operand copied transposed, beside ``dy`` copied.

    python benchmarks/speed/weight_gradients.py [--threads 2] [--rounds 9] [--calls 20]
        [--step TASK ATTENTION [--steps 8]] [--out FILE.json]

A fused step's weight gradients (``dy^T x``, summed over a batch's rows) go to oneDNN's
matmul as ``linear(A, B)`` with ``A`` a contiguous copy of one operand transposed and
``B`` the other as a transposed view (:func:`latentlens.kernels.linear.row_products`).
The copy was always of ``dy``; it is now of the narrower operand, the product taken as
``(x^T dy)^T`` where ``x`` is narrower. This times both, and MKL's ``torch.mm(dy.T, x)``
and the per-core engine (:func:`~latentlens.kernels.linear.per_core_row_products`) for
comparison, at each shape the reference models' weight gradients take, interleaved
call blocks over rotating inputs (as a step meets them: not in the cache from the call
before), and prints the median microseconds a call and the old over new ratio with its
range over rounds. With ``--step TASK ATTENTION`` it times the fused-compile training
step of the task's reference model instead, one trainer, its weight gradients taken
either way in alternating blocks of ``--steps`` steps (``--rounds`` pairs). A diagnosis of
a kernel and of the step: the claim is the command's (``command_side_by_side.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import latentlens.kernels.linear as linear_kernels
import latentlens.kernels.mlp as mlp_kernels
from latentlens.allocator import keep_freed_memory
from latentlens.kernels.linear import (
    ROWS_PER_SUM,
    has_per_core,
    linear,
    onednn_row_products,
    per_core_row_products,
    row_products,
    transposed,
)
from latentlens.training import TrainConfig, Trainer, model_for_task

# (outputs, inputs, rows): fuzzy logic T = 16 (2,048 rows) and SRAVEN (4,608), the MLP's
# two weights and the attention's projections in and out
SHAPES = [(256, 128, 2048), (128, 256, 2048), (48, 128, 2048), (128, 16, 2048),
          (256, 128, 4608), (128, 256, 4608), (192, 128, 4608), (128, 64, 4608)]  # fmt: skip
INPUTS = 4  # inputs rotated through, so that a call's operands are not the last call's


def dy_copied(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``dy^T x`` as before: ``dy`` copied transposed whatever its width, in the same chunks."""
    dy, x = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    total = None
    for start in range(0, max(len(dy), 1), ROWS_PER_SUM):
        chunk = slice(start, start + ROWS_PER_SUM)
        part = linear(transposed(dy[chunk]), x[chunk].T)
        total = part if total is None else total + part
    return total


WAYS = {"dy copied": dy_copied, "narrower copied": onednn_row_products,
        "mkl mm": lambda dy, x: torch.mm(dy.T, x),
        **({"per core": per_core_row_products} if has_per_core() else {})}  # fmt: skip


def time_shape(outputs: int, inputs: int, rows: int, rounds: int, calls: int) -> dict:
    """Median microseconds a call of each way over ``rounds`` interleaved rounds, and the
    ratio of ``dy copied`` over ``narrower copied`` per round."""
    gen = torch.Generator().manual_seed(0)
    dys = [torch.randn(rows, outputs, generator=gen) for _ in range(INPUTS)]
    xs = [torch.randn(rows, inputs, generator=gen) for _ in range(INPUTS)]
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    for r in range(rounds + 1):  # the first round warms up
        order = list(WAYS) if r % 2 else list(reversed(WAYS))
        for name in order:
            began = time.perf_counter()
            for i in range(calls):
                WAYS[name](dys[i % INPUTS], xs[i % INPUTS])
            if r:
                times[name].append((time.perf_counter() - began) / calls * 1e6)
    ratios = [a / b for a, b in zip(times["dy copied"], times["narrower copied"], strict=True)]
    return {
        "shape": [outputs, inputs, rows],
        "us": {name: statistics.median(t) for name, t in times.items()},
        "ratio": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
    }


def taking(way: Callable) -> None:
    """Weight gradients taken ``way`` from now on, by the fused MLP and projections alike."""
    linear_kernels.row_products = mlp_kernels.row_products = way


def time_step(task: str, attention: str, rounds: int, steps: int) -> dict:
    """Milliseconds a fused-compile step of ``task``'s reference model takes with ``dy``
    copied and with the narrower operand copied, alternating blocks of ``steps`` steps on
    one trainer (``rounds`` pairs, the first of each pair alternating); medians, and the
    old over new ratio per pair."""
    config = Trainer.resolve_config(
        task, model_for_task(task, attention=attention), TrainConfig.for_task(task)
    )
    trainer = Trainer(None, config, device="cpu", compile=True, fused=True, quiet=True)
    ways = {"dy copied": dy_copied, "narrower copied": onednn_row_products}
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for name in (*ways, *ways):  # compiling, and both ways' first allocations
            taking(ways[name])
            for _ in range(steps):
                trainer.train_step()
        for r in range(rounds):
            for name in list(ways) if r % 2 == 0 else list(reversed(ways)):
                taking(ways[name])
                began = time.perf_counter()
                for _ in range(steps):
                    trainer.train_step()
                times[name].append((time.perf_counter() - began) / steps * 1e3)
    finally:
        taking(row_products)
    ratios = [a / b for a, b in zip(times["dy copied"], times["narrower copied"], strict=True)]
    return {
        "task": task,
        "attention": attention,
        "ms": {name: statistics.median(t) for name, t in times.items()},
        "ratios": ratios,
        "ratio": statistics.median(ratios),
        "faster_rounds": sum(r > 1 for r in ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20, help="calls a block")
    parser.add_argument("--step", nargs=2, metavar=("TASK", "ATTENTION"),
                        help="time the training step of TASK's model with ATTENTION")  # fmt: skip
    parser.add_argument("--steps", type=int, default=8, help="steps a block (--step)")
    parser.add_argument("--out", type=Path, help="write the medians here as JSON")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as a training run does
    torch.set_num_threads(args.threads)
    if args.step:
        result = time_step(*args.step, args.rounds, args.steps)
        ms, ratios = result["ms"], result["ratios"]
        print(f"{' '.join(args.step)}, fused-compile step on {args.threads} thread(s), median "
              f"ms over {args.rounds} pairs of {args.steps} steps: dy copied "
              f"{ms['dy copied']:.2f}, narrower copied {ms['narrower copied']:.2f}; old / new "
              f"{result['ratio']:.3f}x [{min(ratios):.3f}-{max(ratios):.3f}], faster in "
              f"{result['faster_rounds']} of {args.rounds}")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps({"threads": args.threads, **result}, indent=1))
        return 0
    print(f"weight gradients on {args.threads} thread(s), median us a call over "
          f"{args.rounds} rounds of {args.calls} calls")  # fmt: skip
    print(f"{'outputs x inputs, rows':>24}" + "".join(f"{name:>17}" for name in WAYS)
          + f"{'old / new':>20}")  # fmt: skip
    found = []
    for shape in SHAPES:
        result = time_shape(*shape, args.rounds, args.calls)
        low, high = result["ratio_range"]
        outputs, inputs, rows = shape
        print(f"{f'{outputs} x {inputs}, {rows}':>24}"
              + "".join(f"{result['us'][name]:17.0f}" for name in WAYS)
              + f"{result['ratio']:8.2f}x [{low:.2f}-{high:.2f}]")  # fmt: skip
        found.append(result)
    if args.out:
        args.out.write_text(json.dumps({"threads": args.threads, "shapes": found}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

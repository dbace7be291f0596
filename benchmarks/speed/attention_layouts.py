"""The fused attention core's two layouts side by side: heads in the vector lanes (what
softmax and linear attention with 8 heads or more now take) and keys in the lanes (what
they took before, and what HYLA and the mlp value networks take).

Both are built for the call's sizes, as a training step's call is; the keys layout is
the same source built with ``HEADS_AS_LANES_FROM`` past any head count. Timed at the
seeds' shapes (batch 128 with the relative position bias and attention dropout the
models train with): fuzzy logic (8 heads of 2, T = 16 and Table A1's T = 32) and SRAVEN
(16 heads of 4, 36 positions), softmax and no normalisation, the layouts alternating in
rounds, median microseconds a forward and a backward call on one thread and on every
core. The largest difference between the layouts' outputs, relative to the largest
entry, shows they compute the same thing to float32 rounding. With ``--steps N``, it then
times whole fused-compile training steps of the reference models (SRAVEN and fuzzy logic,
softmax and linear, batch 128, every core), the two layouts alternating in blocks of N
steps in one process: what the core's gain is worth to a step.

    python benchmarks/speed/attention_layouts.py [--calls 30] [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from latentlens.allocator import keep_freed_memory
from latentlens.kernels import attention_core
from latentlens.threads import available_cpus

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speed.host_share import milliseconds_a_step, trainer_for  # noqa: E402

LAYOUTS = ("heads", "keys")
SHAPES = {  # positions, heads, width of a head
    "fuzzy logic, T = 16": (16, 8, 2),
    "Table A1, T = 32": (32, 8, 2),
    "SRAVEN": (36, 16, 4),
}
NEVER = 1 << 30  # a head count no model reaches: the keys layout for every call


def chooser(layout: str):
    """``kernels_for`` giving the library built for a call's sizes with ``layout``."""

    def choose(spec: attention_core.Spec):
        fixed = attention_core.fixed_defines(spec)
        if layout == "keys":
            fixed = (*fixed, ("HEADS_AS_LANES_FROM", NEVER))
        return attention_core.library(fixed)

    return choose


def core_calls(layout: str, inputs: tuple, options: tuple, calls: int) -> tuple[float, ...]:
    """Median-ready microseconds a forward and a backward call with ``layout``, and their
    outputs (z, then the gradients)."""
    packed, bias, drop, dz = inputs
    original = attention_core.kernels_for
    attention_core.kernels_for = chooser(layout)
    try:
        z, rows = attention_core.self_attention_core(packed, bias, drop, *options)  # warm
        began = time.perf_counter()
        for _ in range(calls):
            z, rows = attention_core.self_attention_core(packed, bias, drop, *options)
        forward = time.perf_counter()
        for _ in range(calls):
            grads = attention_core.self_attention_core_backward(
                packed, bias, drop, rows, dz, *options
            )
        backward = time.perf_counter()
    finally:
        attention_core.kernels_for = original
    return (forward - began) / calls * 1e6, (backward - forward) / calls * 1e6, (z, *grads)


def largest_difference(ours: tuple, theirs: tuple) -> float:
    """The largest difference between two layouts' outputs, relative to the largest entry."""
    pairs = zip(ours, theirs, strict=True)
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in pairs)


def step_comparison(steps: int, rounds: int) -> None:
    """Milliseconds a fused-compile training step with each layout, alternating in blocks
    of ``steps`` steps, median over ``rounds`` blocks each, on every core."""
    print(f"\nfused-compile training step, batch 128, {available_cpus()} threads; median ms a "
          f"step over {rounds} alternating blocks of {steps}")  # fmt: skip
    print(f"{'task':<14}{'attention':>10}{'heads':>9}{'keys':>9}{'keys / heads':>13}")
    original = attention_core.kernels_for
    try:
        for task in ("sraven", "fuzzy-logic"):
            for attention in ("softmax", "linear"):
                trainer = trainer_for(task, attention, 128)
                times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
                for layout in LAYOUTS:  # compile and warm both
                    attention_core.kernels_for = chooser(layout)
                    milliseconds_a_step(trainer, available_cpus(), 5)
                for round_ in range(rounds):
                    for layout in LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]:
                        attention_core.kernels_for = chooser(layout)
                        times[layout].append(milliseconds_a_step(trainer, available_cpus(), steps))
                heads_ms, keys_ms = (statistics.median(times[layout]) for layout in LAYOUTS)
                print(f"{task:<14}{attention:>10}{heads_ms:>9.1f}{keys_ms:>9.1f}"
                      f"{keys_ms / heads_ms:>12.3f}x")  # fmt: skip
    finally:
        attention_core.kernels_for = original


def core_comparison(inputs: tuple, options: tuple, label: str, calls: int, rounds: int) -> None:
    """Print each pass's median microseconds with each layout, on one thread and every core."""
    for threads in sorted({1, available_cpus()}):
        torch.set_num_threads(threads)
        times = {(layout, part): [] for layout in LAYOUTS for part in range(2)}
        outputs = {}
        for round_ in range(rounds):
            for layout in LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]:
                *took, outputs[layout] = core_calls(layout, inputs, options, calls)
                for part, value in enumerate(took):
                    times[(layout, part)].append(value)
        difference = largest_difference(outputs["heads"], outputs["keys"])
        for part, name in enumerate(("forward", "backward")):
            heads_us, keys_us = (statistics.median(times[(lay, part)]) for lay in LAYOUTS)
            print(f"{label:<22}{options[2]:>10}{threads:>8}{name:>9}{heads_us:>8.0f}"
                  f"{keys_us:>8.0f}{keys_us / heads_us:>12.2f}x{difference:>11.1e}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=0, help="steps a block (0: no steps)")
    args = parser.parse_args(argv)
    keep_freed_memory()
    print(f"fused attention core, batch 128 with bias and dropout, torch {torch.__version__}; "
          f"median us a call over {args.rounds} alternating rounds of {args.calls}")  # fmt: skip
    print(f"{'shape':<22}{'attention':>10}{'threads':>8}{'pass':>9}{'heads':>8}{'keys':>8}"
          f"{'keys / heads':>13}{'rel. diff':>11}")  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    for label, (positions, heads, width) in SHAPES.items():
        inputs = (
            torch.randn(128, positions, heads, 3 * width, generator=gen),
            attention_core.padded(torch.randn(heads, positions, positions, generator=gen)),
            attention_core.padded((torch.rand(positions, positions, generator=gen) > 0.1) / 0.9),
            torch.randn(128, positions, heads, width, generator=gen),
        )
        for normalization in ("softmax", "none"):
            options = (width, width, normalization, None, False, 0, 1e-6)
            core_comparison(inputs, options, label, args.calls, args.rounds)
    if args.steps:
        step_comparison(args.steps, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

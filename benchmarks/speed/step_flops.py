"""Arithmetic per training step: how much of a GPU step's time the FLOPs can explain.

Counts the floating-point operations of one training step's forward and backward (the
objective ``--compile`` compiles: the batch's assembly, the model and the loss; AdamW's
element-wise update is left out) with :class:`torch.utils.flop_counter.FlopCounterMode`,
for the hooked model and its plain-PyTorch twin at the reference's sizes and batch 128,
and sets them beside the time they take at a GPU's peak rate and beside the step time the
official code reaches (docs/methods/numbers.md) and the 3x target allows. Where the
arithmetic at peak is a small share of the target, a step's time is kernel latency and
memory traffic, and only fewer kernels (CUDA graphs, fusion, seeds sharing kernels) can
meet the target; faster arithmetic (TF32, bf16) cannot. Counting runs on any device.

    python benchmarks/speed/step_flops.py [--task fuzzy-logic|sraven|all]
                                    [--fp32-tflops 67] [--tf32-tflops 495]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.plain_twin import PlainObjective, twin_of  # noqa: E402

from latentlens.training import Trainer  # noqa: E402
from latentlens.training.objective import TrainingObjective  # noqa: E402
from speed.train_throughput import OFFICIAL, TARGET, reference_configs  # noqa: E402

# NVIDIA's H100 SXM datasheet, dense: float32 on CUDA cores, TF32 on tensor cores.
H100_FP32_TFLOPS = 67.0
H100_TF32_TFLOPS = 495.0


def step_flops(objective: torch.nn.Module, trainer: Trainer) -> int:
    """FLOPs of ``objective``'s forward and backward on one batch of 128."""
    draws = trainer.task.draw(128, "train", trainer.task.make_generator(0))
    with FlopCounterMode(display=False) as counter:
        objective(draws).backward()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="all", choices=["fuzzy-logic", "sraven", "all"])
    parser.add_argument("--fp32-tflops", type=float, default=H100_FP32_TFLOPS)
    parser.add_argument("--tf32-tflops", type=float, default=H100_TF32_TFLOPS)
    args = parser.parse_args()
    tasks = ["fuzzy-logic", "sraven"] if args.task == "all" else [args.task]
    print(
        f"FLOPs of a training step's forward and backward, batch 128, reference sizes; "
        f"time at {args.fp32_tflops:g} TFLOP/s (float32) and {args.tf32_tflops:g} TFLOP/s "
        f"(TF32) beside the official code's step and the {TARGET['cuda']:g}x target's "
        "(GPU, docs/methods/numbers.md)\n"
    )
    header = (
        f"{'task':<12}{'variant':<9}{'GFLOP':>7}{'twin':>7}{'fp32 us':>9}{'tf32 us':>9}"
        f"{'official us':>13}{'target us':>11}{'fp32/target':>13}"
    )
    print(header)
    for task, variant, config in reference_configs(tasks, "fp32"):
        trainer = Trainer(None, config, device="cpu", quiet=True)
        flops = step_flops(TrainingObjective(trainer.model, trainer.task), trainer)
        twin = twin_of(trainer.model, trainer.model_cfg).train()
        twin_flops = step_flops(PlainObjective(twin, trainer.task), trainer)
        fp32_us = flops / (args.fp32_tflops * 1e6)
        tf32_us = flops / (args.tf32_tflops * 1e6)
        official_us = 1e6 / OFFICIAL[("cuda", task)][variant]
        target_us = official_us / TARGET["cuda"]
        print(
            f"{task:<12}{variant:<9}{flops / 1e9:>7.2f}{twin_flops / 1e9:>7.2f}"
            f"{fp32_us:>9.0f}{tf32_us:>9.0f}{official_us:>13.0f}{target_us:>11.0f}"
            f"{fp32_us / target_us:>13.2f}"
        )
    print(
        "\nus: microseconds per step. fp32/target: the share of the target step time that "
        "the arithmetic alone takes at the float32 peak."
    )


if __name__ == "__main__":
    main()

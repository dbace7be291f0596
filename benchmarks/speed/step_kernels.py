"""Kernels per compiled training step: the hooked model against its plain-PyTorch twin.

On a GPU a small model's graphed step is bound by kernel latency rather than arithmetic
(reference models, batch 128: a few microseconds a kernel), so the number of kernels that
torch.compile leaves in the forward and backward is what a replay costs. This script
compiles each model's training objective, the batch's assembly from its random draws, the
model and the loss together (static shapes, as ``--compile`` does), runs one forward and
backward, and counts the kernels inductor's
generated code launches: its own fused kernels and the library calls (matmuls).
Inductor's CPU and GPU code generators share most fusion decisions, so a CPU's count is a
guide to a GPU's; run it with ``--device cuda`` for the GPU's own. ``--seeds N`` counts a
seed group's compiled step instead (every seed's batch assembled, the vmapped forward and
backward: :class:`~latentlens.training.objective.SeedGroupObjective`) beside N single runs.

    python benchmarks/speed/step_kernels.py [--task fuzzy-logic|sraven|all] [--device auto]
                                      [--seeds N]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch._inductor.utils import run_and_get_code

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.plain_twin import PlainObjective, twin_of  # noqa: E402

from latentlens.devices import resolve_device  # noqa: E402
from latentlens.training import Trainer, seed_configs  # noqa: E402
from latentlens.training.multiseed import SeedGroup  # noqa: E402
from latentlens.training.objective import SeedGroupObjective, TrainingObjective  # noqa: E402
from speed.train_throughput import reference_configs  # noqa: E402

KERNEL_DEFINITION = re.compile(r"^(\w+) = async_compile\.\w+\(", re.M)
CALL = re.compile(r"^\s+([\w.]+)\(", re.M)


def launches(code: str) -> tuple[int, int]:
    """``(fused, library)``: kernel launches in the ``call`` function of inductor's
    generated ``code``: its own kernels, and library calls (``extern_kernels.*``)."""
    defined = set(KERNEL_DEFINITION.findall(code))
    body = code.split("def call(", 1)[1].split("\ndef ", 1)[0]
    names = [name.removesuffix(".run") for name in CALL.findall(body)]
    fused = sum(name in defined for name in names)
    library = sum(name.startswith("extern_kernels.") for name in names)
    return fused, library


def step_launches(trainer: Trainer, objective: TrainingObjective) -> tuple[int, int]:
    """Kernel launches of the compiled forward and backward of a training ``objective``
    (batch assembly, model and loss, as ``--compile`` compiles it) on one batch."""
    torch._dynamo.reset()
    objective.compile(dynamic=False)
    draws = trainer.task.draw(128, "train", trainer.task.make_generator(0))
    return compiled_launches(lambda: objective(draws).backward())


def compiled_launches(step: Callable[[], None]) -> tuple[int, int]:
    """``(fused, library)`` kernel launches of every graph inductor compiles for ``step``."""
    _, codes = run_and_get_code(step)
    counts = [launches(code) for code in codes]
    return sum(f for f, _ in counts), sum(lib for _, lib in counts)


def group_launches(config: dict, seeds: int, device: str) -> tuple[int, int]:
    """Kernel launches of a seed group's compiled forward and backward (its objective, as
    ``--seeds ... --compile`` compiles it) on one batch per seed."""
    configs = seed_configs(config, list(range(seeds)))
    group = SeedGroup([Trainer(None, c, device=device, quiet=True) for c in configs])
    task = group.trainers[0].task
    draws = task.draw_seeds(128, "train", [task.make_generator(s) for s in range(seeds)])
    torch._dynamo.reset()
    objective = torch.compile(SeedGroupObjective(group.trainers[0].model, task), dynamic=False)
    return compiled_launches(lambda: objective(group.params, group.buffers, draws).sum().backward())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="all", choices=["fuzzy-logic", "sraven", "all"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seeds", type=int, default=1, help="count a seed group of N")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds={args.seeds} must be at least 1")
    device = resolve_device(args.device)
    tasks = ["fuzzy-logic", "sraven"] if args.task == "all" else [args.task]
    print(
        f"kernel launches per compiled forward + backward on {device}, torch "
        f"{torch.__version__}, reference sizes, batch 128 (fused + library = total)\n"
    )
    if args.seeds > 1:
        header = f"{'one run':>20}{f'group of {args.seeds}':>20}{f'{args.seeds} runs':>9}"
        print(f"{'task':<12}{'variant':<9}{header}")
    else:
        print(f"{'task':<12}{'variant':<9}{'latentlens':>20}{'plain twin':>20}{'ratio':>8}")
    for task, variant, config in reference_configs(tasks, "fp32"):
        trainer = Trainer(None, config, device=str(device), quiet=True)
        ours = step_launches(trainer, TrainingObjective(trainer.model, trainer.task))
        if args.seeds > 1:
            group = group_launches(config, args.seeds, str(device))
            cells = [f"{f} + {lib} = {f + lib}" for f, lib in (ours, group)]
            runs = args.seeds * sum(ours)
            print(f"{task:<12}{variant:<9}{cells[0]:>20}{cells[1]:>20}{runs:>9}")
            continue
        twin = twin_of(trainer.model, trainer.model_cfg)
        plain = step_launches(trainer, PlainObjective(twin, trainer.task))
        cells = [f"{f} + {lib} = {f + lib}" for f, lib in (ours, plain)]
        ratio = sum(ours) / sum(plain)
        print(f"{task:<12}{variant:<9}{cells[0]:>20}{cells[1]:>20}{ratio:>8.2f}")


if __name__ == "__main__":
    main()

"""Training steps per second of the Trainer against the official implementation's figures.

For softmax, linear and HYLA on fuzzy logic and SRAVEN at the reference's default sizes and
batch 128, it times the Trainer's whole step (data made on the device, forward, backward,
fused AdamW) beside a plain-PyTorch twin of the model with the same step, on this machine,
and prints both next to the official JAX code's steps/s from docs/methods/numbers.md.

The official CPU figures were taken on another 2-core machine, side by side with a plain
PyTorch twin (36-37 steps/s softmax, 33-34 HYLA there). Where that twin's figure is known,
``calibrated`` carries the ratio over to the official machine:
(latentlens / twin, both here) x (twin / official, both there). Targets: >= 1.5x the
official steps/s on a CPU, >= 3x on a GPU.

    python benchmarks/speed/train_throughput.py [--task fuzzy-logic|sraven|all] [--device auto]
                                          [--steps 60] [--compile] [--cuda-graphs]
                                          [--precision fp32|tf32|bf16] [--seeds N]

``--seeds N`` times instead N seeds trained at once in one process (``SeedGroup``: one
vmapped step; with ``--compile`` and ``--cuda-graphs`` compiled and captured as a single
run's) against one run in the same mode, and reports seed-steps per second (N x the
group's steps/s), the throughput of a seed sweep, beside the official steps/s of one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.plain_twin import PlainObjective, twin_of  # noqa: E402

from latentlens.devices import resolve_device  # noqa: E402
from latentlens.training import (
    PRECISIONS,  # noqa: E402
    SeedGroup,
    TrainConfig,
    Trainer,
    model_for_task,
    seed_configs,
)
from latentlens.training.graphs import GraphedStep  # noqa: E402

VARIANTS = ("softmax", "linear", "hyla")
# docs/methods/numbers.md: official JAX steps/s, and the plain twin beside it.
OFFICIAL = {
    ("cpu", "fuzzy-logic"): {"softmax": 22.0, "linear": 25.0, "hyla": 17.0},
    ("cuda", "fuzzy-logic"): {"softmax": 346.0, "linear": 322.0, "hyla": 333.0},
    ("cuda", "sraven"): {"softmax": 205.0, "linear": 199.0, "hyla": 215.0},
}
REFERENCE_TWIN = {("cpu", "fuzzy-logic"): {"softmax": 36.5, "hyla": 33.5}}
TARGET = {"cpu": 1.5, "cuda": 3.0}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_steps_per_second(
    steps: dict[str, Callable[[], object]], device: torch.device, total: int, rounds: int = 5
) -> dict[str, float]:
    """Median steps/s of each step function over ``rounds`` interleaved rounds, so that
    drifts of a shared machine hit every side alike."""
    for step in steps.values():
        for _ in range(5):
            step()
    per_round = max(total // rounds, 1)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            synchronize(device)
            start = time.perf_counter()
            for _ in range(per_round):
                step()
            synchronize(device)
            rates[name].append(per_round / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def reference_configs(tasks: list[str], precision: str) -> Iterator[tuple[str, str, dict]]:
    """``(task, variant, config)`` of every timed model: the reference's size, batch 128."""
    for task in tasks:
        for variant in VARIANTS:
            config = Trainer.resolve_config(
                task,
                model_for_task(task, attention=variant),
                TrainConfig.for_task(task, batch_size=128, precision=precision),
            )
            yield task, variant, config


def twin_step(trainer: Trainer) -> Callable[[], torch.Tensor]:
    """The same step with the plain twin in place of the hooked model."""
    twin = twin_of(trainer.model, trainer.model_cfg).train()
    objective = PlainObjective(twin, trainer.task)
    if trainer.compiled:
        objective.compile(dynamic=False)
    graphed = trainer.graphed is not None
    lr = torch.tensor(trainer.train_cfg.lr, device=trainer.device)
    optimizer = torch.optim.AdamW(
        twin.parameters(), lr=lr, weight_decay=0.1, fused=True, capturable=graphed
    )
    generator = trainer.task.make_generator(0)

    def compute() -> torch.Tensor:
        draws = trainer.task.draw(trainer.train_cfg.batch_size, "train", generator)
        with trainer.precision_scope():
            loss = objective(draws)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def zero_grad() -> None:
        optimizer.zero_grad(set_to_none=True)

    if graphed:
        return GraphedStep(compute, zero_grad, generators=[generator])

    def step() -> torch.Tensor:
        zero_grad()
        return compute()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="all", choices=["fuzzy-logic", "sraven", "all"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per model")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--cuda-graphs", action="store_true", help="capture each whole step")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--seeds", type=int, default=1, help="time N seeds trained at once")
    args = parser.parse_args()
    device = resolve_device(args.device)
    if args.seeds > 1:
        seed_sweep(args, device)
        return
    kind = device.type
    tasks = ["fuzzy-logic", "sraven"] if args.task == "all" else [args.task]
    print(
        f"training throughput on {device} ({torch.get_num_threads()} threads), torch "
        f"{torch.__version__}, batch 128, {args.precision}, compile={args.compile}, "
        f"cuda_graphs={args.cuda_graphs}, "
        f"{args.steps} timed steps in 5 interleaved rounds (median); "
        f"target >= {TARGET[kind]}x the official steps/s\n"
    )
    header = (f"{'task':<12}{'variant':<9}{'latentlens':>11}{'twin here':>11}{'ll/twin':>9}"
              f"{'official':>10}{'ll/official':>13}{'calibrated':>12}")  # fmt: skip
    print(header)
    for task, variant, config in reference_configs(tasks, args.precision):
        trainer = Trainer(
            None,
            config,
            device=str(device),
            quiet=True,
            compile=args.compile,
            cuda_graphs=args.cuda_graphs,
        )
        rates = interleaved_steps_per_second(
            {"ours": trainer.train_step, "twin": twin_step(trainer)}, device, args.steps
        )
        ours, twin = rates["ours"], rates["twin"]
        official = OFFICIAL.get((kind, task), {}).get(variant)
        reference_twin = REFERENCE_TWIN.get((kind, task), {}).get(variant)
        direct = f"{ours / official:.2f}x" if official else "n/a"
        calibrated = (
            f"{ours / twin * reference_twin / official:.2f}x"
            if official and reference_twin
            else "n/a"
        )
        print(
            f"{task:<12}{variant:<9}{ours:>11.1f}{twin:>11.1f}{ours / twin:>9.2f}"
            f"{official or float('nan'):>10.0f}{direct:>13}{calibrated:>12}"
        )
    print(
        "\nofficial: docs/methods/numbers.md (JAX; CPU figures exist for fuzzy logic "
        "only). calibrated = ll/twin here x twin/official on the official machine."
    )


def seed_sweep(args: argparse.Namespace, device: torch.device) -> None:
    """Seed-steps per second of a SeedGroup of ``args.seeds`` against one run, both in
    the mode of ``--compile`` and ``--cuda-graphs``."""
    tasks = ["fuzzy-logic", "sraven"] if args.task == "all" else [args.task]
    print(
        f"{args.seeds} seeds at once vs one run on {device} ({torch.get_num_threads()} "
        f"threads), torch {torch.__version__}, batch 128 per seed, {args.precision}, "
        f"compile={args.compile}, cuda_graphs={args.cuda_graphs}; {args.steps} timed steps "
        "in 5 interleaved rounds (median)\n"
    )
    print(f"{'task':<12}{'variant':<9}{'one run':>9}{'group':>8}{'seed-steps/s':>14}"
          f"{'gain':>7}{'official':>10}{'vs official':>13}")  # fmt: skip
    modes = dict(compile=args.compile, cuda_graphs=args.cuda_graphs)
    for task, variant, config in reference_configs(tasks, args.precision):
        single = Trainer(None, config, device=str(device), quiet=True, **modes)
        group = SeedGroup(
            [
                Trainer(None, seeded, device=str(device), quiet=True)
                for seeded in seed_configs(config, range(args.seeds))
            ],
            **modes,
        )
        rates = interleaved_steps_per_second(
            {"one": single.train_step, "group": group.train_step}, device, args.steps
        )
        seed_steps = rates["group"] * args.seeds
        official = OFFICIAL.get((device.type, task), {}).get(variant)
        versus = f"{seed_steps / official:.2f}x" if official else "n/a"
        print(
            f"{task:<12}{variant:<9}{rates['one']:>9.1f}{rates['group']:>8.1f}"
            f"{seed_steps:>14.1f}{seed_steps / rates['one']:>6.2f}x"
            f"{official or float('nan'):>10.0f}{versus:>13}"
        )


if __name__ == "__main__":
    main()

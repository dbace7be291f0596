"""The host-side parts of a training step, timed inside the loop, beside PyTorch's way.

Python run between the compiled forward and backward passes runs slower than the same
code timed alone: it follows a backward pass that has filled the caches with activations
and gradients. So each part of a CPU step is timed here where the loop runs it: the
learning rate, the gradients set to None, the batch drawn, the compiled forward and the
backward pass, the optimizer's step, and the loop's bookkeeping of the loss (its finite
check and running mean). Steps alternate between latentlens's loop and the reference, the
same step with PyTorch's ``optimizer.zero_grad(set_to_none=True)`` and the loss checked
and summed by tensor ops every step (the loop before commit 17583da), and the medians
over blocks of steps are printed with their ratio.

    python benchmarks/speed/loop_phases.py [--task fuzzy-logic] [--attention softmax]
        [--steps 400] [--blocks 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch

from latentlens.training import TrainConfig, Trainer, model_for_task
from latentlens.training.loop import LOG_EVERY, NO_BAD_STEP, drop_gradients, first_nonfinite

WARMUP = 30  # compiled and warm after these steps


class Phases:
    """One step's parts on ``trainer``, each timed into ``seconds[name]``."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.seconds: dict[str, float] = defaultdict(float)
        self.window: list[torch.Tensor] = []  # latentlens's loop: losses since the check
        self.first_bad = torch.full((), NO_BAD_STEP, dtype=torch.long)  # the reference's
        self.running = torch.zeros(())

    def timed(self, name: str, part: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = part()
        self.seconds[name] += time.perf_counter() - start
        return result

    def step(self, reference: bool) -> None:
        trainer = self.trainer
        self.timed(
            "learning rate", lambda: trainer.lr.fill_(trainer.train_cfg.learning_rate(trainer.step))
        )
        if reference:
            self.timed("gradients to None", lambda: trainer.optimizer.zero_grad(set_to_none=True))
        else:
            self.timed("gradients to None", lambda: drop_gradients(trainer.optimizer))
        draws = self.timed(
            "draw",
            lambda: trainer.task.draw(
                trainer.train_cfg.batch_size, "train", trainer.data_generator
            ),
        )
        with trainer.precision_scope():
            loss = self.timed(
                "forward (compiled)", lambda: trainer.objective(trainer.dist.rows(draws))
            )
        self.timed("backward", loss.backward)
        self.timed("optimizer step", trainer.optimizer_step)
        trainer.step += 1
        self.timed("loss bookkeeping", lambda: self.book(loss.detach(), reference))

    def book(self, loss: torch.Tensor, reference: bool) -> None:
        """The loop's finite check and running loss, as it is or as the reference's."""
        trainer, checks = self.trainer, self.trainer.step % LOG_EVERY == 0
        if reference:
            bad = ~torch.isfinite(loss) & (self.first_bad == NO_BAD_STEP)
            self.first_bad = torch.where(bad, trainer.step, self.first_bad)
            self.running = self.running + loss
            if checks:
                trainer.check_finite(self.first_bad)
                self.running = torch.zeros_like(self.running)
            return
        self.window.append(loss)
        if checks:
            losses = torch.stack(self.window)
            trainer.check_finite(first_nonfinite(losses, trainer.step - len(self.window) + 1))
            float(losses.sum())
            self.window = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--steps", type=int, default=400, help="steps a block, alternating")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args(argv)
    config = Trainer.resolve_config(
        args.task,
        model_for_task(args.task, attention=args.attention),
        TrainConfig.for_task(args.task),
    )
    trainer = Trainer(None, config, device="cpu", compile=True, fused=True, quiet=True)
    for _ in range(WARMUP):
        trainer.train_step()
    ours, reference = Phases(trainer), Phases(trainer)
    per_block: dict[str, dict[str, list[float]]] = {
        "latentlens": defaultdict(list),
        "reference": defaultdict(list),
    }
    for _ in range(args.blocks):
        for phases in (ours, reference):
            phases.seconds.clear()
        for index in range(args.steps):
            (reference if index % 2 else ours).step(reference=bool(index % 2))
        for label, phases in (("latentlens", ours), ("reference", reference)):
            for name, seconds in phases.seconds.items():
                per_block[label][name].append(seconds / (args.steps // 2) * 1e6)
    print(f"{args.task} {args.attention}, fused-compile, {torch.get_num_threads()} threads, "
          f"{args.blocks} blocks of {args.steps} steps, alternating; median us a step")  # fmt: skip
    print(f"{'part':22}{'latentlens':>12}{'reference':>12}{'ref/ours':>9}")
    total = {label: 0.0 for label in per_block}
    for name in per_block["latentlens"]:
        ours_us = statistics.median(per_block["latentlens"][name])
        theirs_us = statistics.median(per_block["reference"][name])
        total["latentlens"] += ours_us
        total["reference"] += theirs_us
        print(f"{name:22}{ours_us:12.1f}{theirs_us:12.1f}{theirs_us / ours_us:8.2f}x")
    print(f"{'the step':22}{total['latentlens']:12.1f}{total['reference']:12.1f}"
          f"{total['reference'] / total['latentlens']:8.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

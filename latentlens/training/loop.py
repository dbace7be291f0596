"""The training loop of a :class:`~latentlens.training.trainer.Trainer`: the step (drawn,
forward, backward, clipped, updated; capturable in a CUDA graph), the progress line, the
divergence checks, evaluations and checkpoints at their steps, the wall-time budget, and
the thread count following the machine's load between steps where the run's numbers
allow (:mod:`latentlens.training.load_following`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from latentlens.kernels.linear import use_weight_gradients, weight_gradients
from latentlens.progress import progress_bar
from latentlens.training.checkpoint import list_checkpoints
from latentlens.training.load_following import LoadFollower
from latentlens.training.step_setup import precision_scope

LOG_EVERY = 25
NO_BAD_STEP = 2**62


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


class TrainingLoop:
    """The loop's part of :class:`~latentlens.training.trainer.Trainer` (which sets the
    attributes it reads: model, objective or its traced step, optimiser, task, data
    generator, step)."""

    def require_training(self, doing: str) -> None:
        """Refuse, in one line, to ``doing`` with a trainer built for analysis alone
        (``trains=False``, :meth:`~latentlens.training.Trainer.load`): it has no optimiser."""
        if self.optimizer is None:
            run = self.run_dir.path if self.run_dir is not None else "RUN_DIR"
            raise RuntimeError(
                f"this Trainer was loaded for analysis (Trainer.load) and has no optimiser, so "
                f"it cannot {doing}; continue the run with Trainer.resume('{run}') or "
                f"`latentlens train --resume {run}`"
            )

    def precision_scope(self) -> contextlib.AbstractContextManager:
        """The run's arithmetic (:func:`precision_scope`) for the code run inside it."""
        return precision_scope(self.train_cfg.precision, self.device, self.graphed is not None)

    def train_step(self) -> torch.Tensor:
        """One optimisation step; returns this rank's loss (on the device, no host sync)."""
        self.lr.fill_(self.train_cfg.learning_rate(self.step))
        # this run's engine, whatever another trainer in the process set since (checked once)
        if self.weight_gradients is not None and weight_gradients() != self.weight_gradients:
            use_weight_gradients(self.weight_gradients)
        if self.graphed is not None:
            loss = self.graphed()
        else:
            drop_gradients(self.optimizer)
            loss = self.compute_step()
        self.step += 1
        return loss

    def compute_step(self) -> torch.Tensor:
        """Draw a batch, forward, backward, clip and update (gradients must be None or
        zero before); returns the loss. Capturable in a CUDA graph."""
        draws = self.task.draw(self.train_cfg.batch_size, "train", self.data_generator)
        if self.traced is not None:  # forward and backward in one compiled call
            loss = self.traced(draws)
        else:
            with self.precision_scope():
                loss = self.objective(self.dist.rows(draws))
            loss.backward()
        if self.train_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_cfg.grad_clip)
        self.optimizer_step()
        return loss.detach()

    def train(self) -> list[dict[str, Any]]:
        """Run to ``train.steps``; returns the last evaluation's records. The run
        directory's lock is released when it returns or fails."""
        self.require_training("train")
        try:
            return self._train()
        finally:
            self.close()

    def follow_the_load(self) -> LoadFollower | None:
        """A :class:`LoadFollower` over the run's thread counts where it has several (its
        step computes the same numbers on each) and runs on the CPU in one process; else
        None (the run keeps its count)."""
        counts = self.train_cfg.thread_counts
        if self.device.type != "cpu" or self.dist.enabled or len(counts) < 2:
            return None
        return LoadFollower(counts)

    def train_seconds(self) -> float | None:
        """Wall seconds of training behind the current state, from step 0: those recorded
        in the checkpoint it resumed from plus this process's (its share in a seed group),
        evaluations and checkpoints included; None where the checkpoint recorded none."""
        if self.seconds_before is None or self.training_since is None:
            return self.seconds_before
        elapsed = time.monotonic() - self.training_since
        return self.seconds_before + self.seconds_share * elapsed

    def _train(self) -> list[dict[str, Any]]:
        cfg = self.train_cfg
        self.model.train()
        self.training_since = time.monotonic()
        last_records: list[dict[str, Any]] = []
        # the losses since the last check, checked and averaged together every LOG_EVERY
        # steps: one pass of a few ops, not several tiny ops a step (100 us of a CPU step)
        window: list[torch.Tensor] = []
        if self.step == 0 and self.dist.is_main:
            for callback in self.callbacks:
                callback.on_start(self)
            self.evaluate_initialisation()
        bar = progress_bar(
            total=cfg.steps, initial=self.step, disable=self.quiet, desc="train", dynamic_ncols=True
        )
        clock = BudgetClock(self.time_budget, self.step)
        self.load_follower = self.follow_the_load()
        with bar:
            while self.step < cfg.steps:
                loss = self.train_step()
                if self.load_follower is not None:
                    self.load_follower.after_step(self.step)
                window.append(loss)
                for callback in self.callbacks:
                    callback.on_step(self, self.step, loss)
                at_eval = self.step % cfg.eval_every == 0 or self.step == cfg.steps
                if self.step % LOG_EVERY == 0 or at_eval:
                    losses = torch.stack(window)
                    self.check_finite(first_nonfinite(losses, self.step - len(window) + 1))
                    mean = self.dist.mean(losses.sum()).item() / len(window)
                    postfix = {"loss": f"{mean:.4g}"}
                    if self.load_follower is not None:  # the count may change: shown
                        postfix["threads"] = str(torch.get_num_threads())
                    bar.set_postfix(postfix)
                    window = []
                bar.update(1)
                if at_eval:
                    with clock.timing_checkpoint():
                        last_records = self.evaluate_and_checkpoint()
                    bar.set_postfix_str(_summary(last_records))
                checks = clock.budget is not None and (at_eval or self.step % LOG_EVERY == 0)
                if checks and self.step < cfg.steps and self.budget_spent(clock):
                    if not at_eval:
                        self.checkpoint(evaluate=False)
                    self.stopped_at = self.step
                    return last_records
        for callback in self.callbacks:
            callback.on_end(self)
        return last_records

    def budget_spent(self, clock: BudgetClock) -> bool:
        """Whether any rank's clock says the time budget is spent (a collective)."""
        left = torch.tensor(int(not clock.spent(self.step)), device=self.device)
        return int(self.dist.minimum(left)) == 0

    def check_finite(self, first_bad: torch.Tensor) -> None:
        bad_step = int(self.dist.minimum(first_bad))
        if bad_step == NO_BAD_STEP:
            return
        raise TrainingDiverged(self.diverged_message(f"the training loss at step {bad_step}"))

    def diverged_message(self, what: str) -> str:
        """What diverged, the last good checkpoint and the command that continues from it."""
        found = list_checkpoints(self.run_dir.checkpoints)
        where = (f"the last good checkpoint is step {found[-1][0]} ({found[-1][1]})" if found
                 else "there is no checkpoint yet (it restarts from step 0)")  # fmt: skip
        lower = f"{self.train_cfg.lr / 10:g}"
        return (
            f"{what} became NaN or infinite; the run stopped and {where}. Continue with a "
            f"lower learning rate: latentlens train --resume {self.run_dir.path} --lr {lower}"
        )


def drop_gradients(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``, without its profiler label and dynamo
    guard: in the loop of a CPU step at T = 16, after the backward pass, those took about
    100 us a step, the gradients' release 20-40."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            parameter.grad = None


def first_nonfinite(losses: torch.Tensor, first_step: int) -> torch.Tensor:
    """The step of the first NaN or infinite loss of ``losses`` ``[steps, ...]`` (those of
    steps ``first_step``, ``first_step + 1``, ...), else :data:`NO_BAD_STEP`, for each of
    the trailing entries (a seed group's runs): ``[...]`` on their device, read without
    waiting for it."""
    bad = ~torch.isfinite(losses)
    return torch.where(bad.any(0), first_step + bad.int().argmax(0), NO_BAD_STEP)


def _summary(records: list[dict[str, Any]]) -> str:
    parts = []
    for record in records:
        metric = next((k for k in ("r2", "accuracy") if k in record), "loss")
        parts.append(f"{record['split']} {metric} {record[metric]:.3f}")
    return ", ".join(parts)


class BudgetClock:
    """When a wall-time budget (seconds from this object's creation) is spent: before the
    next stretch of steps and a checkpoint would overrun it, judged from the pace so far
    and the slowest evaluation and checkpoint seen."""

    def __init__(self, budget: float | None, step: int) -> None:
        self.budget, self.first_step = budget, step
        self.start = time.monotonic()
        self.slowest_checkpoint = 0.0

    @contextlib.contextmanager
    def timing_checkpoint(self) -> Iterator[None]:
        began = time.monotonic()
        yield
        self.slowest_checkpoint = max(self.slowest_checkpoint, time.monotonic() - began)

    def spent(self, step: int) -> bool:
        if self.budget is None:
            return False
        elapsed = time.monotonic() - self.start
        per_step = elapsed / max(step - self.first_step, 1)
        reserve = LOG_EVERY * per_step + 2 * self.slowest_checkpoint
        return elapsed + reserve > self.budget

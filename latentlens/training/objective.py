"""The training objective as one module: a batch's random draws in, the task's loss out.

``--compile`` compiles this module rather than the model alone, following PyTorch's advice
to compile the highest-level function that traces cleanly: the batch's assembly from its
draws (:meth:`Task.assemble`) and the loss and its backward then fuse into the model's
kernels instead of running as separate launches. Under DistributedDataParallel
the compiled objective is what DDP wraps (PyTorch's advice for compiling with DDP), so one
code path serves one process and many. :class:`SeedGroupObjective` is the same for a seed
group (``--seeds``): every seed's batch assembled in one pass, then the vmapped model.

The model predicts only the positions the loss reads (:func:`prediction_kwargs`): on fuzzy
logic the last of 16, on SRAVEN the last 4 of 36, so its last block computes its queries,
MLP and readout there alone.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, vmap

from latentlens.tasks import Task
from latentlens.tasks.base import Batch, Draws


def inductor_options() -> dict[str, bool]:
    """Inductor's settings for compiling a training objective (``torch.compile``'s
    ``options``): no comprehensive padding. That padding (on by default for CUDA, off on
    the CPU) gives some intermediate buffers padded strides. In torch 2.11 the backward
    of the relative-position lookup ``table[:, buckets]`` (an accumulating ``index_put``)
    read one such buffer with padded strides that its allocation lacked: HYLA's compiled
    gradients were wrong on CUDA, and under deterministic algorithms the same call failed
    with an out-of-bounds view. Without it they are the eager ones to ~5e-6
    (benchmarks/results/h200_2026-11-27)."""
    import torch._inductor.config

    return (
        {"comprehensive_padding": False}
        if hasattr(torch._inductor.config, "comprehensive_padding")
        else {}
    )


class TrainingObjective(torch.nn.Module):
    """``draws -> loss``: the task's loss of ``model``'s predictions (cast to float32, as
    the metrics are computed) on the training batch that ``draws`` (from
    :meth:`Task.draw`) make. Holds ``model`` as its only submodule, so its parameters are
    the model's."""

    def __init__(self, model: torch.nn.Module, task: Task) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, draws: Draws) -> torch.Tensor:
        batch = self.task.assemble(draws, "train")
        return self.task.loss(predict(self.model, self.task, batch).float(), batch)


class SeedGroupObjective:
    """``(params, buffers, draws) -> losses [seeds]``: a seed group's training objective,
    what its ``--compile`` compiles, as :class:`TrainingObjective` is one run's. Every
    seed's batch is assembled from the stacked ``draws`` of :meth:`Task.draw_seeds` in one
    pass, then ``model`` runs on each seed's parameters and buffers (``{name: [seeds,
    ...]}``) and batch in one vmapped functional call, and each seed's loss is its task
    loss (dropout masks drawn per seed: ``randomness="different"``)."""

    def __init__(self, model: torch.nn.Module, task: Task) -> None:
        self.model = model
        self.task = task
        self._losses = vmap(self._loss_of_one, randomness="different")

    def _loss_of_one(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        inputs: torch.Tensor,
        targets: torch.Tensor,
        labels: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        batch = Batch(inputs, targets, labels)
        predictions = functional_call(
            self.model,
            (params, buffers),
            self.task.model_inputs(batch),
            prediction_kwargs(self.task),
        )
        return self.task.loss(predictions.float(), batch)

    def __call__(
        self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], draws: Draws
    ) -> torch.Tensor:
        batch = self.task.assemble_seeds(draws, "train")
        return self._losses(params, buffers, batch.inputs, batch.targets, batch.labels)


def predict(model: torch.nn.Module, task: Task, batch: Batch) -> torch.Tensor:
    """``model``'s predictions on ``batch`` at the positions ``task``'s loss and metrics
    read (:func:`prediction_kwargs`)."""
    return model(*task.model_inputs(batch), **prediction_kwargs(task))


def prediction_kwargs(task: Task) -> dict[str, int]:
    """The keyword arguments that make a model predict only the positions ``task``'s loss
    and metrics read (:attr:`Task.loss_positions`): the same loss and gradients for less
    work. Empty for a task that reads every position."""
    return {} if task.loss_positions is None else {"last_positions": task.loss_positions}

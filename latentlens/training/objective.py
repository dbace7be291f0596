"""The training objective as one module: a batch's random draws in, the task's loss out.

``--compile`` compiles this module rather than the model alone, following PyTorch's advice
to compile the highest-level function that traces cleanly: the batch's assembly from its
draws (:meth:`Task.assemble`) and the loss and its backward then fuse into the model's
kernels instead of running as separate launches. Under DistributedDataParallel
the compiled objective is what DDP wraps (PyTorch's advice for compiling with DDP), so one
code path serves one process and many.

The model predicts only the positions the loss reads (:func:`prediction_kwargs`): on fuzzy
logic the last of 16, on SRAVEN the last 4 of 36, so its last block computes its queries,
MLP and readout there alone.
"""

from __future__ import annotations

import torch

from latentlens.tasks import Task
from latentlens.tasks.base import Batch, Draws


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


def predict(model: torch.nn.Module, task: Task, batch: Batch) -> torch.Tensor:
    """``model``'s predictions on ``batch`` at the positions ``task``'s loss and metrics
    read (:func:`prediction_kwargs`)."""
    return model(*task.model_inputs(batch), **prediction_kwargs(task))


def prediction_kwargs(task: Task) -> dict[str, int]:
    """The keyword arguments that make a model predict only the positions ``task``'s loss
    and metrics read (:attr:`Task.loss_positions`): the same loss and gradients for less
    work. Empty for a task that reads every position."""
    return {} if task.loss_positions is None else {"last_positions": task.loss_positions}

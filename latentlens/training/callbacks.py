"""Training callbacks and the built-in recorder of hooked quantities over training."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save

from latentlens.training.checkpoint import atomic_write_bytes

if TYPE_CHECKING:
    from latentlens.training.trainer import Trainer


class Callback:
    """Hooks into the loop; override what you need. ``step`` counts finished steps."""

    def on_step(self, trainer: Trainer, step: int, loss: torch.Tensor) -> None:
        """After every optimisation step (``loss`` stays on the device: no host sync)."""

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        """After every evaluation, before its checkpoint is written."""

    def on_end(self, trainer: Trainer) -> None:
        """When training finishes."""

    def on_resume(self, trainer: Trainer, step: int) -> None:
        """When a run resumes from the checkpoint of ``step``."""


def batch_mean(activation: torch.Tensor) -> torch.Tensor:
    """Default reduction: the mean over the batch dimension."""
    return activation.float().mean(dim=0)


def matching_hooks(hook_names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The hook names (in the model's order) that match any of ``patterns``: exact names
    or shell-style patterns (``blocks.*.attn.hook_pattern``; ``*`` also matches dots).
    A pattern that matches nothing is an error naming some of the hooks there are."""
    hook_names = list(hook_names)
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in hook_names):
            raise ValueError(
                f"train.track: {pattern!r} matches no hook of this model; its hooks include "
                f"{hook_names[:4]} (`latentlens inspect` lists every hook and shape)"
            )
    return [name for name in hook_names if any(fnmatchcase(name, p) for p in patterns)]


class TrackedArrays(Callback):
    """Arrays recorded at every evaluation into ``tracking/{name}.safetensors``: tensors
    ``steps`` ``[n]`` and ``values`` ``[n, ...]``. On resume, records after the checkpoint's
    step are dropped, so a resumed run's tracking equals an uninterrupted one's."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.steps: list[int] = []
        self.values: dict[str, list[torch.Tensor]] = {name: [] for name in self.names}

    @staticmethod
    def file_name(name: str) -> str:
        return f"{name}.safetensors"

    def record(self, trainer: Trainer, step: int, values: dict[str, torch.Tensor]) -> None:
        self.steps.append(step)
        for name in self.names:
            self.values[name].append(values[name].detach().float().cpu())
        directory = trainer.run_dir.tracking
        directory.mkdir(parents=True, exist_ok=True)
        for name in self.names:
            tensors = {
                "steps": torch.tensor(self.steps, dtype=torch.long),
                "values": torch.stack(self.values[name]).contiguous(),
            }
            atomic_write_bytes(directory / self.file_name(name), save(tensors))

    def on_resume(self, trainer: Trainer, step: int) -> None:
        for name in self.names:
            path = trainer.run_dir.tracking / self.file_name(name)
            if not path.is_file():
                continue
            stored = load_file(str(path))
            keep = stored["steps"] <= step
            self.steps = stored["steps"][keep].tolist()
            self.values[name] = list(stored["values"][keep])


class QuantityRecorder(TrackedArrays):
    """Record ``compute(trainer)`` (a tensor, e.g. a function of the weights such as the
    encoder-decoder routing matrix) as ``tracking/{name}.safetensors``."""

    def __init__(self, name: str, compute: Callable[[Trainer], torch.Tensor]) -> None:
        super().__init__([name])
        self.compute = compute

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        self.record(trainer, step, {self.names[0]: self.compute(trainer)})


class ActivationRecorder(TrackedArrays):
    """Record hooked quantities at every evaluation into ``tracking/{name}.safetensors``.

    For each hook name, the activation on a fixed batch of ``split`` is reduced (default:
    mean over the batch; e.g. the mean attention pattern ``[head, query, key]`` of a layer)
    and stored with its step: tensors ``steps`` ``[n]`` and ``values`` ``[n, ...]``. On resume,
    records after the checkpoint's step are dropped, so a resumed run's tracking equals an
    uninterrupted one's.
    """

    def __init__(
        self,
        hook_names: Sequence[str],
        split: str = "test",
        examples: int = 256,
        reduce: Callable[[torch.Tensor], torch.Tensor] = batch_mean,
        seed: int = 12345,
    ) -> None:
        if not hook_names:
            raise ValueError("ActivationRecorder needs at least one hook name")
        super().__init__(hook_names)
        self.hook_names = list(hook_names)
        self.split, self.examples, self.reduce, self.seed = split, examples, reduce, seed

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        unknown = [n for n in self.hook_names if n not in trainer.model.hook_dict]
        if unknown:
            raise ValueError(
                f"ActivationRecorder: unknown hook names {unknown}; the model has "
                f"e.g. {sorted(trainer.model.hook_dict)[:6]}"
            )
        generator = trainer.task.make_generator(self.seed)
        batch = trainer.task.sample(self.examples, self.split, generator)
        was_training = trainer.model.training
        trainer.model.eval()
        with torch.no_grad():
            _, cache = trainer.model.run_with_cache(
                *trainer.task.model_inputs(batch), names_filter=lambda name: name in self.hook_names
            )
        trainer.model.train(was_training)
        self.record(trainer, step, {name: self.reduce(cache[name]) for name in self.hook_names})

"""Training callbacks and the built-in recorder of hooked quantities over training."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import torch

from latentlens.models import hook_axes
from latentlens.training.checkpoint import atomic_write_bytes
from latentlens.training.tracked_file import load_tracked, tracked_bytes

if TYPE_CHECKING:
    from latentlens.training.trainer import Trainer


class Callback:
    """Hooks into the loop; override what you need. ``step`` counts finished steps."""

    def on_start(self, trainer: Trainer) -> None:
        """When a new run starts training, before its first step (the initialisation,
        step 0); on the process that writes the run directory."""

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
    """Arrays recorded at the start of a run (step 0) and at every evaluation into
    ``tracking/{name}.safetensors``: tensors ``steps`` ``[n]`` and ``values`` ``[n, ...]``,
    and, where ``axes`` names them, the names of a value's axes in the file's metadata
    (``"axes"``: a JSON list, e.g. ``["head", "query", "key"]``). Subclasses say what is
    recorded in :meth:`current`. On resume, records after the checkpoint's step are
    dropped, so a resumed run's tracking equals an uninterrupted one's."""

    def __init__(
        self, names: Sequence[str], axes: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.names = list(names)
        self.axes = {name: tuple(value_axes) for name, value_axes in (axes or {}).items()}
        self.steps: list[int] = []
        self.values: dict[str, list[torch.Tensor]] = {name: [] for name in self.names}

    @staticmethod
    def file_name(name: str) -> str:
        return f"{name}.safetensors"

    def current(self, trainer: Trainer) -> dict[str, torch.Tensor]:
        """Each tracked array's value now, by name."""
        raise NotImplementedError

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        """At every evaluation, the initialisation's (step 0) included."""
        self.record(trainer, step, self.current(trainer))

    def record(self, trainer: Trainer, step: int, values: dict[str, torch.Tensor]) -> None:
        for name, value_axes in self.axes.items():
            if values[name].ndim != len(value_axes):
                raise ValueError(
                    f"tracked {name} has shape {list(values[name].shape)} but its axes are "
                    f"named {list(value_axes)}: give one name per axis of the recorded value"
                )
        self.steps.append(step)
        for name in self.names:
            self.values[name].append(values[name].detach().float().cpu())
        directory = trainer.run_dir.tracking
        directory.mkdir(parents=True, exist_ok=True)
        for name in self.names:
            file = tracked_bytes(self.steps, torch.stack(self.values[name]), self.axes.get(name))
            atomic_write_bytes(directory / self.file_name(name), file)

    def on_resume(self, trainer: Trainer, step: int) -> None:
        for name in self.names:
            path = trainer.run_dir.tracking / self.file_name(name)
            if not path.is_file():
                continue
            tracked = load_tracked(path)
            kept = [i for i, recorded in enumerate(tracked.steps) if recorded <= step]
            self.steps = [tracked.steps[i] for i in kept]
            self.values[name] = [torch.from_numpy(tracked.values[i]) for i in kept]


class QuantityRecorder(TrackedArrays):
    """Record ``compute(trainer)`` (a tensor, e.g. a function of the weights such as the
    encoder-decoder routing matrix) as ``tracking/{name}.safetensors``; ``axes`` names the
    tensor's axes."""

    def __init__(
        self,
        name: str,
        compute: Callable[[Trainer], torch.Tensor],
        axes: Sequence[str] | None = None,
    ) -> None:
        super().__init__([name], None if axes is None else {name: axes})
        self.compute = compute

    def current(self, trainer: Trainer) -> dict[str, torch.Tensor]:
        return {self.names[0]: self.compute(trainer)}


class ActivationRecorder(TrackedArrays):
    """Record hooked quantities at step 0 and every evaluation into
    ``tracking/{name}.safetensors``.

    For each hook name, the activation on a fixed batch of ``split`` is reduced (default:
    mean over the batch; e.g. the mean attention pattern ``[head, query, key]`` of a layer)
    and stored with its step: tensors ``steps`` ``[n]`` and ``values`` ``[n, ...]``. The
    batch mean's axes are the hook's contract axes without ``batch``
    (:func:`latentlens.models.hook_axes`); ``axes`` names those of another ``reduce``'s
    value, the same for every hook. On resume, records after the checkpoint's step are
    dropped, so a resumed run's tracking equals an uninterrupted one's.
    """

    def __init__(
        self,
        hook_names: Sequence[str],
        split: str = "test",
        examples: int = 256,
        reduce: Callable[[torch.Tensor], torch.Tensor] = batch_mean,
        seed: int = 12345,
        axes: Sequence[str] | None = None,
    ) -> None:
        if not hook_names:
            raise ValueError("ActivationRecorder needs at least one hook name")
        if axes is not None:
            named = dict.fromkeys(hook_names, axes)
        elif reduce is batch_mean:
            named = {n: a[1:] for n in hook_names if (a := hook_axes(n)) is not None}
        else:
            named = {}
        super().__init__(hook_names, named)
        self.hook_names = list(hook_names)
        self.split, self.examples, self.reduce, self.seed = split, examples, reduce, seed

    def current(self, trainer: Trainer) -> dict[str, torch.Tensor]:
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
        return {name: self.reduce(cache[name]) for name in self.hook_names}

"""The common task interface: a batch with its labels, named splits, seeded sampling.

A task is built from a frozen, validated config, a seed and a device. Its *split* (which
combinations of parts are trained on, held out, or never-seen) is fixed by the config's
``split_seed``; sampling draws from a ``torch.Generator`` on the task's device, so the same
seed gives the same batches on the same device, and a stream from one generator never
repeats a batch. A task knows no model: it only says what its inputs, targets and labels
are, and how to score a prediction tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch


@dataclass
class Batch:
    """One batch: model ``inputs``, ``targets`` and every ground-truth label.

    ``inputs``: ``[batch, pos, d_input]`` floats. ``targets`` and the ``labels`` are
    task-specific; each task's docstring lists their shapes.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    labels: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        """``fn`` applied to the inputs, the targets and every label."""
        return Batch(fn(self.inputs), fn(self.targets), {k: fn(v) for k, v in self.labels.items()})

    def to(self, device: torch.device | str) -> Batch:
        return self.map(lambda tensor: tensor.to(device))

    @staticmethod
    def cat(batches: Sequence[Batch]) -> Batch:
        """``batches`` joined along the batch axis; a label without a batch axis (the same
        for every example) is taken from the first."""
        first = batches[0]
        labels = {
            k: torch.cat([b.labels[k] for b in batches])
            if v.ndim and len(v) == len(first) else v
            for k, v in first.labels.items()
        }  # fmt: skip
        return Batch(torch.cat([b.inputs for b in batches]),
                     torch.cat([b.targets for b in batches]), labels)  # fmt: skip

    @staticmethod
    def stack(batches: Sequence[Batch]) -> Batch:
        """``batches`` stacked on a new leading axis (every tensor ``[len(batches), ...]``)."""
        return Batch(
            torch.stack([b.inputs for b in batches]),
            torch.stack([b.targets for b in batches]),
            {k: torch.stack([b.labels[k] for b in batches]) for k in batches[0].labels},
        )


# What :meth:`Task.draw` returns and :meth:`Task.assemble` takes: a task's random draws
# (``{name: [batch, ...]}``, see :class:`DrawnTask`), or a whole batch.
Draws = Batch | dict[str, torch.Tensor]


class Task:
    """Base class: seeded generator on a device, split names, streams of batches."""

    name: str = "task"
    splits: tuple[str, ...] = ()
    # The split and metric one number summarises a run by (a sweep's table, a summary).
    headline: ClassVar[tuple[str, str]] = ("test", "loss")
    # What each split holds, in a few words, for figure titles and tables.
    split_titles: ClassVar[dict[str, str]] = {}
    # Whether ``sample`` can be captured in a CUDA graph (no host copy or sync inside).
    graph_capturable: bool = True
    # How many final positions the loss and the metrics read; the trainer then asks the
    # model for those alone (``last_positions``). None: the model predicts every position.
    loss_positions: int | None = None

    def __init__(self, seed: int = 0, device: torch.device | str = "cpu") -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed={seed!r} is invalid: it must be an integer")
        self.seed = seed
        self.device = torch.device(device)
        self.generator = self.make_generator(seed)

    def make_generator(self, seed: int) -> torch.Generator:
        """A fresh ``torch.Generator`` on the task's device seeded with ``seed``."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(
                f"split={split!r} is unknown for {self.name}; choose one of {list(self.splits)}"
            )

    @staticmethod
    def check_batch_size(batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size={batch_size!r} is invalid: it must be a positive integer")

    def sample(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> Batch:
        """One batch of ``split``; draws from ``generator`` (default: the task's own)."""
        raise NotImplementedError

    def draw(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> Draws:
        """The random part of one batch, which :meth:`assemble` completes (the trainer
        draws outside its compiled step and assembles inside it). A task whose sampler does
        not separate its draws from their transform draws the whole batch here."""
        return self.sample(batch_size, split, generator)

    def assemble(self, draws: Draws, split: str = "train") -> Batch:
        """The batch of ``split`` that :meth:`draw`'s ``draws`` make (here: ``draws``)."""
        if not isinstance(draws, Batch):
            raise TypeError(f"{self.name} draws whole batches; got {type(draws).__name__}")
        return draws

    def sample_seeds(
        self, batch_size: int, split: str, generators: Sequence[torch.Generator]
    ) -> Batch:
        """One batch per generator, each as :meth:`sample` draws it from that generator,
        stacked on a leading seed axis: every tensor ``[seeds, batch, ...]``."""
        return self.assemble_seeds(self.draw_seeds(batch_size, split, generators), split)

    def draw_seeds(
        self, batch_size: int, split: str, generators: Sequence[torch.Generator]
    ) -> Draws:
        """The random part of :meth:`sample_seeds` (a seed group draws outside its compiled
        step and assembles inside it); here the stacked batches themselves."""
        return Batch.stack([self.sample(batch_size, split, g) for g in generators])

    def assemble_seeds(self, draws: Draws, split: str = "train") -> Batch:
        """The seeds' batches, ``[seeds, batch, ...]``, that :meth:`draw_seeds` made."""
        return self.assemble(draws, split)

    def batches(
        self, batch_size: int, split: str = "train", seed: int | None = None
    ) -> Iterator[Batch]:
        """An endless stream of batches from a generator of its own (``seed``: the task's)."""
        generator = self.make_generator(self.seed if seed is None else seed)
        while True:
            yield self.sample(batch_size, split, generator=generator)

    def labelled_batches(
        self,
        split: str,
        examples: int,
        batch_size: int = 256,
        seed: int = 0,
        **sample_options: Any,
    ) -> Iterator[Batch]:
        """``examples`` examples of ``split`` in batches of at most ``batch_size``, from a
        generator seeded with ``seed`` on the task's device (the same call gives the same
        examples); ``sample_options`` go to :meth:`sample`. What the probes read: this, with
        :meth:`model_inputs` and :meth:`metrics`, is the
        :class:`latentlens.probes.LabelledSource` protocol."""
        self.check_split(split)
        self.check_batch_size(batch_size)
        if isinstance(examples, bool) or not isinstance(examples, int) or examples <= 0:
            raise ValueError(f"examples={examples!r} is invalid: it must be a positive integer")
        generator = self.make_generator(seed)
        for start in range(0, examples, batch_size):
            size = min(batch_size, examples - start)
            yield self.sample(size, split, generator, **sample_options)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The splits a trainer evaluates, in order (default: every split)."""
        return self.splits

    def loss(self, predictions: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The training loss (a scalar) of ``predictions`` ``[batch, pos, d_output]``."""
        raise NotImplementedError

    def metrics(self, predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """The task's metrics on one batch (scalars)."""
        raise NotImplementedError

    def metric_sums(self, predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Sums over a batch that :meth:`finish_metrics` turns into the metrics of a whole
        evaluation set. Default: each batch metric times the batch size (a mean of means)."""
        size = len(batch)
        return {name: value * size for name, value in self.metrics(predictions, batch).items()}

    def finish_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:
        """The metrics of an evaluation set of ``count`` examples from the summed
        :meth:`metric_sums` of its batches."""
        return {name: total / count for name, total in sums.items()}

    def model_inputs(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """The positional arguments a model of this task takes (default: the inputs)."""
        return (batch.inputs,)

    def model_io(self) -> dict[str, int]:
        """The model sizes this task fixes: ``n_ctx``, ``d_input`` and ``d_output``."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """The split as JSON-ready data, so a run records exactly what it was trained on."""
        raise NotImplementedError


class DrawnTask(Task):
    """A task whose batch is a few random draws followed by a deterministic transform of
    each example on its own (no draw inside it, nothing mixed across examples).

    :meth:`draw` makes the draws (``{name: [batch, ...]}``), :meth:`assemble` turns them
    into the batch, and ``sample`` is the two in turn. A compiled training step then fuses
    the transform into the model's kernels, and a seed group draws each seed's numbers from
    its own generator (:meth:`draw_seeds`) and assembles all seeds in one pass
    (:meth:`assemble_seeds`, inside its compiled step; :meth:`sample_seeds` is the two):
    the same batches as one ``sample`` per seed, bit for bit, but the transform's kernels
    are launched once instead of once per seed.
    """

    def draw(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """The random draws of one batch of ``split``, each ``[batch, ...]``."""
        raise NotImplementedError

    def assemble(self, draws: dict[str, torch.Tensor], split: str = "train") -> Batch:
        raise NotImplementedError

    def sample(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> Batch:
        return self.assemble(self.draw(batch_size, split, generator), split)

    def draw_seeds(
        self, batch_size: int, split: str, generators: Sequence[torch.Generator]
    ) -> dict[str, torch.Tensor]:
        """Each generator's draws of one batch, stacked: ``{name: [seeds, batch, ...]}``."""
        per_seed = [self.draw(batch_size, split, g) for g in generators]
        return {name: torch.stack([d[name] for d in per_seed]) for name in per_seed[0]}

    def assemble_seeds(self, draws: dict[str, torch.Tensor], split: str = "train") -> Batch:
        """Every seed's batch from :meth:`draw_seeds`'s ``draws`` in one assembly."""
        seeds, batch_size = next(iter(draws.values())).shape[:2]
        batch = self.assemble({name: d.flatten(0, 1) for name, d in draws.items()}, split)
        return batch.map(lambda tensor: tensor.unflatten(0, (seeds, batch_size)))

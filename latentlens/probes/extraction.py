"""Streaming extraction: activations at chosen hook points, sliced per batch, with labels,
from any hooked model and any labelled source (:mod:`latentlens.probes.source`).

Each batch runs with a hook on every requested hook point that keeps only the requested
slice of its activation at once (by default the last position of ``[batch, pos, ...]``;
activations without a position axis, like ``hook_task_latent``, are kept whole), so a
batch never holds more than one full activation: memory is bounded by the batch size and
the slices, not by a cache of every layer. Once every requested hook has fired the
forward pass stops: nothing after the last of them (the later layers, the unembedding)
is computed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from latentlens.probes.source import HookedLike, LabelledSource, check_hooked, forward_kwargs
from latentlens.tasks import Batch

Selector = Callable[[torch.Tensor, Batch], torch.Tensor]


@dataclass
class Extraction:
    """``activations[name]`` ``[examples, ...]`` and ``labels[name]`` ``[examples, ...]``
    (labels with a batch axis, but for the model's keyword inputs), on the CPU."""

    activations: dict[str, torch.Tensor]
    labels: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return next(iter(self.labels.values())).shape[0]


def last_position(activation: torch.Tensor, batch: Batch | None = None) -> torch.Tensor:
    """``[batch, pos, ...] -> [batch, ...]`` at the last position; 2-D activations as is."""
    return activation if activation.ndim == 2 else activation[:, -1]


@torch.no_grad()
def extract(
    model: HookedLike,
    source: LabelledSource,
    split: str,
    hook_names: Sequence[str],
    examples: int,
    batch_size: int = 256,
    seed: int = 0,
    select: Mapping[str, Selector] | None = None,
    sample_options: Mapping[str, Any] | None = None,
    forward_options: Mapping[str, Any] | None = None,
    forward_examples: int | None = None,
) -> Extraction:
    """Activations of ``hook_names`` on ``examples`` examples of ``split``.

    ``model``: any hooked model (a latentlens model, a TransformerLens
    ``TransformerBridge``); ``source``: any labelled source (a latentlens ``Task``,
    :class:`~latentlens.probes.TokenPairs`; see :mod:`latentlens.probes.source`).
    ``select`` maps a hook name to a function ``(activation, batch) -> kept slice``
    (default :func:`last_position`); it sees the batch, so the slice may depend on the
    labels (e.g. where a permuted feature sits). ``sample_options`` go to the source's
    ``labelled_batches`` (a task's ``sample``, e.g. ``inputs="fixed_query"``),
    ``forward_options`` to the model's forward beside the source's own (e.g.
    ``last_positions``). The examples are drawn ``batch_size`` at a time, so the same call
    gives the same examples; ``forward_examples`` joins consecutive draws into forward
    passes of at least that many examples (the same examples, in fewer and larger passes:
    their activations equal to float rounding). The model is put in eval mode and restored.
    """
    check_hooked(model)
    _check_positive("examples", examples)
    unknown = [name for name in hook_names if name not in model.hook_dict]
    if unknown:
        raise ValueError(
            f"unknown hook names {unknown}; the model has e.g. {sorted(model.hook_dict)[:6]}"
        )
    select = dict(select or {})
    if forward_examples is not None:
        _check_positive("forward_examples", forward_examples)
    batches = source.labelled_batches(
        split, examples, batch_size, seed, **dict(sample_options or {})
    )
    if forward_examples is not None and forward_examples > batch_size:
        batches = _joined(batches, forward_examples)
    was_training = model.training
    model.eval()
    # Outputs are allocated once, at full size, and filled batch by batch: no list of
    # chunks to concatenate (which would double the peak) and no views of the caches.
    activations: dict[str, torch.Tensor] = {}
    labels: dict[str, torch.Tensor] = {}
    seen = 0
    try:
        for batch in batches:
            size = len(batch)
            inputs = source.model_inputs(batch)
            options = {**forward_kwargs(source, batch), **dict(forward_options or {})}
            kept = _slices(model, inputs, options, batch, hook_names, select)
            for name, value in kept.items():
                _fill(activations, name, value, seen, examples)
            for name, label in batch.labels.items():
                # a model input that rides in the labels (padded text's attention mask, as
                # long as its batch) is no label: its length differs from batch to batch
                if name not in options and label.ndim and label.shape[0] == size:
                    _fill(labels, name, label, seen, examples)
            seen += size
    finally:
        model.train(was_training)
    if seen != examples:
        name = type(source).__name__
        raise ValueError(f"{name} gave {seen} examples of {split!r}, not the {examples} asked for")
    return Extraction(activations, labels)


def _check_positive(name: str, value: Any) -> None:
    """Refuse, in one line, a ``value`` of argument ``name`` that is not a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}={value!r} is invalid: it must be a positive integer")


def _joined(batches: Iterable[Batch], examples: int) -> Iterator[Batch]:
    """Consecutive ``batches`` joined into batches of at least ``examples`` examples (the
    last one may have fewer), in their order."""
    pending: list[Batch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += len(batch)
        if count >= examples:
            yield Batch.cat(pending)
            pending, count = [], 0
    if pending:
        yield Batch.cat(pending)


class _EveryHookFired(Exception):
    """Raised by the last requested hook of a forward pass: the rest is not needed."""


def _slices(
    model: HookedLike,
    inputs: tuple[torch.Tensor, ...],
    options: dict[str, Any],
    batch: Batch,
    hook_names: Sequence[str],
    select: Mapping[str, Selector],
) -> dict[str, torch.Tensor]:
    """The kept slice of each of ``hook_names`` on one batch, taken as each hook fires."""
    kept: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> Any:
        def keep(activation: torch.Tensor, hook: Any) -> None:
            # a copy: a view would keep the whole activation alive
            value = select.get(name, last_position)(activation, batch)
            kept[name] = value.detach().to(torch.float32, copy=True)
            if len(kept) == len(hook_names):
                raise _EveryHookFired

        return keep

    hooks = [(name, keeper(name)) for name in hook_names]
    with contextlib.suppress(_EveryHookFired):
        model.run_with_hooks(*inputs, fwd_hooks=hooks, **options)
    missing = [name for name in hook_names if name not in kept]
    if missing:
        raise ValueError(f"the hooks {missing} did not fire in a forward pass of the model")
    return kept


def _fill(
    out: dict[str, torch.Tensor], name: str, value: torch.Tensor, start: int, total: int
) -> None:
    """Copy a batch's ``value`` into rows ``start:`` of ``out[name]`` (made on first use)."""
    if name not in out:
        out[name] = torch.empty((total, *value.shape[1:]), dtype=value.dtype)
    if out[name].shape[1:] != value.shape[1:]:
        raise ValueError(
            f"{name!r} is {list(value.shape[1:])} per example in this batch but "
            f"{list(out[name].shape[1:])} in the first: a selected slice or label must have "
            "one shape per example in every batch"
        )
    out[name][start : start + len(value)].copy_(value)

"""Interventions over ``run_with_hooks``: ablate a head, patch a query-key pair's latent
code from other examples, swap the codes of two rules. Each returns the task metric before
and after, and the change with its standard error. ``model`` is any hooked model and
``task`` any labelled source (:mod:`latentlens.probes.source`): the source's
``model_inputs`` feed the model and its ``metrics`` score the output."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import partial

import torch

from latentlens.models import pattern_hook_name
from latentlens.probes.source import (
    HookedLike,
    LabelledSource,
    forward_kwargs,
    read_positions_kwargs,
    starts_at_layer,
)
from latentlens.tasks import Batch

Hook = tuple[str, Callable]
_Z_HOOK = re.compile(r"^(.*)blocks\.(\d+)\.attn\.hook_z$")


# A change's standard error is read from its spread over this many parts of the batch.
PARTS = 16


@dataclass(frozen=True)
class InterventionResult:
    """``metric`` of the model on a batch without (``baseline``) and with the
    intervention (``intervened``); ``change = intervened - baseline``.

    ``standard_error``: of ``change``, from its spread over :data:`PARTS` equal parts of the
    batch (sample std / sqrt(parts); ``None`` for a batch of one example). For a metric
    that is a mean over examples (accuracy, fuzzy-logic R²) it is the paired standard error
    of the change; for a ratio over the batch (modular-icl R², token accuracy) a close
    estimate. A change within two of them is not told apart from sampling noise.
    """

    metric: str
    baseline: float
    intervened: float
    standard_error: float | None = None

    @property
    def change(self) -> float:
        return self.intervened - self.baseline

    def to_dict(self) -> dict[str, float | str | None]:
        return {**asdict(self), "change": self.change}


@dataclass(frozen=True)
class MetricReading:
    """A task metric on a batch (``value``) and on each of its parts (``parts`` ``[k]``)."""

    metric: str
    value: float
    parts: torch.Tensor


def rows_of(batch: Batch, index: torch.Tensor | slice) -> Batch:
    """The examples ``index`` of ``batch``: its inputs, targets and every per-example label
    (labels without a batch axis are left out)."""
    labels = {k: v[index] for k, v in batch.labels.items() if v.ndim and len(v) == len(batch)}
    return Batch(batch.inputs[index], batch.targets[index], labels)


@torch.no_grad()
def task_metric(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    hooks: list[Hook],
    metric: str | None = None,
    every_position: bool = True,
    start: tuple[int, torch.Tensor] | None = None,
) -> MetricReading:
    """``metric`` (default: the task's first, R² or accuracy) on ``batch`` with ``hooks``
    attached (eval mode, restored after), and on :data:`PARTS` contiguous parts of it, read
    off the same forward pass. ``every_position=False`` lets the model compute only the
    positions the metric reads (:func:`~latentlens.probes.source.read_positions_kwargs`),
    for hooks whose effect there does not depend on the last block's other positions
    (zeroing a head does; a mean over positions, or a pair's code at a fixed query
    index, does not). ``start`` (layer, residual stream entering it ``[batch, pos,
    d_model]``): the pass starts at that block (a model that
    :func:`~latentlens.probes.source.starts_at_layer`), for hooks from there on."""
    was_training = model.training
    model.eval()
    inputs, options = task.model_inputs(batch), forward_kwargs(task, batch)
    if start is not None:
        inputs, options["start_at_layer"] = (start[1],), start[0]
    if not every_position:
        options.update(read_positions_kwargs(model, task))
    try:
        output = model.run_with_hooks(*inputs, fwd_hooks=hooks, **options)
    finally:
        model.train(was_training)
    values = task.metrics(output, batch)
    metric = metric or next(iter(values))
    if metric not in values:
        raise ValueError(f"metric={metric!r} is not one of the task's {sorted(values)}")
    bounds = torch.linspace(0, len(batch), min(PARTS, len(batch)) + 1).long().tolist()
    parts = [
        task.metrics(output[lo:hi], rows_of(batch, slice(lo, hi)))[metric]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return MetricReading(metric, float(values[metric]), torch.stack(parts).double().cpu())


def compare(baseline: MetricReading, intervened: MetricReading) -> InterventionResult:
    """The change from ``baseline`` to ``intervened`` (the same batch) and its standard
    error from the parts."""
    changes = intervened.parts - baseline.parts
    error = float(changes.std() / len(changes) ** 0.5) if len(changes) > 1 else None
    if error is not None and not math.isfinite(error):  # a part whose metric is undefined
        error = None
    return InterventionResult(baseline.metric, baseline.value, intervened.value, error)


def measure(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    hooks: list[Hook],
    metric: str | None = None,
    every_position: bool = True,
) -> InterventionResult:
    """The metric on ``batch`` without and with ``hooks`` (``every_position``: as in
    :func:`task_metric`)."""
    baseline = task_metric(model, task, batch, [], metric, every_position)
    intervened = task_metric(model, task, batch, hooks, baseline.metric, every_position)
    return compare(baseline, intervened)


def ablation_reads_every_position(mode: str) -> bool:
    """Whether an ablation in ``mode`` needs every position computed: a mean is over
    positions, while a zeroed head changes each position alone, so the last block may
    compute only the positions the metric reads (``every_position`` of
    :func:`task_metric`)."""
    return mode == "mean"


def head_ablation_hook(model: HookedLike, layer: int, head: int, mode: str, prefix: str) -> Hook:
    """The hook that replaces head ``head``'s ``z`` in ``layer`` (see :func:`ablate_head`)."""
    if mode not in ("zero", "mean"):
        raise ValueError(f"mode={mode!r} is invalid: choose 'zero' or 'mean'")
    name = f"{prefix}blocks.{layer}.attn.hook_z"
    if name not in model.hook_dict:
        raise ValueError(f"{name} is not a hook point of this model")

    def hook(z: torch.Tensor, hook: object) -> torch.Tensor:  # z: [batch, pos, head, d_head]
        if not 0 <= head < z.shape[2]:
            raise ValueError(f"head={head} is out of range: the layer has {z.shape[2]} heads")
        z = z.clone()
        z[:, :, head] = 0.0 if mode == "zero" else z[:, :, head].mean(dim=(0, 1))
        return z

    return name, hook


def ablate_head(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    layer: int,
    head: int,
    mode: str = "zero",
    metric: str | None = None,
    prefix: str = "",
) -> InterventionResult:
    """Replace head ``head``'s output ``z`` in ``layer`` by zeros or by its mean over the
    batch and positions (``mode``: ``zero`` or ``mean``)."""
    hook = head_ablation_hook(model, layer, head, mode, prefix)
    return measure(model, task, batch, [hook], metric, ablation_reads_every_position(mode))


def head_ablation_table(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    mode: str = "zero",
    metric: str | None = None,
) -> list[dict[str, float | int | str]]:
    """Rows ``{"prefix", "layer", "head", "metric", "baseline", "intervened",
    "standard_error", "change"}``
    for every head of every self-attention layer (``hook_z`` points, whatever their
    ``prefix``: ``""``, an encoder-decoder's ``"encoder."`` and ``"decoder."``, ...). The
    baseline is measured once for the table: one forward pass per head, plus one; with
    ``mode="zero"`` each computes only the positions the metric reads
    (``every_position=False`` of :func:`task_metric`), and where the model
    :func:`~latentlens.probes.source.starts_at_layer`, a head's pass starts at its block
    from the stream the baseline's pass brought there (the same numbers, bit for bit)."""
    found = [  # in the model's order: an encoder's layers before its decoder's
        (match.group(1), int(match.group(2)), name)
        for name in model.hook_dict
        if (match := _Z_HOOK.match(name))
    ]
    if not found:
        raise ValueError("the model has no blocks.{l}.attn.hook_z hook point to ablate")
    every = ablation_reads_every_position(mode)
    # The stream entering each later block, kept from the baseline's pass: a head's
    # ablation runs from its own block on, as nothing before it changes.
    entering: dict[int, torch.Tensor] = {}
    keep = stream_keepers(model, sorted({layer for prefix, layer, _ in found if not prefix}),
                          entering)  # fmt: skip
    baseline = task_metric(model, task, batch, keep, metric, every_position=every)
    rows = []
    first = rows_of(batch, slice(0, 1))
    first_inputs, first_options = task.model_inputs(first), forward_kwargs(task, first)
    for prefix, layer, name in found:
        _, cache = model.run_with_cache(*first_inputs, names_filter=[name], **first_options)
        start = (layer, entering[layer]) if not prefix and layer in entering else None
        for head in range(cache[name].shape[2]):
            hook = head_ablation_hook(model, layer, head, mode, prefix)
            reading = task_metric(model, task, batch, [hook], baseline.metric, every, start)
            result = compare(baseline, reading)
            rows.append({"prefix": prefix, "layer": layer, "head": head, **result.to_dict()})
    return rows


def stream_keepers(
    model: HookedLike, layers: Iterable[int], store: dict[int, torch.Tensor]
) -> list[Hook]:
    """Hooks that keep the residual stream entering each block of ``layers`` after the
    first in ``store`` (layer -> ``[batch, pos, d_model]``), changing nothing: where the
    model :func:`~latentlens.probes.source.starts_at_layer`, a later pass can start there;
    elsewhere none."""
    if not starts_at_layer(model):
        return []
    return [
        (f"blocks.{layer}.hook_resid_pre", partial(_keep_in, store, layer))
        for layer in layers
        if layer > 0
    ]


def _keep_in(store: dict[int, torch.Tensor], layer: int, resid: torch.Tensor, hook: object) -> None:
    """A hook that keeps block ``layer``'s incoming stream in ``store``, changing nothing."""
    store[layer] = resid


def _pattern_hook(model: HookedLike, layer: int, prefix: str, module: str) -> str:
    name = pattern_hook_name(layer, prefix, module)
    if name not in model.hook_dict:
        raise ValueError(f"layer={layer} has no such attention ({name} is not a hook point)")
    return name


def _pattern(model: HookedLike, task: LabelledSource, batch: Batch, name: str) -> torch.Tensor:
    """The attention weights of hook ``name`` on ``batch``: ``[batch, head, query, key]``."""
    with torch.no_grad():
        _, cache = model.run_with_cache(
            *task.model_inputs(batch), names_filter=[name], **forward_kwargs(task, batch)
        )
    return cache[name]


def patch_latent_code(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    source: Batch,
    layer: int,
    query: int,
    key: int,
    metric: str | None = None,
    prefix: str = "",
    module: str = "attn",
    baseline: MetricReading | None = None,
    entering: dict[int, torch.Tensor] | None = None,
) -> InterventionResult:
    """Give every example of ``batch`` the latent code of pair (``query``, ``key``) in
    ``layer`` that the matching example of ``source`` has; every other code is untouched.
    ``prefix`` and ``module`` pick the attention as in :func:`pattern_hook_name` (e.g. an
    encoder-decoder's ``"decoder."``, ``"cross_attn"``). ``baseline``: ``task_metric(model,
    task, batch, [], metric)`` where the caller has it (one reading for every layer it
    patches; its metric is the one read), and ``entering`` the streams that reading's
    pass brought to later blocks (:func:`stream_keepers`): the patched pass starts at
    ``layer``."""
    if len(source) != len(batch):
        raise ValueError(f"source has {len(source)} examples, batch {len(batch)}: pass equal sizes")
    name = _pattern_hook(model, layer, prefix, module)
    donor = _pattern(model, task, source, name)[:, :, query, key]  # [batch, head]

    def hook(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        pattern = pattern.clone()
        pattern[:, :, query, key] = donor
        return pattern

    if baseline is None:
        return measure(model, task, batch, [(name, hook)], metric)
    start = (layer, entering[layer]) if entering and layer in entering and not prefix else None
    patched = task_metric(model, task, batch, [(name, hook)], baseline.metric, start=start)
    return compare(baseline, patched)


def swap_rule_codes(
    model: HookedLike,
    task: LabelledSource,
    batch: Batch,
    rules: torch.Tensor,
    rule_a: int,
    rule_b: int,
    layer: int,
    query: int,
    keys: torch.Tensor | int,
    metric: str | None = None,
) -> InterventionResult:
    """Examples of rule ``rule_a`` get the mean latent code that rule ``rule_b`` examples
    have at (``query``, ``keys``) in ``layer``, and vice versa; the metric is measured on
    the examples of the two rules. ``rules`` ``[batch]``; ``keys`` an int or ``[batch]``
    (per example, e.g. where a permuted feature sits)."""
    rules = rules.to(batch.inputs.device)
    chosen = (rules == rule_a) | (rules == rule_b)
    if not (rules == rule_a).any() or not (rules == rule_b).any():
        raise ValueError(
            f"the batch needs examples of both rules {rule_a} and {rule_b}; it has "
            f"{int((rules == rule_a).sum())} and {int((rules == rule_b).sum())}"
        )
    subset = rows_of(batch, chosen)
    sub_rules = rules[chosen]
    rows = torch.arange(len(subset), device=rules.device)
    key_index = torch.as_tensor(keys, device=rules.device)
    key_index = key_index[chosen] if key_index.ndim else key_index.expand(len(subset))
    name = _pattern_hook(model, layer, "", "attn")
    codes = _pattern(model, task, subset, name)[rows, :, query, key_index]  # [n, head]
    mean_a, mean_b = codes[sub_rules == rule_a].mean(0), codes[sub_rules == rule_b].mean(0)
    swapped = torch.where((sub_rules == rule_a)[:, None], mean_b, mean_a)

    def hook(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        pattern = pattern.clone()
        pattern[rows, :, query, key_index] = swapped
        return pattern

    return measure(model, task, subset, [(name, hook)], metric)

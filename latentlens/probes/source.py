"""What the probes need of a model and of a dataset: two small protocols.

A **hooked model** is anything with TransformerLens's hook interface: ``hook_dict``,
``run_with_cache(*inputs, names_filter=...)`` and ``run_with_hooks(*inputs, fwd_hooks=...)``.
latentlens's models are (they are ``HookedRootModule``\\ s); so is a TransformerLens
``TransformerBridge`` over a Hugging Face model. Latent codes are read from the hook points
``{prefix}blocks.{layer}.{module}.hook_pattern`` (``[batch, head, query, key]``).

A **labelled source** provides inputs with labels, batch by batch:

- ``splits``: the names of its splits (e.g. ``("id", "ood")``);
- ``labelled_batches(split, examples, batch_size, seed)``: an iterator of
  :class:`~latentlens.tasks.Batch` es, ``examples`` examples in all. Each batch's ``labels``
  hold ``[batch, ...]`` tensors, one row per example;
- ``model_inputs(batch)``: the positional arguments of the model's forward;
- optionally ``model_kwargs(batch)``: its keyword arguments (e.g. ``attention_mask`` for
  padded token sequences; :func:`forward_kwargs`);
- ``metrics(output, batch)``: ``{name: scalar tensor}`` of the model's output, used by the
  interventions (ablation, patching) to say what changed.

Every latentlens :class:`~latentlens.tasks.Task` is a labelled source; so is
:class:`latentlens.probes.TokenPairs`, token sequences with a labelled query-key pair each.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from latentlens.tasks import Batch

PATTERN_HOOK = re.compile(r"^(.*)blocks\.(\d+)\.(attn|cross_attn|fuse)\.hook_pattern$")


@runtime_checkable
class HookedLike(Protocol):
    """TransformerLens's hook interface (``HookedRootModule``, ``TransformerBridge``)."""

    hook_dict: dict[str, Any]

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]: ...

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class LabelledSource(Protocol):
    """Inputs with labels, batch by batch (see the module's docstring)."""

    splits: tuple[str, ...]

    def labelled_batches(
        self, split: str, examples: int, batch_size: int = 256, seed: int = 0
    ) -> Iterator[Batch]: ...

    def model_inputs(self, batch: Batch) -> tuple[torch.Tensor, ...]: ...

    def metrics(self, output: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]: ...


def forward_kwargs(source: Any, batch: Batch) -> dict[str, Any]:
    """The keyword arguments of the model's forward on ``batch``: the source's
    ``model_kwargs(batch)`` where it has that method (padded text passes its
    ``attention_mask``), else none."""
    method = getattr(source, "model_kwargs", None)
    return dict(method(batch)) if method is not None else {}


def last_positions_kwargs(model: Any, positions: int | None) -> dict[str, int]:
    """``{"last_positions": positions}`` when ``model``'s forward can compute its last
    ``positions`` positions alone (a latentlens decoder: the last block's queries, MLP and
    readout there only), else ``{}`` (every position, e.g. a ``TransformerBridge``)."""
    if positions is None:
        return {}
    parameters = inspect.signature(model.forward).parameters
    return {"last_positions": positions} if "last_positions" in parameters else {}


def hooks_change_nothing(model: Any) -> bool:
    """Whether a pass of ``model`` with hooks that only read computes bit for bit what the
    same pass without them does: not on latentlens's fused CPU kernels, which give way to
    the unfused path where a hook reads (the same function to float32 rounding)."""
    return not getattr(model, "fused", False)


def starts_at_layer(model: Any) -> bool:
    """Whether ``model``'s forward can start at a block from the residual stream entering
    it (``start_at_layer``, a latentlens decoder) and compute there what its whole pass
    would (a model whose :func:`hooks_change_nothing`: the stream is read by a hook)."""
    parameters = inspect.signature(model.forward).parameters
    return "start_at_layer" in parameters and hooks_change_nothing(model)


def read_positions_kwargs(model: Any, source: Any) -> dict[str, int]:
    """:func:`last_positions_kwargs` for the positions ``source``'s metrics read (a task's
    ``loss_positions``; none: every position): the same metrics for less work, for hooks
    that do not read or change the last block's other positions after its keys and
    values."""
    return last_positions_kwargs(model, getattr(source, "loss_positions", None))


def check_hooked(model: Any) -> None:
    """A one-line error for a model the probes cannot read (e.g. a bare Hugging Face
    model), naming the fix."""
    if not isinstance(model, HookedLike):
        raise TypeError(
            f"a {type(model).__name__} has no TransformerLens hook points; wrap a Hugging Face "
            "model with latentlens.pretrained.load_language_model(name) (a TransformerLens "
            "TransformerBridge) or pass a latentlens model"
        )


def pattern_hooks(model: Any, prefix: str = "", module: str = "attn") -> list[str]:
    """The model's ``{prefix}blocks.{layer}.{module}.hook_pattern`` names in layer order;
    a clear error where it has none (a model whose attention weights are not hooked)."""
    check_hooked(model)
    found = sorted(
        (int(m.group(2)), name)
        for name in model.hook_dict
        if (m := PATTERN_HOOK.match(name)) and m.group(1) == prefix and m.group(3) == module
    )
    if not found:
        raise ValueError(
            f"the {type(model).__name__} has no {prefix}blocks.{{layer}}.{module}.hook_pattern "
            "hook points, so its attention weights cannot be read; use a model whose attention "
            "is hooked (a latentlens model, or a Hugging Face model through "
            "latentlens.pretrained.load_language_model, which boots a TransformerBridge)"
        )
    layers = [layer for layer, _ in found]
    if layers != list(range(len(layers))):
        raise ValueError(f"the model's {module}.hook_pattern layers {layers} are not 0..n-1")
    return [name for _, name in found]

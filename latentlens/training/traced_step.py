"""A training step's forward and backward as one compiled graph, run without autograd.

``--fused --compile`` on the CPU spends a third of a small step (fuzzy logic, T = 16) on
work that is neither arithmetic nor the kernels': dynamo's guards and cache lookup, AOT
autograd's wrappers around the compiled forward and backward, the autograd engine's walk
back through the graph and its gradient accumulation (``benchmarks/speed/host_share.py
--profile``). :class:`TracedGradients` traces the training objective and its gradients
with respect to every trainable parameter (``torch.autograd.grad``) into one graph of
PyTorch operators with ``make_fx`` (on fake tensors: no kernel runs and no random number
is drawn), the kernels' operators recorded as the compiled step records them
(:func:`latentlens.kernels.tracing_a_step`), and compiles it with inductor as a function
of the parameters, the buffers and the batch's draws. A step then calls that function
and sets each parameter's ``.grad``: no guards, no autograd graph.

The compiled graph's wrapper, the code that allocates its buffers and calls its kernels
and operators one after another, is C++ (inductor's ``cpp_wrapper``) without the checks of
each operator's output sizes and strides against its fake kernel's (``size_asserts``;
the tests hold the gradients to autograd's), for the same bits. Inductor's Python wrapper
(some 600 lines with 130 such checks at T = 16) made the fixed part of a fuzzy-logic step
1.21x as long (batch 2) and the step 1.01-1.07x (``benchmarks/speed/traced_step.py
--against python-wrapper``); the C++ one compiles about 7 s longer, once per machine.
Inductor writes its own kernels (the graph's element-wise passes and small sums) for the
thread count it compiles at, and keys its graph cache by that count; here they are written
for one thread (``cpp.threads``), whatever the count. The graph then computes the same
numbers at any count (its other work, oneDNN's matmuls and the fused kernels, splits its
sums in fixed slices), and one compile serves them all: a new run's thread check compiled
it again at one thread after its calibration had at two, and a resume compiled kernels for
the count it started on. Written for two threads, the kernels computed the same bits at
fuzzy logic's and SRAVEN's reference sizes, and the step was no faster with them (T = 16
on a 2-core Zen 4: 0.987x for softmax and 1.025x for linear, within the machine's noise;
``benchmarks/speed/traced_step.py --against two-thread-kernels``).

It calls the operators the compiled objective's forward and backward call, to float32
rounding the same gradients (``tests/training/test_traced_step.py``). Its random numbers
(dropout) are inductor's, drawn from the global generator, so a resumed run draws what an
uninterrupted one does. A new shape of draws,
dtype or train/eval mode traces and compiles again (as dynamo recompiles); a change of
the model's structure (a hook, a new parameter) is not seen: like torch.compile's, the
step is for the hook-free training path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from latentlens.kernels import tracing_a_step

Key = tuple[Any, ...]
# How draws were taken apart (:func:`taken_apart`): the dataclass they were, if one, and
# the tree of their tensors
Structure = tuple[type | None, TreeSpec]
# inductor's settings for the step's graph beneath the caller's (module docstring): its
# wrapper, and its own kernels written for one thread whatever the count at compile time
WRAPPER_OPTIONS = {"cpp_wrapper": True, "size_asserts": False}
KERNEL_OPTIONS = {"cpp.threads": 1}


class TracedGradients:
    """``draws -> loss``: ``objective``'s loss (detached) on ``draws``, every trainable
    parameter's gradient of it written to the parameter's ``.grad`` (None where the loss
    does not depend on it, as autograd leaves it). ``objective`` is a module whose
    parameters and buffers are those of the training (a
    :class:`~latentlens.training.objective.TrainingObjective`); ``options``: inductor's
    (``torch.compile``'s ``options``)."""

    def __init__(
        self,
        objective: torch.nn.Module,
        options: dict[str, Any] | None = None,
        compiled: dict[Key, Callable[..., list[torch.Tensor | None]]] | None = None,
    ) -> None:
        self.objective = objective
        self.options = dict(options or {})
        named = list(objective.named_parameters())
        self.trained = [(name, p) for name, p in named if p.requires_grad]
        self.held = [(name, p) for name, p in named if not p.requires_grad]
        self.held += list(objective.named_buffers())
        # the tensors each call passes first: trained parameters, then the others and buffers
        self.state = [tensor for _, tensor in self.trained + self.held]
        # compiled steps by key (:meth:`_key`), shared with the twins of :meth:`on`
        self.compiled = {} if compiled is None else compiled

    def on(self, objective: torch.nn.Module) -> TracedGradients:
        """The same step for ``objective``, a copy of this one's (same structure, its own
        tensors, e.g. a model's deep copy): it calls the graphs compiled already."""
        return TracedGradients(objective, self.options, self.compiled)

    def __call__(self, draws: Any) -> torch.Tensor:
        leaves, structure = taken_apart(draws)
        key = self._key(leaves, structure)
        if key not in self.compiled:
            detached = [tensor.detach() for tensor in self.state]
            self.compiled[key] = self._compile(detached + leaves, structure)
        with below_autograd():  # so the parameters go in as they are: nothing records them
            loss, *gradients = self.compiled[key](*self.state, *leaves)
        for (_, parameter), gradient in zip(self.trained, gradients, strict=True):
            parameter.grad = gradient
        return loss

    def _key(self, leaves: list[torch.Tensor], structure: Structure) -> Key:
        """What a compiled graph holds for: the draws' structure, shapes, dtypes and
        devices and the train/eval mode (the parameters' are the objective's own)."""
        shapes = tuple((t.shape, t.dtype, t.device) for t in leaves)
        return shapes, structure, self.objective.training

    def _compile(
        self, inputs: list[torch.Tensor], structure: Structure
    ) -> Callable[..., list[torch.Tensor | None]]:
        """Trace ``(loss, *gradients)`` of the step as a function of ``inputs`` (the
        trained parameters, the other parameters and buffers, the draws' leaves) and
        compile it; a gradient the loss does not depend on comes back None."""
        from torch._inductor.compile_fx import compile_fx

        names = [name for name, _ in self.trained + self.held]
        trained, held = len(self.trained), len(names)
        unused: list[int] = []  # found by tracing: the trained parameters without a gradient

        def step(*tensors: torch.Tensor) -> list[torch.Tensor]:
            weights = [t.detach().requires_grad_(True) for t in tensors[:trained]]
            state = dict(zip(names, [*weights, *tensors[trained:held]], strict=True))
            draws = put_together(list(tensors[held:]), structure)
            with torch.enable_grad():
                loss = functional_call(self.objective, state, (draws,), strict=True)
                gradients = torch.autograd.grad(loss, weights, allow_unused=True)
            unused[:] = [i for i, g in enumerate(gradients) if g is None]
            pairs = zip(gradients, weights, strict=True)
            return [loss.detach(), *(laid_out_as(g, w) for g, w in pairs if g is not None)]

        with tracing_a_step():
            graph = make_fx(step, tracing_mode="fake", _allow_non_fake_inputs=True)(*inputs)
        options = {**WRAPPER_OPTIONS, **KERNEL_OPTIONS, **self.options}
        run = compile_fx(graph, fake_copies(inputs), config_patches=options)
        if not unused:
            return run
        missing = frozenset(unused)

        def with_nones(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
            loss, *found = run(*tensors)
            given = iter(found)
            return [loss, *(None if i in missing else next(given) for i in range(trained))]

        return with_nones


def below_autograd() -> AbstractContextManager[None]:
    """The dispatcher's autograd and view-tracking layers skipped, as inference mode skips
    them, without marking the tensors made as inference tensors: the graph computes its
    gradients itself, so each of its operator calls (some 30 kernels' operators with
    Python bodies, and a few hundred views, slices and allocations) would otherwise pass
    through the kernels' Python autograd wrappers and autograd's view bookkeeping for
    nothing. On a 2-core Zen 4 EPYC, fuzzy logic's step (T = 16) ran 1.05-1.07x as fast
    with it and SRAVEN's 1.01-1.02x (``benchmarks/speed/traced_step.py --against
    through-autograd``)."""
    return torch._C._AutoDispatchBelowADInplaceOrView()


def laid_out_as(gradient: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    """``gradient`` with ``parameter``'s strides, as autograd accumulates gradients (the
    layout contract PyTorch's fused optimisers rely on: they read a gradient's memory as
    its parameter's). A packed projection's gradient comes out of the graph as views into
    one tensor of all of them otherwise."""
    if gradient.stride() == parameter.stride():
        return gradient
    return gradient.new_empty_strided(parameter.shape, parameter.stride()).copy_(gradient)


def fake_copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Fake tensors of ``tensors``' shapes, strides and dtypes, in a fake mode with a
    (static) shape environment: inductor's graph cache keys a graph by it, and bypasses
    the cache without one (a warm compile of fuzzy logic's step took 8.5 s instead of
    0.9)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    return [mode.from_tensor(t, static_shapes=True) for t in tensors]


def taken_apart(draws: Any) -> tuple[list[torch.Tensor], Structure]:
    """``draws``' tensors in order and their structure: a task's draws are a dict of
    tensors or a whole :class:`~latentlens.tasks.Batch` (a dataclass, which PyTorch's
    pytrees hold as one leaf; here its fields are opened)."""
    kind = type(draws) if dataclasses.is_dataclass(draws) else None
    tree = {f.name: getattr(draws, f.name) for f in dataclasses.fields(draws)} if kind else draws
    leaves, spec = tree_flatten(tree)
    strays = sorted({type(leaf).__name__ for leaf in leaves if not isinstance(leaf, torch.Tensor)})
    if strays:
        raise TypeError(f"the traced step takes draws made of tensors; these hold {strays}: "
                        "train with --eager or without --fused")  # fmt: skip
    return leaves, (kind, spec)


def put_together(tensors: list[torch.Tensor], structure: Structure) -> Any:
    """The draws :func:`taken_apart` took apart, with ``tensors`` in their places."""
    kind, spec = structure
    tree = tree_unflatten(tensors, spec)
    return kind(**tree) if kind is not None else tree

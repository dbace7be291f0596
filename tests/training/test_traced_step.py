"""The fused step compiled whole (:mod:`latentlens.training.traced_step`): one graph of the
forward and backward passes, run without autograd, computes autograd's gradients.

Gradients are compared with the eager step's to float32 rounding relative to each
gradient's scale (:func:`assert_rounding_close`): the kernels are the same calls, but the
loss and the small ops around them are inductor's, whose float32 sums run in another
order. Measured: at most 3e-6 apart on fuzzy logic's gradients (up to 8), 1e-4 on the
hypernetwork's embedding bias (up to 76, a sum over every position), 1.4e-6 of its scale.
A gradient that is zero up to rounding (softmax's key bias) is held to the same bound."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from latentlens.training import TrainConfig, Trainer, model_for_task, traced_step
from latentlens.training.objective import TrainingObjective
from latentlens.training.traced_step import TracedGradients, below_autograd, laid_out_as
from tests.training.test_cpu_compile import without_dropout
from tests.training.test_trainer import tiny_config

GRADIENTS = dict(rtol=1e-5, atol=1e-5)
ROUNDING = 1e-5  # of a gradient's largest magnitude (at least 1)


def assert_rounding_close(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """``got`` within :data:`ROUNDING` of ``want``'s scale, element by element."""
    bound = ROUNDING * max(1.0, float(want.abs().max()))
    assert float((got - want).abs().max()) <= bound, name


def autograd_gradients(objective: torch.nn.Module, draws) -> tuple[torch.Tensor, list]:
    """The loss and gradients of ``objective`` on ``draws`` by autograd (eager)."""
    parameters = [p for p in objective.parameters() if p.requires_grad]
    loss = objective(draws)
    found = torch.autograd.grad(loss, parameters, allow_unused=True)
    return loss.detach(), list(found)


@pytest.mark.parametrize("attention", ["softmax", "hyla"])
def test_a_compiled_fused_run_traces_its_step_whole(tmp_path: Path, attention: str) -> None:
    config = without_dropout(tiny_config(steps=20, attention=attention))
    run = Trainer.create(tmp_path / "r", config, device="cpu", quiet=True, fused=True,
                         compile=True)  # fmt: skip
    assert run.traced is not None and run.train_cfg.path == "fused-compile"
    draws = run.task.draw(run.train_cfg.batch_size, "train", torch.Generator().manual_seed(3))
    for _ in range(2):  # a second step on changed weights calls the same graph
        loss = run.traced(draws)
        assert loss.grad_fn is None and not loss.requires_grad  # no autograd graph
        traced = [p.grad for p in run.model.parameters()]
        for p in run.model.parameters():
            p.grad = None
        expected_loss, expected = autograd_gradients(TrainingObjective(run.model, run.task), draws)
        torch.testing.assert_close(loss, expected_loss, **GRADIENTS)
        for (name, p), got, want in zip(run.model.named_parameters(), traced, expected,
                                        strict=True):  # fmt: skip
            assert got.stride() == p.stride(), name  # autograd's layout, which AdamW reads
            assert_rounding_close(got, want, name)
        with torch.no_grad():
            for p in run.model.parameters():
                p.add_(0.01 * torch.randn_like(p))
    assert len(run.traced.compiled) == 1


def test_the_graph_runs_below_autograd_to_the_same_bits(tmp_path: Path) -> None:
    """The graph is called below autograd's dispatch layers (its operators' Python autograd
    wrappers and view tracking skipped, for speed): it computes bit for bit what the same
    graph computes called through them, and its gradients are ordinary tensors."""
    with below_autograd():  # the guard skips autograd: an op on a leaf records nothing
        leaf = torch.ones(3, requires_grad=True)
        made = (leaf * 2)[1:]
        assert not made.requires_grad and made.grad_fn is None and not made.is_inference()
    config = without_dropout(tiny_config(steps=20))
    run = Trainer.create(tmp_path / "r", config, device="cpu", quiet=True, fused=True,
                         compile=True)  # fmt: skip
    draws = run.task.draw(run.train_cfg.batch_size, "train", torch.Generator().manual_seed(3))
    loss = run.traced(draws)
    below = [p.grad for p in run.model.parameters()]
    # through autograd's layers, as before: the parameters go in undetached, so grad off
    with mock.patch.object(traced_step, "below_autograd", torch.no_grad):
        through_loss = run.traced(draws)
    assert torch.equal(loss, through_loss)
    for (name, p), got in zip(run.model.named_parameters(), below, strict=True):
        assert torch.equal(got, p.grad), name
        assert not got.is_inference() and not got.requires_grad, name


def test_the_cpp_wrapper_computes_the_python_wrappers_bits(tmp_path: Path) -> None:
    """The graph's C++ wrapper without size checks (:data:`traced_step.WRAPPER_OPTIONS`,
    for speed) calls the same kernels in the same order as inductor's Python wrapper: the
    same loss and gradients bit for bit, dropout's random numbers included."""
    assert traced_step.WRAPPER_OPTIONS == {"cpp_wrapper": True, "size_asserts": False}
    config = tiny_config(steps=20, attention="hyla")
    assert config["model"]["attention_dropout"] > 0  # its draws inside the graph compared too
    run = Trainer.create(tmp_path / "r", config, device="cpu", quiet=True, fused=True,
                         compile=True)  # fmt: skip
    draws = run.task.draw(run.train_cfg.batch_size, "train", torch.Generator().manual_seed(3))
    results = []
    for options in ({}, dict(traced_step.WRAPPER_OPTIONS)):  # a copy: the patch clears it
        with mock.patch.dict(traced_step.WRAPPER_OPTIONS, options, clear=True):
            traced = TracedGradients(run.traced.objective, run.traced.options)
            torch.manual_seed(5)
            loss = traced(draws)
        (graph,) = traced.compiled.values()  # inductor's output: its wrapper's source
        assert ("CppWrapperCodeCache" in graph.source_code) == bool(options)
        results.append([loss, *(p.grad for p in run.model.parameters())])
    for (name, _), python, cpp in zip([("loss", None), *run.model.named_parameters()],
                                      *results, strict=True):  # fmt: skip
        assert torch.equal(python, cpp), name


def test_the_graph_is_compiled_once_for_every_thread_count(tmp_path: Path) -> None:
    """Inductor's own kernels are written for one thread (:data:`traced_step.KERNEL_OPTIONS`)
    whatever the count at compile time: compiled on two threads, the graph holds no OpenMP
    region of its own; compiled again on one, inductor's graph cache returns it (its key
    holds no thread count), and both compute the same bits."""
    from torch._dynamo.utils import counters

    assert traced_step.KERNEL_OPTIONS == {"cpp.threads": 1}
    config = tiny_config(steps=20, attention="hyla")
    run = Trainer.create(tmp_path / "r", config, device="cpu", quiet=True, fused=True,
                         compile=True)  # fmt: skip
    draws = run.task.draw(run.train_cfg.batch_size, "train", torch.Generator().manual_seed(3))
    before = torch.get_num_threads()
    results, hits = [], []
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            hit = counters["inductor"]["fxgraph_cache_hit"]
            traced = TracedGradients(run.traced.objective, run.traced.options)
            torch.manual_seed(5)
            loss = traced(draws)
            hits.append(counters["inductor"]["fxgraph_cache_hit"] - hit)
            (graph,) = traced.compiled.values()
            assert "#pragma omp" not in graph.source_code, threads
            results.append([loss, *(p.grad for p in run.model.parameters())])
    finally:
        torch.set_num_threads(before)
    assert hits[1] == 1  # the second compile, on one thread, found the first
    for (name, _), two, one in zip([("loss", None), *run.model.named_parameters()], *results,
                                   strict=True):  # fmt: skip
        assert torch.equal(two, one), name


class Objective(torch.nn.Module):
    """A loss with a transposed (non-contiguous) weight and a parameter it never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 4).T)  # [4, 3], strides (1, 4)
        self.unused = torch.nn.Parameter(torch.randn(2))
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        return ((draws["x"] @ self.weight).tanh() * self.scale).square().mean()


def test_traced_gradients_are_autograds_whatever_the_layout_or_use() -> None:
    torch.manual_seed(0)
    objective = Objective()
    traced = TracedGradients(objective)
    draws = {"x": torch.randn(5, 4)}
    loss = traced(draws)
    expected_loss, (weight, unused) = autograd_gradients(objective, draws)
    torch.testing.assert_close(loss, expected_loss, **GRADIENTS)
    torch.testing.assert_close(objective.weight.grad, weight, **GRADIENTS)
    assert objective.weight.grad.stride() == objective.weight.stride() == (1, 4)
    assert unused is None and objective.unused.grad is None  # as autograd leaves it
    # a batch of another shape traces again; a copy of the objective reuses the graphs
    traced({"x": torch.randn(7, 4)})
    assert len(traced.compiled) == 2
    twin = Objective()
    twin.load_state_dict({**objective.state_dict(), "weight": torch.ones(4, 3)})
    twin_loss = traced.on(twin)(draws)
    assert len(traced.compiled) == 2
    torch.testing.assert_close(twin_loss, autograd_gradients(twin, draws)[0], **GRADIENTS)


def test_a_gradient_takes_its_parameters_strides() -> None:
    parameter = torch.randn(3, 4).T
    gradient = torch.arange(12.0).reshape(4, 3)
    laid = laid_out_as(gradient, parameter)
    assert laid.stride() == parameter.stride() and torch.equal(laid, gradient)
    assert laid_out_as(gradient, torch.empty(4, 3)) is gradient


def test_a_resumed_traced_run_continues_as_an_uninterrupted_one(tmp_path: Path) -> None:
    """Dropout on: the graph draws inductor's random numbers from the global generator,
    which a checkpoint holds, and tracing draws none; so a run resumed at step 10 ends with
    the weights of one trained straight through, bit for bit. HYLA's model, as the C++
    wrapper's test above: its graph, compiled there, is inductor's cache hit here."""
    config = tiny_config(steps=20, attention="hyla")
    options = dict(device="cpu", quiet=True, fused=True, compile=True)
    whole = Trainer.create(tmp_path / "whole", config, **options)
    whole.train()
    part = Trainer.create(tmp_path / "part", config, **options)
    part.evaluate_initialisation()
    for _ in range(10):
        part.train_step()
    part.checkpoint(evaluate=True)
    part.close()
    resumed = Trainer.resume(tmp_path / "part", **options)
    assert resumed.traced is not None and resumed.step == 10
    resumed.train()
    weights = resumed.model.state_dict()
    for name, weight in whole.model.state_dict().items():
        assert torch.equal(weights[name], weight), name


# small models: the reference's encoder-decoder takes two minutes to compile cold
SMALL = {"translation": dict(d_model=32, n_heads=2, qk_dim=16, v_dim=16, d_mlp=64,
                             n_layers_encoder=1, n_layers_decoder=1),
         "modular-icl": {}}  # fmt: skip


@pytest.mark.parametrize("task, kind", [("translation", "transformer"),
                                        ("modular-icl", "hypernetwork")])  # fmt: skip
def test_other_model_kinds_trace_their_step_whole(tmp_path: Path, task: str, kind: str) -> None:
    """The encoder-decoder (its draws a whole Batch, a dataclass the trace opens) and the
    hypernetwork transformer: the traced gradients are autograd's. In eval mode, so that
    dropout draws nothing on either side."""
    model = model_for_task(task, model=kind, **SMALL[task])
    config = Trainer.resolve_config(task, model, TrainConfig.for_task(task, batch_size=4, steps=4))
    run = Trainer.create(tmp_path / "r", config, device="cpu", quiet=True, fused=True,
                         compile=True)  # fmt: skip
    assert run.traced is not None
    run.model.eval()
    draws = run.task.draw(4, "train", torch.Generator().manual_seed(3))
    loss = run.traced(draws)
    traced = [p.grad for p in run.model.parameters()]
    expected_loss, expected = autograd_gradients(TrainingObjective(run.model, run.task), draws)
    torch.testing.assert_close(loss, expected_loss, **GRADIENTS)
    for (name, _), got, want in zip(run.model.named_parameters(), traced, expected, strict=True):
        if want is None:
            assert got is None, name
        else:
            assert_rounding_close(got, want, name)

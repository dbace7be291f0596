"""The training objective that ``--compile`` compiles: the batch's assembly from its draws,
the model and the task's loss as one module. CI has no GPU, so the compiled path is checked
here with inductor's CPU code generator (the trainer itself refuses ``--compile`` on the
CPU, where it does not pay)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from latentlens.models.config import VARIANTS
from latentlens.tasks.base import Draws
from latentlens.training import SeedGroup, TrainConfig, Trainer, model_for_task, seed_configs
from latentlens.training.objective import SeedGroupObjective, TrainingObjective

TINY = dict(n_layers=2, d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64, attention_dropout=0.0)
# A cold inductor compile on 2 CPU cores costs about 25 s a layer (most of it compiling
# the C++ of each kernel): the compiled tests run two layers only where the second
# layer's path differs from the first's (the last block predicts only the loss's positions).
ONE_LAYER = {**TINY, "n_layers": 1}


def move_off_zero(model: torch.nn.Module, seed: int) -> None:
    """Add small noise to ``model``'s all-zero parameters (biases at initialisation).

    In a one-layer SRAVEN model the loss reads only the answer panel, whose all-zero tokens
    embed to exactly 0 at initialisation (zero bias, relative positions only): the queries
    are then 0 and W_Q, W_K and b_K get no gradient, which would leave their comparison
    vacuous. Off zero, every parameter gets one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.any():
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))


def loss_and_gradients(
    objective: Callable[[Draws], torch.Tensor], model: torch.nn.Module, draws: Draws
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = objective(draws)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("task", "sizes"), [("fuzzy-logic", ONE_LAYER), ("sraven", TINY)], ids=["fuzzy-logic", "sraven"]
)
def test_compiled_objective_gives_the_eager_loss_and_gradients(task: str, sizes: dict) -> None:
    """Each task's batch assembly and loss (squared error for fuzzy logic, cross-entropy
    for SRAVEN) fused into HYLA's kernels give the eager loss and every gradient up to
    float32 summation order (measured: 5e-7 relative on the loss, 4e-6 of a gradient's
    largest entry; the tolerances leave a 10x margin). SRAVEN's two layers compile both
    paths, a block over every position and the last block over the loss's positions."""
    config = Trainer.resolve_config(
        task, model_for_task(task, attention="hyla", **sizes), TrainConfig.for_task(task)
    )
    trainer = Trainer(None, config, device="cpu", quiet=True)
    draws = trainer.task.draw(32, "train", trainer.task.make_generator(0))
    batch = trainer.task.assemble(draws)
    eager = TrainingObjective(trainer.model, trainer.task)
    compiled = TrainingObjective(trainer.model, trainer.task)
    compiled.compile(dynamic=False)

    eager_loss, eager_grads = loss_and_gradients(eager, trainer.model, draws)
    compiled_loss, compiled_grads = loss_and_gradients(compiled, trainer.model, draws)

    torch.testing.assert_close(compiled_loss, eager_loss, rtol=5e-6, atol=0.0)
    assert compiled_grads.keys() == eager_grads.keys()
    # Two layers for SRAVEN: in one, its queries would be 0 at initialisation (move_off_zero)
    zero = [name for name, grad in eager_grads.items() if not grad.any()]
    assert not zero, f"{zero} got no gradient: their comparison would be vacuous"
    for name, grad in eager_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(
            compiled_grads[name], grad, rtol=1e-4, atol=4e-5 * scale, msg=name
        )

    # The model itself stays eager: hooks added now still see its activations.
    seen: list[torch.Size] = []
    trainer.model.hook_dict["blocks.0.hook_resid_pre"].add_hook(
        lambda tensor, hook: seen.append(tensor.shape)
    )
    trainer.model(*trainer.task.model_inputs(batch))
    trainer.model.reset_hooks()
    assert seen == [torch.Size([32, batch.inputs.shape[1], TINY["d_model"]])]


@pytest.mark.parametrize("task", ["fuzzy-logic", "sraven"])
def test_the_loss_reads_only_the_positions_the_model_is_asked_for(task: str) -> None:
    """The task's loss and metrics read its last ``loss_positions`` predictions alone
    (changing any earlier one changes nothing; changing one of them does), so the objective,
    which predicts only those (``last_positions``), gives the full model's loss and
    gradients. float32 as in training: the last block's matmuls over fewer rows may sum in
    another order (measured: the same loss, gradients within 7e-7 of their largest entry;
    the tolerance leaves a 6x margin; float64 equality is tests/models/test_transformer.py's)."""
    config = Trainer.resolve_config(
        task, model_for_task(task, attention="hyla", **TINY), TrainConfig.for_task(task)
    )
    trainer = Trainer(None, config, device="cpu", quiet=True)
    task_obj, model = trainer.task, trainer.model
    n = task_obj.loss_positions
    draws = task_obj.draw(32, "train", task_obj.make_generator(0))
    batch = task_obj.assemble(draws)

    def loss_and_metrics(predictions: torch.Tensor) -> list[torch.Tensor]:
        return [task_obj.loss(predictions, batch), *task_obj.metrics(predictions, batch).values()]

    full = model(*task_obj.model_inputs(batch)).detach()
    earlier, inside = full.clone(), full.clone()
    earlier[:, :-n] = torch.randn_like(earlier[:, :-n])
    inside[:, -1, 0] += 3.0
    assert all(map(torch.equal, loss_and_metrics(earlier), loss_and_metrics(full)))
    assert not torch.equal(loss_and_metrics(inside)[0], loss_and_metrics(full)[0])

    full_objective = lambda draws: task_obj.loss(  # noqa: E731
        model(*task_obj.model_inputs(task_obj.assemble(draws))).float(), batch
    )
    full_loss, full_grads = loss_and_gradients(full_objective, model, draws)
    loss, grads = loss_and_gradients(TrainingObjective(model, task_obj), model, draws)
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=0.0)
    for name, grad in full_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=4e-6 * scale, msg=name)


def test_compiled_seed_group_objective_gives_each_seeds_eager_loss_and_gradients() -> None:
    """A seed group's ``--compile`` compiles its objective: every seed's batch assembled
    from the stacked draws, the vmapped forward and the losses. Inductor's CPU kernels give
    each seed's eager loss and gradients (tolerances as the single run's above), and each
    seed's loss is the one its own run's objective gives on its own draws. SRAVEN, whose
    assembly (permutations, one-hot panels) is the larger; the objective is the same code
    for every task. One layer, its parameters moved off zero (:func:`move_off_zero`): the
    vmapped model's two-layer path is the single run's, compiled above."""
    task = "sraven"
    config = Trainer.resolve_config(
        task, model_for_task(task, attention="hyla", **ONE_LAYER), TrainConfig.for_task(task)
    )
    trainers = [Trainer(None, c, device="cpu", quiet=True) for c in seed_configs(config, [0, 1])]
    for seed, trainer in enumerate(trainers):
        move_off_zero(trainer.model, seed)
    group = SeedGroup(trainers)
    task_obj = trainers[0].task
    generators = [task_obj.make_generator(seed) for seed in (5, 6)]
    draws = task_obj.draw_seeds(32, "train", generators)
    torch._dynamo.reset()
    compiled = torch.compile(SeedGroupObjective(trainers[0].model, task_obj), dynamic=False)

    def losses_and_gradients(objective) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        params = {n: p.detach().clone().requires_grad_() for n, p in group.params.items()}
        losses = objective(params, group.buffers, draws)
        losses.sum().backward()
        return losses.detach(), {n: p.grad for n, p in params.items()}

    eager_losses, eager_grads = losses_and_gradients(
        SeedGroupObjective(trainers[0].model, task_obj)
    )
    losses, grads = losses_and_gradients(compiled)
    assert eager_losses.shape == (2,) and not torch.equal(eager_losses[0], eager_losses[1])
    torch.testing.assert_close(losses, eager_losses, rtol=5e-6, atol=0.0)
    for name, grad in eager_grads.items():
        scale = grad.abs().amax(dim=tuple(range(1, grad.ndim)), keepdim=True)  # per seed
        assert scale.min() > 0, f"{name} got no gradient: its comparison would be vacuous"
        assert ((grads[name] - grad).abs() <= 1e-4 * grad.abs() + 4e-5 * scale).all(), name
    for seed, trainer in enumerate(trainers):
        generators = [task_obj.make_generator(s) for s in (5, 6)]
        own = task_obj.draw(32, "train", generators[seed])
        single = TrainingObjective(trainer.model, task_obj)(own)
        torch.testing.assert_close(eager_losses[seed], single.detach(), rtol=1e-6, atol=0.0)


class GraphCounter:
    """A ``torch.compile`` backend that counts the graphs dynamo hands it and runs each
    eagerly (no code generation: tracing alone, a second or two a model)."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs += 1
        return graph.forward


# Every model kind and every attention variant the trainer can compile, on its task.
ONE_GRAPH_CASES = {
    **{f"fuzzy-logic-{variant}": ("fuzzy-logic", "transformer", {"attention": variant})
       for variant in VARIANTS},
    "sraven-hyla": ("sraven", "transformer", {"attention": "hyla", "n_layers": 2}),
    "modular-icl-transformer": ("modular-icl", "transformer", {"attention": "hyla"}),
    "modular-icl-hypernetwork": ("modular-icl", "hypernetwork", {"attention": "hyla"}),
    "translation-fusion-gca": ("translation", "fusion", {"attention": "hyla", "connection": "gca"}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(ONE_GRAPH_CASES))
def test_the_objective_compiles_to_one_graph_single_and_seed_group(case: str) -> None:
    """``--compile`` fuses the objective's assembly, model and loss only as far as dynamo
    traces them as one graph: a graph break (a Python side effect, a host read, an op
    dynamo cannot trace) splits them into graphs compiled apart, with eager Python between,
    and costs a GPU step its fusion silently, since a break is not an error. Here each
    traces as one graph (``fullgraph=True`` raises at a break, the counter checks that no
    second graph was compiled), a single run's and a seed group's, attention dropout on."""
    task, kind, overrides = ONE_GRAPH_CASES[case]
    sizes = dict(d_model=16, n_heads=2, qk_dim=8, v_dim=8, d_mlp=32)
    if kind == "fusion":
        sizes = {**sizes, "n_layers_encoder": 2, "n_layers_decoder": 2}
    model = model_for_task(task, model=kind, **{**sizes, **overrides}, attention_dropout=0.1)
    config = Trainer.resolve_config(task, model, TrainConfig.for_task(task))
    trainers = [Trainer(None, c, device="cpu", quiet=True) for c in seed_configs(config, [0, 1])]
    task_obj = trainers[0].task

    single, group = GraphCounter(), GraphCounter()
    torch._dynamo.reset()
    objective = torch.compile(
        TrainingObjective(trainers[0].model, task_obj), backend=single, fullgraph=True
    )
    objective(task_obj.draw(8, "train", task_obj.make_generator(0))).backward()
    seed_group = SeedGroup(trainers)
    draws = task_obj.draw_seeds(8, "train", [task_obj.make_generator(s) for s in (0, 1)])
    torch._dynamo.reset()
    group_objective = torch.compile(
        SeedGroupObjective(trainers[0].model, task_obj), backend=group, fullgraph=True
    )
    group_objective(seed_group.params, seed_group.buffers, draws).sum().backward()
    assert (single.graphs, group.graphs) == (1, 1)

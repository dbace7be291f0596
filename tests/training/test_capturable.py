"""The training step reads nothing back to the host and keeps its shapes, so that a CUDA
graph can capture it and replay it.

A CUDA graph cannot hold an op that waits for a device value on the host (``.item()``,
``nonzero``, an SVD's error check, ...), and a replay runs the captured kernels on the
captured shapes. Both reach the dispatcher on a CPU as well, so these tests check them
without a GPU: every task that lets ``--cuda-graphs`` through dispatches no host sync in its
step and the same ops on the same shapes at every step, and the one that refuses it
(modular ICL) does dispatch a host sync.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from latentlens.training import SeedGroup, Trainer, seed_configs
from tests.training.test_multiseed import TASKS, tiny_config

# Ops whose result the host must wait for: values read back, data-dependent output
# shapes, and linear-algebra error checks.
HOST_SYNCS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::equal",
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::repeat_interleave",
        "aten::_linalg_svd",
        "aten::_linalg_eigh",
        "aten::_linalg_check_errors",
    }
)
# Indexing ops that sync when given a boolean mask (a CPU runs those without nonzero).
BOOL_INDEXING = frozenset(
    {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}
)


class HostSyncRecorder(TorchDispatchMode):
    """Records the name of every host-synchronising op dispatched inside the block
    (``seen``) and every op with its output shapes (``trace``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.trace: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = func._schema.name
        if name in HOST_SYNCS or (name in BOOL_INDEXING and bool_index(args)):
            self.seen.append(name)
        output = func(*args, **(kwargs or {}))
        shapes = [tuple(t.shape) for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
        self.trace.append((str(func), shapes))
        return output


def bool_index(args: tuple[Any, ...]) -> bool:
    """Whether an ``index``/``index_put`` call takes a boolean mask (``x[mask]``), whose
    output size depends on the mask's values (on CUDA it runs ``nonzero``)."""
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def record_step(trainer: Trainer | SeedGroup) -> HostSyncRecorder:
    """One step as the graph would capture it: gradients None, then the step."""
    trainer.optimizer.zero_grad(set_to_none=True)
    with HostSyncRecorder() as recorder:
        trainer.compute_step()
    return recorder


def syncs_of_one_step(trainer: Trainer | SeedGroup) -> list[str]:
    """The host syncs of one step after a warm one (optimizer state is made lazily)."""
    trainer.train_step()
    return record_step(trainer).seen


def config_for(task: str, grad_clip: float) -> dict[str, Any]:
    config = tiny_config(task, dropout=0.1 if task != "translation" else 0.0)
    return {**config, "train": {**config["train"], "grad_clip": grad_clip}}


@pytest.mark.parametrize("grad_clip", [0.0, 1.0])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_step_syncs_with_the_host_only_where_the_task_refuses_graphs(
    task: str, grad_clip: float
) -> None:
    trainer = Trainer(None, config_for(task, grad_clip), device="cpu", quiet=True)
    seen = syncs_of_one_step(trainer)
    if trainer.task.graph_capturable:
        assert seen == [], f"{task}'s step waits on the host ({seen}): it cannot be captured"
    else:
        assert seen, f"{task} refuses --cuda-graphs, yet its step never waits on the host"


@pytest.mark.parametrize("grad_clip", [0.0, 1.0])
@pytest.mark.parametrize(
    "task", sorted(name for name in TASKS if name != "modular-icl")
)  # modular-icl refuses --cuda-graphs for groups too
def test_a_seed_groups_step_never_syncs_with_the_host(task: str, grad_clip: float) -> None:
    configs = seed_configs(config_for(task, grad_clip), [0, 1])
    group = SeedGroup([Trainer(None, c, device="cpu", quiet=True) for c in configs])
    assert syncs_of_one_step(group) == []


@pytest.mark.parametrize("task", sorted(name for name in TASKS if name != "modular-icl"))
def test_every_step_runs_the_same_ops_on_the_same_shapes(task: str) -> None:
    """What a replay assumes: the second and third steps dispatch what the first did."""
    trainer = Trainer(None, config_for(task, grad_clip=1.0), device="cpu", quiet=True)
    trainer.train_step()
    first = record_step(trainer).trace
    assert len(first) > 100  # a whole step: batch, forward, backward, clip, AdamW
    for _ in range(2):
        assert record_step(trainer).trace == first


def test_the_recorder_sees_a_value_read_back() -> None:
    with HostSyncRecorder() as recorder:
        x = torch.arange(4.0)
        float(x.sum())
        x[x > 1].sum()  # boolean indexing: a data-dependent shape
        x.nonzero()
        torch.zeros(4)[x > 1] = 1.0  # a masked write
    assert recorder.seen == [
        "aten::_local_scalar_dense",
        "aten::index",
        "aten::nonzero",
        "aten::index_put_",
    ]


def test_the_recorder_tells_apart_steps_of_other_shapes() -> None:
    traces = []
    for length in (3, 3, 4):
        with HostSyncRecorder() as recorder:
            torch.ones(length).cumsum(0)
        traces.append(recorder.trace)
    assert traces[0] == traces[1] != traces[2]

"""Batches of several seeds at once (what a seed group trains on): each seed's slice is the
batch its own generator gives alone, bit for bit, and the generators end where one
``sample`` each leaves them."""

from __future__ import annotations

import pytest
import torch

from latentlens.tasks import TASKS, DrawnTask, make_task
from tests.training.test_capturable import HostSyncRecorder

SEEDS = (0, 5, 11)


@pytest.mark.parametrize(
    "name, split", [(name, split) for name in sorted(TASKS) for split in make_task(name).splits]
)
def test_each_seed_slice_is_that_seeds_own_batch(name: str, split: str) -> None:
    task = make_task(name, seed=1)
    together = [task.make_generator(s) for s in SEEDS]
    alone = [task.make_generator(s) for s in SEEDS]
    group = task.sample_seeds(6, split, together)
    for index, generator in enumerate(alone):
        own = task.sample(6, split, generator)
        assert torch.equal(group.inputs[index], own.inputs)
        assert torch.equal(group.targets[index], own.targets)
        assert group.labels.keys() == own.labels.keys()
        for key, label in own.labels.items():
            assert torch.equal(group.labels[key][index], label), key
    for a, b in zip(together, alone, strict=True):
        assert torch.equal(a.get_state(), b.get_state())


@pytest.mark.parametrize("name", ["fuzzy-logic", "sraven"])
def test_drawn_tasks_assemble_every_seed_in_one_pass(name: str) -> None:
    """The point of :class:`DrawnTask`: the transform's ops run once for all seeds, so
    a batch of 8 seeds dispatches far fewer ops than 8 batches (counted at the dispatcher)."""
    task = make_task(name)
    assert isinstance(task, DrawnTask)
    generators = [task.make_generator(s) for s in range(8)]
    with HostSyncRecorder() as recorder:
        task.sample(128, "train", generators[0])
    one = len(recorder.trace)
    with HostSyncRecorder() as recorder:
        task.sample_seeds(128, "train", generators)
    eight = len(recorder.trace)
    draws = len(task.draw(128, "train", generators[0]))
    tensors = 2 + len(task.sample(1).labels)
    # 8 x the draws, one stack per draw, one transform and a view per batch tensor: well
    # under 8 whole samples.
    assert eight <= 8 * draws + draws + one + tensors, (eight, one)
    assert eight < 0.5 * 8 * one, (eight, one)

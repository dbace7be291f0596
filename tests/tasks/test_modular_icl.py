"""Modular in-context regression: supports, connectivity, Algorithm 1, the teacher, splits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from latentlens.tasks import (
    ModularICLConfig,
    ModularICLTask,
    is_compositional,
    is_connected,
    make_task,
    support_masks,
)


def one_based(masks: list[tuple[int, ...]]) -> set[frozenset[int]]:
    return {frozenset(i + 1 for i in mask) for mask in masks}


def pairs(*items: tuple[int, int]) -> set[frozenset[int]]:
    return {frozenset(p) for p in items}


# docs/methods/tasks.md (modules numbered 1..6)
TABLE_1 = {
    "connected-plus": (
        pairs((1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (1, 6),
              (1, 3), (2, 4), (3, 5), (4, 6), (1, 5), (2, 6)),
        pairs((1, 4), (2, 5), (3, 6)),
    ),
    "connected": (
        pairs((1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (1, 6)),
        pairs((1, 3), (2, 4), (3, 5), (4, 6), (1, 5), (2, 6), (1, 4), (2, 5), (3, 6)),
    ),
    "disconnected": (
        pairs((1, 2), (2, 3), (1, 3), (4, 5), (5, 6), (4, 6)),
        pairs((1, 4), (1, 5), (1, 6), (2, 4), (2, 5), (2, 6), (3, 4), (3, 5), (3, 6)),
    ),
}  # fmt: skip


@pytest.mark.parametrize("support", sorted(TABLE_1))
def test_supports_and_ood_sets_match_table_1(support: str) -> None:
    cfg = ModularICLConfig(support=support)
    train, ood = TABLE_1[support]
    assert one_based(cfg.train_masks) == train and len(cfg.train_masks) == len(train)
    assert one_based(cfg.ood_masks) == ood and len(cfg.ood_masks) == len(ood)


def test_connectivity_checker_on_the_three_supports_and_edge_cases() -> None:
    assert is_connected(support_masks("connected-plus", 6))
    assert is_connected(support_masks("connected", 6))
    assert not is_connected(support_masks("disconnected", 6))
    assert is_connected([(0, 1), (1, 2), (2, 3)])  # a chain through shared modules
    assert not is_connected([(0, 1), (2, 3)])
    assert not is_connected([])
    assert is_compositional([(0, 1), (2, 3)], 4) and not is_compositional([(0, 1)], 3)


def test_algorithm_1_latents() -> None:
    task = ModularICLTask(seed=3)
    batch = task.sample(4096, "train")
    z, mask = batch.labels["z"], batch.labels["mask"]
    assert mask.sum(dim=1).eq(2).all()
    active = z[mask]
    assert (active > 0.5).all() and (active <= 1.0).all()
    assert z[~mask].eq(0).all()
    # the active entries' excess over 1/2 is e/2 with e on the simplex: they sum to 1.5
    torch.testing.assert_close(z.sum(dim=1), torch.full((4096,), 1.5), atol=1e-6, rtol=0)
    # every training mask is drawn, and nothing else
    trained = {tuple(m) for m in ModularICLConfig().train_masks}
    drawn = {tuple(torch.nonzero(row).flatten().tolist()) for row in mask}
    assert drawn == trained


def test_teacher_equals_explicit_composition_and_normalisation() -> None:
    task = ModularICLTask(seed=0)
    batch = task.sample(5, "ood")
    modules, readout = (t.double().numpy() for t in task.teacher)
    x = batch.inputs[..., :-1].double().numpy()
    for b in range(5):
        z = batch.labels["z"][b].double().numpy()
        weights = sum(z[m] * modules[m] for m in range(len(z)))
        weights = weights / np.linalg.svd(weights, compute_uv=False)[0]
        for i in range(x.shape[1]):
            pre = weights @ x[b, i]
            gelu = 0.5 * pre * (1 + np.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)))
            y = float(readout @ gelu)
            expected = 0.0 if i == x.shape[1] - 1 else y  # the query's target slot is 0
            assert batch.inputs[b, i, -1].item() == pytest.approx(expected, abs=1e-5)
            if i == x.shape[1] - 1:
                assert batch.targets[b].item() == pytest.approx(y, abs=1e-5)
        context = batch.inputs[b, :-1, -1].double().mean().item()
        assert batch.labels["context_mean"][b].item() == pytest.approx(context, abs=1e-6)


def test_inputs_are_uniform_with_unit_variance_and_teacher_parameters_scaled() -> None:
    task = ModularICLTask(seed=1)
    x = task.sample(2048, "train").inputs[..., :-1]
    assert x.abs().max() <= math.sqrt(3) + 1e-6
    assert x.mean().item() == pytest.approx(0.0, abs=0.01)
    assert x.std().item() == pytest.approx(1.0, abs=0.01)
    modules, readout = task.teacher
    assert modules.std().item() == pytest.approx(1 / math.sqrt(6), rel=0.1)
    assert readout.shape == (16,) and modules.shape == (6, 16, 16)


def test_control_uses_another_teacher_and_splits_are_seeded() -> None:
    task = ModularICLTask(seed=0)
    assert not torch.equal(task.teacher[0], task.control_teacher[0])
    ood = {
        tuple(torch.nonzero(r).flatten().tolist()) for r in task.sample(2000, "ood").labels["mask"]
    }
    assert ood == {(0, 3), (1, 4), (2, 5)}
    a = make_task("modular-icl", None, seed=7).sample(8, "train")
    b = make_task("modular-icl", None, seed=7).sample(8, "train")
    c = make_task("modular-icl", None, seed=8).sample(8, "train")
    assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)
    # the teacher is the config's, not the sampling seed's
    assert torch.equal(ModularICLTask(seed=1).teacher[0], ModularICLTask(seed=2).teacher[0])


def test_r2_is_a_ratio_of_sums_against_the_context_mean() -> None:
    task = ModularICLTask(seed=0)
    batch = task.sample(64, "train")
    perfect = batch.targets[:, None, None]
    baseline = batch.labels["context_mean"][:, None, None]
    assert task.metrics(perfect, batch)["r2"].item() == pytest.approx(1.0)
    assert task.metrics(baseline, batch)["r2"].item() == pytest.approx(0.0, abs=1e-6)
    halves = [task.metric_sums(baseline, batch), task.metric_sums(perfect, batch)]
    sums = {k: float(halves[0][k] + halves[1][k]) for k in halves[0]}
    assert task.finish_metrics(sums, 128)["r2"] == pytest.approx(0.5, abs=1e-6)


def test_custom_masks_and_bad_configs_name_the_field() -> None:
    cfg = ModularICLConfig(support="custom", custom_masks=((0, 1), (1, 2), (2, 3), (3, 4), (4, 5)))
    assert len(cfg.ood_masks) == 10
    assert ModularICLConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match=r"custom_masks.*not a compositional support.*\[5\]"):
        ModularICLConfig(support="custom", custom_masks=((0, 1), (1, 2), (2, 3), (3, 4)))
    with pytest.raises(ValueError, match="num_examples=1"):
        ModularICLConfig(num_examples=1)
    with pytest.raises(ValueError, match="support='ring'"):
        ModularICLConfig(support="ring")
    with pytest.raises(ValueError, match="custom_masks"):
        ModularICLConfig(custom_masks=((0, 1),))
    with pytest.raises(ValueError, match="module indices run from 0 to 5"):
        ModularICLConfig(support="custom", custom_masks=((0, 6),))
    with pytest.raises(ValueError, match="support.*not a compositional"):
        ModularICLConfig(num_modules=2, support="disconnected")

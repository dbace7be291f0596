"""Fuzzy logic: the function, the splits, determinism, labels, bad configs."""

from __future__ import annotations

import json

import pytest
import torch

from latentlens.tasks import Batch, FuzzyLogicConfig, FuzzyLogicTask, fuzzy_dnf, make_task


def nested_loop_dnf(bits: list[list[int]], x: list[float]) -> float:
    """max over terms of min over variables, literal x_i or 1 - x_i, written out."""
    best = 0.0
    for term in bits:
        value = 1.0
        for bit, xi in zip(term, x, strict=True):
            value = min(value, xi if bit == 1 else 1.0 - xi)
        best = max(best, value)
    return best


def test_fuzzy_function_matches_nested_loops() -> None:
    gen = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 2, (20, 3, 5), generator=gen)
    x = torch.rand(20, 7, 5, generator=gen)
    fast = fuzzy_dnf(bits, x)
    for b in range(20):
        for t in range(7):
            assert fast[b, t].item() == nested_loop_dnf(bits[b].tolist(), x[b, t].tolist())


def test_default_split_counts_match_the_reference() -> None:
    task = FuzzyLogicTask()
    info = task.describe()
    assert info["counts"] == {"train": 33, "test": 33, "ood": 6}
    assert info["heldout_terms"] == [12, 13, 14, 15]
    json.dumps(info)  # JSON-ready


def test_splits_are_disjoint_and_every_seen_term_is_trained() -> None:
    task = FuzzyLogicTask(FuzzyLogicConfig(num_variables=5, num_terms=3, frac_test=0.7))
    as_sets = {s: {tuple(c) for c in task.combinations[s].tolist()} for s in task.splits}
    assert not as_sets["train"] & as_sets["test"]
    assert not as_sets["train"] & as_sets["ood"] and not as_sets["test"] & as_sets["ood"]
    seen = 32 - 8
    assert {t for c in as_sets["train"] for t in c} == set(range(seen))
    assert all(t >= seen for c in as_sets["ood"] for t in c)


def test_heldout_combinations_never_appear_in_training_batches() -> None:
    task = FuzzyLogicTask(seed=3)
    held_out = {tuple(c) for s in ("test", "ood") for c in task.combinations[s].tolist()}
    trained = set()
    for _ in range(50):
        batch = task.sample(256, "train")
        trained |= {tuple(t) for t in batch.labels["term_indices"].tolist()}
    assert not trained & held_out
    assert len(trained) == 33  # every training combination shows up


def test_labels_agree_with_inputs() -> None:
    task = FuzzyLogicTask(seed=1)
    batch = task.sample(64, "test")
    x, y = batch.inputs[..., :-1], batch.inputs[..., -1]
    expected = fuzzy_dnf(batch.labels["term_bits"], x)
    torch.testing.assert_close(y[:, :-1], expected[:, :-1], rtol=0, atol=0)
    assert torch.all(y[:, -1] == 0.0)
    torch.testing.assert_close(batch.targets, expected[:, -1], rtol=0, atol=0)
    torch.testing.assert_close(batch.labels["target_variance"], expected.var(1, unbiased=False))
    idx = batch.labels["term_indices"]
    assert torch.equal(task.combinations["test"][batch.labels["combination"]], idx)
    bits = batch.labels["term_bits"]
    assert torch.equal((bits * 2 ** torch.arange(3, -1, -1)).sum(-1), idx)  # first bit MSB


def test_same_seed_same_batches_different_seed_different() -> None:
    a, b, c = (FuzzyLogicTask(seed=s) for s in (5, 5, 6))
    first_a, first_b, first_c = a.sample(32), b.sample(32), c.sample(32)
    assert torch.equal(first_a.inputs, first_b.inputs)
    assert not torch.equal(first_a.inputs, first_c.inputs)
    second = a.sample(32)
    assert not torch.equal(first_a.inputs, second.inputs)  # the stream moves on
    stream_1, stream_2 = a.batches(16, seed=9), b.batches(16, seed=9)
    for _ in range(3):
        assert torch.equal(next(stream_1).inputs, next(stream_2).inputs)


def test_fixed_query_and_fixed_context_inputs() -> None:
    task = FuzzyLogicTask()
    query = task.sample(8, inputs="fixed_query").inputs[..., :-1]
    assert torch.all(query[:, -1] == query[:1, -1])
    assert not torch.equal(query[0, :-1], query[1, :-1])
    context = task.sample(8, inputs="fixed_context").inputs[..., :-1]
    assert torch.all(context[:, :-1] == context[:1, :-1])
    assert not torch.equal(context[0, -1], context[1, -1])


def test_r2_metric_is_one_for_perfect_and_zero_for_the_mean() -> None:
    batch = FuzzyLogicTask().sample(128)
    perfect = batch.targets[:, None, None].expand(-1, 16, 1)
    assert FuzzyLogicTask.metrics(perfect, batch)["r2"].item() == pytest.approx(1.0)
    assert FuzzyLogicTask.loss(perfect, batch).item() == 0.0
    y = torch.cat([batch.inputs[:, :-1, -1], batch.targets[:, None]], 1)
    mean_guess = y.mean(1)[:, None, None].expand(-1, 16, 1)
    variance_ratio = (mean_guess[:, -1, 0] - batch.targets).square() / y.var(1, unbiased=False)
    expected = (1 - variance_ratio).mean().item()
    assert FuzzyLogicTask.metrics(mean_guess, batch)["r2"].item() == pytest.approx(expected)


def test_batch_moves_between_devices() -> None:
    batch = FuzzyLogicTask().sample(4)
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and len(moved) == 4


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(num_variables=0), r"num_variables=0 is invalid"),
        (dict(seq_len=1), r"seq_len=1 is invalid"),
        (dict(frac_test=0.0), r"frac_test=0.0 is invalid"),
        (dict(frac_test=0.01), r"frac_test=0.01 splits 66 .* both must be non-empty"),
        (dict(frac_test=0.99), r"frac_test=0.99 .* terms \[.*\] occur in no training"),
        (dict(frac_ood_conj=0.9), r"frac_ood_conj=0.9 holds out 14 of 16 terms"),
        (dict(num_terms=5, frac_ood_conj=0.25), r"holds out 4 terms, fewer than num_terms=5"),
        (
            dict(num_variables=2, num_terms=2, frac_ood_conj=0.0, frac_test=0.9),
            r"frac_test=0.9 .* the terms \[0, 2\] occur in no training combination",
        ),
    ],
)
def test_bad_configs_name_the_field(overrides, match) -> None:
    with pytest.raises(ValueError, match=match):
        FuzzyLogicTask(FuzzyLogicConfig(**overrides))


def test_bad_sampling_arguments() -> None:
    task = FuzzyLogicTask()
    with pytest.raises(ValueError, match="split='valid' is unknown"):
        task.sample(4, "valid")
    with pytest.raises(ValueError, match="batch_size=0 is invalid"):
        task.sample(0)
    with pytest.raises(ValueError, match="inputs='gaussian' is unknown"):
        task.sample(4, inputs="gaussian")
    with pytest.raises(ValueError, match="task='logic' is unknown"):
        make_task("logic")

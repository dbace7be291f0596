"""SRAVEN: the rules, an independent checker, splits, permutations, tokens, ambiguity."""

from __future__ import annotations

import pytest
import torch

from latentlens.tasks import RULE_NAMES, SRavenConfig, SRavenTask, rule_answers

V = 8
HAND_BUILT = {  # rule id: 3x3 grid (rows are examples, columns the sequence)
    0: [[3, 3, 3], [5, 5, 5], [1, 1, 1]],
    1: [[6, 7, 0], [2, 3, 4], [7, 0, 1]],
    2: [[6, 0, 2], [1, 3, 5], [7, 1, 3]],
    3: [[1, 0, 7], [4, 3, 2], [0, 7, 6]],
    4: [[1, 7, 5], [4, 2, 0], [0, 6, 4]],
    5: [[3, 6, 1], [2, 2, 4], [5, 7, 4]],
    6: [[3, 6, 5], [2, 2, 0], [1, 4, 5]],
    7: [[2, 5, 7], [7, 2, 5], [5, 7, 2]],
}


def row_follows(rule: int, row: list[int], symbols: set[int] | None = None) -> bool:
    """Plain-Python statement of each rule for one row (a, b, c)."""
    a, b, c = row
    steps = {1: 1, 2: 2, 3: -1, 4: -2}
    if rule == 0:
        return a == b == c
    if rule in steps:
        return b == (a + steps[rule]) % V and c == (b + steps[rule]) % V
    if rule == 5:
        return c == (a + b) % V
    if rule == 6:
        return c == (a - b) % V
    return len({a, b, c}) == 3 and {a, b, c} == symbols


def grid_follows(rule: int, grid: list[list[int]]) -> bool:
    symbols = set(grid[0])
    return all(row_follows(rule, row, symbols) for row in grid)


def first_eight_fit(rule: int, grid: list[list[int]]) -> set[int]:
    """Answers a rule allows for the last cell given the first eight (empty: does not fit)."""
    return {c for c in range(V) if grid_follows(rule, [grid[0], grid[1], [*grid[2][:2], c]])}


def unpermuted_grid(batch) -> torch.Tensor:
    """Undo the labelled permutations: ``[batch, row, column, feature]``."""
    inverse = batch.labels["permutations"].argsort(-1)
    return batch.labels["grid"].gather(-1, inverse[:, None].expand(-1, 3, -1, -1))


@pytest.mark.parametrize("rule", sorted(HAND_BUILT))
def test_every_rule_on_a_hand_built_example(rule: int) -> None:
    grid = HAND_BUILT[rule]
    assert grid_follows(rule, grid), RULE_NAMES[rule]
    fits, answers = rule_answers(torch.tensor(grid), V)
    assert bool(fits[rule]) and int(answers[rule]) == grid[2][2]
    # the vectorised fit agrees with the plain statement for every rule on this grid
    for other in range(8):
        allowed = first_eight_fit(other, grid)
        assert bool(fits[other]) == bool(allowed)
        if allowed:
            assert allowed == {int(answers[other])}


def test_generated_grids_follow_their_labelled_rules() -> None:
    task = SRavenTask(seed=0)
    for split in ("train", "ood", "test_unpermuted"):
        batch = task.sample(300, split)
        grids = unpermuted_grid(batch).permute(0, 3, 1, 2).tolist()  # [batch, F, 3, 3]
        rules = batch.labels["rules"].tolist()
        unique_fits = 0
        for example_grids, example_rules in zip(grids, rules, strict=True):
            for grid, rule in zip(example_grids, example_rules, strict=True):
                fitting = [r for r in range(8) if grid_follows(r, grid)]
                assert rule in fitting
                unique_fits += fitting == [rule]
        assert unique_fits > 0.8 * 300 * 4  # the label is usually the only explanation


def test_every_rule_is_generated_with_the_right_statistics() -> None:
    task = SRavenTask(seed=1)
    batch = task.sample(4000, "train")
    rules = batch.labels["rules"]
    assert set(rules.unique().tolist()) == set(range(8))
    values = unpermuted_grid(batch)
    assert set(values.unique().tolist()) == set(range(V))
    # distribute-three: every row a permutation of the same three distinct symbols
    grid = values.permute(0, 3, 1, 2)[rules == 7]
    sorted_rows = grid.sort(-1).values
    assert torch.all(sorted_rows == sorted_rows[:, :1])
    assert torch.all(sorted_rows[..., 1:] > sorted_rows[..., :-1])


def test_labels_agree_with_inputs_and_permutations_invert() -> None:
    task = SRavenTask(seed=2)
    batch = task.sample(500, "train")
    grid = unpermuted_grid(batch).permute(0, 3, 1, 2)
    fits, answers = rule_answers(grid, V)
    rules = batch.labels["rules"]
    assert torch.all(fits.gather(-1, rules[..., None]))
    true_answer = answers.gather(-1, rules[..., None])[..., 0]  # [batch, F] unpermuted
    perm_last = batch.labels["permutations"][:, -1]
    assert torch.equal(true_answer.gather(1, perm_last), batch.targets)
    assert torch.equal(rules.gather(1, perm_last), batch.labels["answer_rules"])
    perms = batch.labels["permutations"]
    assert torch.equal(perms.sort(-1).values, torch.arange(4).expand_as(perms))
    assert (perms != torch.arange(4)).any()  # permuted split really permutes


def test_unpermuted_splits_keep_feature_order() -> None:
    batch = SRavenTask().sample(64, "ood_unpermuted")
    assert torch.equal(batch.labels["permutations"], torch.arange(4).expand(64, 3, 4))
    assert torch.equal(batch.labels["answer_rules"], batch.labels["rules"])


def test_tokens_are_one_hot_panels_then_zero_queries() -> None:
    batch = SRavenTask().sample(16)
    assert batch.inputs.shape == (16, 36, V)
    context = batch.inputs[:, :32]
    assert torch.all(context.sum(-1) == 1.0)
    panels = batch.labels["grid"].reshape(16, 9, 4)
    assert torch.equal(context.argmax(-1), panels[:, :8].reshape(16, 32))
    assert torch.all(batch.inputs[:, 32:] == 0.0)
    assert torch.equal(batch.targets, panels[:, 8])


def test_split_is_330_multisets_with_82_held_out_and_disjoint() -> None:
    task = SRavenTask()
    info = task.describe()
    assert info["counts"] == {"in_distribution": 248, "ood": 82}
    in_dist = {tuple(m) for m in info["in_distribution_multisets"]}
    ood = {tuple(m) for m in info["ood_multisets"]}
    assert len(in_dist | ood) == 330 and not in_dist & ood
    assert {r for m in in_dist for r in m} == set(range(8))


def test_ood_multisets_never_appear_in_training_batches() -> None:
    task = SRavenTask(seed=4)
    ood = set(task.ood_indices.tolist())
    seen = set()
    for _ in range(20):
        batch = task.sample(512, "train")
        seen |= set(batch.labels["combination"].tolist())
        assert not seen & ood
    assert len(seen) == 248
    assert set(task.sample(512, "ood").labels["combination"].tolist()) <= ood


def test_determinism_per_seed() -> None:
    a, b, c = SRavenTask(seed=7), SRavenTask(seed=7), SRavenTask(seed=8)
    first = a.sample(32)
    assert torch.equal(first.inputs, b.sample(32).inputs)
    assert not torch.equal(first.inputs, c.sample(32).inputs)
    assert not torch.equal(first.inputs, a.sample(32).inputs)


def test_ambiguity_counter_matches_an_independent_count() -> None:
    task = SRavenTask(seed=5)
    batch = task.sample(400, "train")
    flagged = task.ambiguous(batch).tolist()
    grids = unpermuted_grid(batch).permute(0, 3, 1, 2).tolist()
    for example, flag in zip(grids, flagged, strict=True):
        expected = any(
            bool(first_eight_fit(r, grid) - {grid[2][2]}) for grid in example for r in range(8)
        )
        assert flag == expected
    assert 0 < sum(flagged) < 400


def test_loss_and_accuracy() -> None:
    batch = SRavenTask().sample(64)
    perfect = torch.nn.functional.one_hot(batch.targets, V).float() * 50
    logits = torch.cat([torch.zeros(64, 32, V), perfect], 1)
    metrics = SRavenTask.metrics(logits, batch)
    assert metrics["accuracy"].item() == 1.0 and metrics["feature_accuracy"].item() == 1.0
    assert SRavenTask.loss(logits, batch).item() < 1e-6
    uniform = torch.zeros(64, 36, V)
    assert SRavenTask.loss(uniform, batch).item() == pytest.approx(torch.log(torch.tensor(8.0)))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(num_values=2), r"num_values=2 is invalid: distribute-three needs 3 distinct"),
        (dict(num_features=0), r"num_features=0 is invalid"),
        (dict(frac_ood=1.0), r"frac_ood=1.0 is invalid"),
        (dict(frac_ood=0.99), r"frac_ood=0.99 .* the rules \[.*\] never occur in training"),
    ],
)
def test_bad_configs_name_the_field(overrides, match) -> None:
    with pytest.raises(ValueError, match=match):
        SRavenTask(SRavenConfig(**overrides))

"""Swaps of SRAVEN's final-query codes (latentlens.probes.sraven_swaps) against slow
references written from their definitions: the one-rule donors' rules, the puzzles made
from shared draws, each rule's answer on a puzzle's last row, and the swap done one puzzle
at a time with a hand-written hook."""

from __future__ import annotations

import math

import pytest
import torch

from latentlens.models import DecoderTransformer, TransformerConfig, pattern_hook_name
from latentlens.probes.interventions import rows_of
from latentlens.probes.sraven_swaps import (
    DONOR_KINDS,
    answers,
    donor_puzzles,
    one_rule_rules,
    puzzles_of,
    rule_answer_on,
    sraven_code_swaps,
    swap_rule_codes,
)
from latentlens.tasks import make_task
from latentlens.tasks.sraven import RULE_NAMES

SPLIT = "ood_unpermuted"


def tiny() -> tuple[DecoderTransformer, object]:
    task = make_task("sraven", {"num_features": 3, "num_values": 5}, seed=0)
    torch.manual_seed(0)
    io = task.model_io()
    config = TransformerConfig.preset(
        "sraven", attention="softmax", d_model=16, n_layers=2, n_heads=4, qk_dim=8, v_dim=8, **io
    )
    return DecoderTransformer(config).eval(), task


def slow_answer(row: list[int], rule: int, first_row: list[int], values: int) -> int:
    """What ``rule`` answers after the last row's first two values ``row``, from the rule
    table of latentlens.tasks.sraven (distribute-three: the first row's symbol missing)."""
    name = RULE_NAMES[rule]
    a, b = row
    if name == "constant":
        return b
    if name.startswith("progression"):
        return (b + int(name.removeprefix("progression"))) % values
    if name == "addition":
        return (a + b) % values
    if name == "subtraction":
        return (a - b) % values
    (missing,) = [s for s in first_row if s not in (a, b)]
    return missing


def test_one_rule_donors_change_one_feature_and_keep_the_order() -> None:
    generator = torch.Generator().manual_seed(0)
    rules = torch.tensor([[0, 0, 0, 0], [0, 2, 5, 7], [7, 7, 7, 7], [1, 1, 6, 6]])
    for _ in range(20):
        changed = one_rule_rules(rules, generator)
        assert ((changed != rules).sum(-1) == 1).all()
        assert (changed.sort(-1).values == changed).all()
        assert ((changed >= 0) & (changed < len(RULE_NAMES))).all()


def test_puzzles_from_shared_draws_show_the_same_panels_where_the_rule_is_kept() -> None:
    _, task = tiny()
    generator = torch.Generator().manual_seed(1)
    draws = task.draw(64, SPLIT, generator)
    batch = task.assemble(draws, SPLIT)
    donor = donor_puzzles(task, batch, draws, "one-rule", generator)
    kept = donor.labels["rules"] == batch.labels["rules"]
    assert (kept.sum(-1) == task.config.num_features - 1).all()
    grids, donor_grids = batch.labels["grid"], donor.labels["grid"]  # [n, row, col, F]
    assert torch.equal(grids.permute(0, 3, 1, 2)[kept], donor_grids.permute(0, 3, 1, 2)[kept])
    # combinations from both pools come back in the order asked for
    wanted = torch.tensor([int(task.in_dist_indices[0]), int(task.ood_indices[0])] * 3)
    made = puzzles_of(task, wanted, task.draw(6, SPLIT, generator))
    assert torch.equal(made.labels["combination"].cpu(), wanted)
    for kind in DONOR_KINDS:
        donor = donor_puzzles(task, batch, draws, kind, generator)
        same = donor.labels["combination"] == batch.labels["combination"]
        assert bool(same.all()) == (kind == "same-combination")


def test_each_rules_answer_on_the_puzzles_own_last_row_is_the_rule_tables() -> None:
    _, task = tiny()
    batch = task.sample(32, SPLIT, torch.Generator().manual_seed(2))
    values = task.config.num_values
    for rule in range(len(RULE_NAMES)):
        rules = torch.full_like(batch.labels["rules"], rule)
        fast = rule_answer_on(batch, rules, values)
        grid = batch.labels["grid"]
        for n in range(len(batch)):
            for f in range(task.config.num_features):
                last = [int(grid[n, 2, c, f]) for c in range(2)]
                first = [int(grid[n, 0, c, f]) for c in range(3)]
                defined = len(set(first)) == 3 and len(set(last)) == 2 and set(last) < set(first)
                if RULE_NAMES[rule] == "distribute-three" and not defined:
                    continue  # the last row is no part of the first's symbols: no answer
                assert int(fast[n, f]) == slow_answer(last, rule, first, values), (n, f, rule)
    # a puzzle's own rules answer its own panel
    assert torch.equal(rule_answer_on(batch, batch.labels["rules"], values), batch.targets)


def test_the_swap_is_the_hand_written_hook_one_puzzle_at_a_time() -> None:
    model, task = tiny()
    generator = torch.Generator().manual_seed(3)
    draws = task.draw(16, SPLIT, generator)
    batch = task.assemble(draws, SPLIT)
    donor = donor_puzzles(task, batch, draws, "one-rule", generator)
    queries = task.config.num_features
    swapped_fast = {}
    for layer in (0, 1):
        name = pattern_hook_name(layer)
        _, cache = model.run_with_cache(donor.inputs, names_filter=[name])
        codes = cache[name][:, :, -queries:, :]
        swapped_fast[layer] = codes
    fast = answers(model, batch, queries, swapped_fast)
    for n in range(len(batch)):
        one = rows_of(batch, slice(n, n + 1))
        hooks = []
        for layer in (0, 1):

            def hook(pattern, hook, n=n, layer=layer):  # donor n's codes, written out
                out = pattern.clone()
                out[0, :, -queries:, :] = swapped_fast[layer][n]
                return out

            hooks.append((pattern_hook_name(layer), hook))
        logits = model.run_with_hooks(one.inputs, fwd_hooks=hooks)
        assert torch.equal(logits[0, -queries:].argmax(-1), fast[n])
    result = swap_rule_codes(model, task, batch, donor, (0, 1), "one-rule")
    theirs = rule_answer_on(batch, donor.labels["rules"], task.config.num_values)
    changed = (donor.labels["rules"] != batch.labels["rules"]) & (theirs != batch.targets)
    assert result.pairs == int(changed.sum())
    assert result.donor_swapped == pytest.approx(float((fast == theirs)[changed].double().mean()))


def test_a_swap_with_its_own_codes_changes_nothing_and_the_whole_run_reads() -> None:
    model, task = tiny()
    batch = task.sample(32, SPLIT, torch.Generator().manual_seed(4))
    itself = swap_rule_codes(model, task, batch, batch, (0, 1), "itself")
    assert itself.pairs == 0 and itself.kept_swapped == itself.kept_clean
    rows = sraven_code_swaps(model, task, examples=48)
    assert [(r["donor"], tuple(r["layers"])) for r in rows] == [
        (kind, layers) for kind in DONOR_KINDS for layers in ((0,), (1,), (0, 1))
    ]
    for row in rows:
        assert 0 <= row["kept_swapped"] <= 1
        assert (row["pairs"] == 0) == (row["donor"] == "same-combination")
        assert math.isnan(row["donor_swapped"]) == (row["pairs"] == 0)
    with pytest.raises(ValueError, match="unpermuted"):
        sraven_code_swaps(model, task, examples=8, split="ood")

"""Interventions on fuzzy logic's codes (latentlens.probes.code_interventions) against slow
references written from their definitions: the donors' functions and inputs, the swap and
the steering edit done one problem at a time with a hand-written hook, the fraction moved,
the flipped function, and the decoding of the terms by key."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latentlens.models import (
    DecoderTransformer,
    TransformerConfig,
    pattern_hook_name,
    use_fused_kernels,
)
from latentlens.probes.code_interventions import (
    clean_run,
    code_decoding_by_key,
    code_interventions,
    donor_problems,
    final_query_codes,
    final_query_run,
    fit_bit_decoder,
    flipped_targets,
    fraction_moved,
    predictions,
    r2_against,
    steer_codes,
    swap_codes,
)
from latentlens.probes.interventions import rows_of
from latentlens.probes.source import hooks_change_nothing, starts_at_layer
from latentlens.tasks import make_task

# The same float32 forward pass on a batch of one and a batch of many: matmuls blocked
# differently round differently, a few ulps of outputs of order 1.
BATCHED = 1e-5


def tiny(attention: str = "softmax") -> tuple[DecoderTransformer, object]:
    task = make_task("fuzzy-logic", {"seq_len": 8}, seed=0)
    torch.manual_seed(0)
    config = TransformerConfig.preset(
        "fuzzy-logic", attention=attention, n_ctx=8, d_model=16, n_heads=4, qk_dim=8, v_dim=8
    )
    return DecoderTransformer(config).eval(), task


def slow_dnf(terms: list[int], x: list[float], variables: int) -> float:
    """max over terms of min over variables of x_i (bit 1) or 1 - x_i (bit 0), MSB first."""
    values = []
    for term in terms:
        bits = [(term >> (variables - 1 - i)) & 1 for i in range(variables)]
        values.append(min(x[i] if bit else 1 - x[i] for i, bit in enumerate(bits)))
    return max(values)


def problem_batch(task, n: int = 40, seed: int = 1):
    return task.sample(n, "train", task.make_generator(seed), inputs="fixed_query")


def test_donors_change_the_function_or_the_context_and_nothing_else() -> None:
    _, task = tiny()
    batch = problem_batch(task)
    seen = task.config.num_term_kinds - task.config.num_heldout_terms
    variables = task.config.num_variables
    own = batch.labels["term_indices"].tolist()
    for kind in ("one-term", "random-combination", "same-combination"):
        donor = donor_problems(task, batch, kind, torch.Generator().manual_seed(0))
        terms = donor.labels["term_indices"].tolist()
        x = donor.inputs[..., :-1]
        assert torch.equal(x[:, -1], batch.inputs[:, -1, :-1])  # the query input is kept
        for i, (mine, theirs) in enumerate(zip(own, terms, strict=True)):
            assert all(0 <= t < seen for t in theirs) and len(set(theirs)) == len(theirs)
            different = len(set(mine) - set(theirs))
            assert different == {"one-term": 1, "same-combination": 0}.get(kind, different)
            assert kind == "same-combination" or different >= 1
            for t in range(task.config.seq_len):  # every y is the donor's function of its x
                expected = slow_dnf(theirs, x[i, t].tolist(), variables)
                given = donor.targets[i] if t == task.config.seq_len - 1 else donor.inputs[i, t, -1]
                assert float(given) == pytest.approx(expected, abs=1e-7)
        same_context = torch.equal(x[:, :-1], batch.inputs[:, :-1, :-1])
        assert same_context == (kind != "same-combination")
    with pytest.raises(ValueError, match="kind='two-terms' is unknown"):
        donor_problems(task, batch, "two-terms", torch.Generator())


def test_fraction_moved_is_the_least_squares_slope() -> None:
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(64, generator=generator)
    change = 0.3 * reference + 0.05 * torch.randn(64, generator=generator)
    moved, error = fraction_moved(change, reference)
    r, c = reference.double().numpy(), change.double().numpy()
    assert moved == pytest.approx(float(r @ c / (r @ r)), abs=1e-12)
    assert 0 < error < 0.05
    assert fraction_moved(reference, reference)[0] == pytest.approx(1.0, abs=1e-12)
    assert fraction_moved(torch.zeros(64), reference)[0] == 0.0


@pytest.mark.parametrize("attention", ["softmax", "hyla"])
@torch.no_grad()
def test_a_swap_is_the_donors_codes_put_in_one_problem_at_a_time(attention: str) -> None:
    model, task = tiny(attention)
    batch = problem_batch(task, 24)
    donor = donor_problems(task, batch, "one-term", torch.Generator().manual_seed(2))
    result = swap_codes(model, batch, donor, [1], "one-term")
    slow = []
    for i in range(len(batch)):
        one, other = rows_of(batch, slice(i, i + 1)), rows_of(donor, slice(i, i + 1))
        _, cache = model.run_with_cache(other.inputs, names_filter=[pattern_hook_name(1)])
        row = cache[pattern_hook_name(1)][0, :, -1, :]

        def put(pattern, hook, row=row):
            pattern = pattern.clone()
            pattern[0, :, -1, :] = row
            return pattern

        output = model.run_with_hooks(one.inputs, fwd_hooks=[(pattern_hook_name(1), put)])
        slow.append(float(output[0, -1, 0]))
    clean, donor_run = predictions(model, batch), predictions(model, donor)
    assert swap_codes(model, batch, donor, [1], "one-term", clean) == result  # clean passed in
    slow = torch.tensor(slow)
    codes = final_query_codes(model, donor, [1])
    # the donor's codes and its own run come from one pass, the numbers of two
    output, same_codes = final_query_run(model, donor, [1])
    assert torch.equal(output[:, -1, 0], donor_run) and torch.equal(same_codes, codes)
    assert result.r2_donor_run == r2_against(donor_run, donor)
    fast = predictions(model, batch, {1: codes[:, 0]})
    torch.testing.assert_close(fast, slow, atol=BATCHED, rtol=0)
    expected = float(
        ((slow - clean) * (donor_run - clean)).sum() / (donor_run - clean).square().sum()
    )
    assert result.moved == pytest.approx(expected, abs=1e-4)
    variance = batch.labels["target_variance"]
    own = 1 - ((slow - batch.targets) ** 2 / variance).mean()
    assert result.r2_own == pytest.approx(float(own), abs=1e-4)
    assert result.r2_own_clean != result.r2_own  # the codes are not inert in a random model
    # from the streams the clean pass brought to block 1, a swap there runs block 1 on:
    # the same numbers bit for bit
    clean_again, entering = clean_run(model, batch)
    assert torch.equal(clean_again, clean) and set(entering) == {1}
    for layers in ([0], [1], [0, 1]):
        whole = swap_codes(model, batch, donor, layers, "one-term", clean)
        assert swap_codes(model, batch, donor, layers, "one-term", clean, entering) == whole
    itself = swap_codes(model, batch, batch, [0, 1], "itself")  # a swap with oneself: no change
    assert itself.r2_own == pytest.approx(itself.r2_own_clean, abs=BATCHED)


def test_the_flipped_function_negates_one_literal_of_one_term() -> None:
    _, task = tiny()
    batch = problem_batch(task, 12)
    variables = task.config.num_variables
    for bit in (0, variables - 1, variables, 2 * variables - 1):
        flipped = flipped_targets(task, batch, bit)
        term, variable = divmod(bit, variables)
        for i, terms in enumerate(batch.labels["term_indices"].tolist()):
            terms[term] ^= 1 << (variables - 1 - variable)
            expected = slow_dnf(terms, batch.inputs[i, -1, :-1].tolist(), variables)
            assert float(flipped[i]) == pytest.approx(expected, abs=1e-7)


@torch.no_grad()
def test_steering_adds_the_smallest_edit_that_moves_the_decoded_bit_by_one() -> None:
    model, task = tiny("hyla")
    batch = problem_batch(task, 200)
    codes = final_query_codes(model, batch, [1])[:, 0]
    bits = batch.labels["term_bits"].flatten(1).float()
    weights, _ = fit_bit_decoder(codes.flatten(1), bits)
    bit = 2
    w = weights[bit]
    step = w / w.square().sum()  # the minimal-norm edit with w·step = 1
    assert float(w @ step) == pytest.approx(1.0, abs=1e-12)
    held = rows_of(batch, slice(0, 16))
    result = steer_codes(model, task, held, 1, weights, bit, seed=0, directions=5)
    assert result.edit_norm == pytest.approx(float(1 / w.norm()), rel=1e-6)  # float32 norm
    clean = predictions(model, held)
    changes = []
    for i in range(len(held)):
        one = rows_of(held, slice(i, i + 1))
        sign = 1.0 - 2.0 * float(one.labels["term_bits"].flatten(1)[0, bit])

        def add(pattern, hook, sign=sign):
            pattern = pattern.clone()
            pattern[0, :, -1, :] += sign * step.reshape(pattern.shape[1], -1).float()
            return pattern

        output = model.run_with_hooks(one.inputs, fwd_hooks=[(pattern_hook_name(1), add)])
        changes.append(float(output[0, -1, 0]) - float(clean[i]))
    assert result.change == pytest.approx(float(np.mean(np.abs(changes))), abs=BATCHED)
    flip = (flipped_targets(task, held, bit) - held.targets).double().numpy()
    toward = float(np.dot(changes, flip) / np.dot(flip, flip))
    assert result.toward == pytest.approx(toward, abs=1e-3)
    assert result.p_value in {k / 6 for k in range(1, 7)}
    assert result.random_change_band[0] <= result.random_change <= result.random_change_band[1]


def test_terms_planted_in_one_key_decode_from_that_key_alone() -> None:
    generator = torch.Generator().manual_seed(0)
    n, layers, heads, keys = 400, 2, 3, 5
    bits = torch.randint(0, 2, (n, 4), generator=generator).float()
    codes = torch.rand(n, layers, heads, keys, generator=generator) * 0.1
    codes[:, 1, :, 2] += bits[:, :3] * 0.5  # layer 1, key 2 carries bits 0-2 only
    result = code_decoding_by_key(codes, bits, permutations=20)
    by_key = [[cell["test"] for cell in row] for row in result["by_key"]]
    assert by_key[1][2] == pytest.approx(0.75, abs=0.03)  # three of four bits, each R² ≈ 1
    assert max(max(row) for row in by_key[:1]) < 0.03
    assert max(by_key[1][k] for k in (0, 1, 3, 4)) < 0.03
    assert result["by_key"][1][2]["p_value"] == pytest.approx(1 / 21)
    assert result["pooled"][1]["test"] > 0.7 and result["pooled"][0]["test"] < 0.03
    assert result["self_all_layers"]["test"] < 0.03  # the last key carries nothing


def test_every_analysis_runs_on_one_model() -> None:
    model, task = tiny("linear")
    result = code_interventions(model, task, examples=64)
    assert len(result["swaps"]) == 3 * 3  # three donors, each layer and both
    assert len(result["steering"]) == 2 * 2 * task.config.num_variables
    assert len(result["decoding"]["by_key"][0]) == task.config.seq_len


@torch.no_grad()
def test_on_the_fused_kernels_the_donors_run_is_its_own_hook_free_pass() -> None:
    """Reading a fused model's patterns takes its attention off the fused kernel (the same
    function to float32 rounding, not bit for bit), so there a swap runs the donor once
    more without hooks and no pass starts at a later block: a fused run's probe gives the
    numbers it gave before passes were shared."""
    model, task = tiny("hyla")
    use_fused_kernels(model)
    batch = problem_batch(task, 64)
    donor = donor_problems(task, batch, "random-combination", torch.Generator().manual_seed(3))
    assert not hooks_change_nothing(model) and not starts_at_layer(model)
    clean, entering = clean_run(model, batch)
    assert entering == {} and torch.equal(clean, predictions(model, batch))
    result = swap_codes(model, batch, donor, [0], "random-combination", clean, entering)
    assert result.r2_donor_run == r2_against(predictions(model, donor), donor)

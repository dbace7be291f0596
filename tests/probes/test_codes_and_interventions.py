"""The protocols' code sets, decoding tables over heads, and interventions."""

from __future__ import annotations

import pytest
import torch

from latentlens.models import DecoderTransformer, EncoderDecoderTransformer
from latentlens.probes import interventions
from latentlens.probes.codes import CodeSet, fuzzy_logic_codes, sraven_codes, sraven_key_positions
from latentlens.probes.decoding import decoding_table
from latentlens.probes.interventions import (
    ablate_head,
    head_ablation_hook,
    head_ablation_table,
    patch_latent_code,
    stream_keepers,
    swap_rule_codes,
    task_metric,
)
from latentlens.tasks import make_task
from latentlens.training import model_for_task

SMALL = dict(d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64)


def model_for(task: str, **extra) -> DecoderTransformer:
    torch.manual_seed(0)
    return DecoderTransformer(model_for_task(task, None, **SMALL, **extra)).eval()


def test_sraven_keys_follow_the_permuted_feature() -> None:
    task = make_task("sraven", None, seed=0)
    batch = task.sample(64, "train")  # permuted
    num_features = task.config.num_features
    keys = sraven_key_positions(batch, num_features)
    perms, grid = batch.labels["permutations"], batch.labels["grid"]
    feature = perms[:, 2, -1]
    for b in range(64):
        for column in (0, 1):
            position = int(keys[b, column])
            panel, slot = divmod(position, num_features)
            assert panel == 6 + column
            assert perms[b, column, slot] == feature[b]  # the same feature as the answer slot
            assert batch.inputs[b, position].argmax() == grid[b, 2, column, slot]
    unpermuted = task.sample(8, "test_unpermuted")
    expected = torch.tensor([6 * num_features + 3, 7 * num_features + 3])
    assert torch.equal(sraven_key_positions(unpermuted, num_features), expected.expand(8, 2))


def test_code_sets_have_the_protocol_shapes_and_labels() -> None:
    logic = make_task("fuzzy-logic", None, seed=0)
    codes = fuzzy_logic_codes(model_for("fuzzy-logic"), logic, "test", examples=40)
    assert codes.codes.shape == (40, 2, 4, 1) and codes.target.shape == (40, 8)
    assert codes.features().shape == (40, 8) and codes.features([1], [0, 2]).shape == (40, 2)
    _assert_fuzzy_logic_codes_are_the_patterns(logic)
    raven = make_task("sraven", None, seed=0)
    model = model_for("sraven", n_layers=2)
    codes = sraven_codes(model, raven, "ood_unpermuted", examples=24)
    assert codes.codes.shape == (24, 2, 4, 2) and codes.target.shape == (24,)
    # the codes are the pattern entries of the final query at the two keys
    generator = raven.make_generator(0)
    batch = raven.sample(24, "ood_unpermuted", generator)
    _, cache = model.run_with_cache(batch.inputs, names_filter=["blocks.1.attn.hook_pattern"])
    keys = sraven_key_positions(batch, 4)
    pattern = cache["blocks.1.attn.hook_pattern"]
    for b in range(24):
        torch.testing.assert_close(codes.codes[b, 1], pattern[b, :, -1, keys[b]])
    assert torch.equal(codes.target, batch.labels["answer_rules"][:, -1])


def _assert_fuzzy_logic_codes_are_the_patterns(logic) -> None:
    """Drawn 256 at a time and read in a joined pass with the last block's last query alone,
    the codes are a[:, T-1, T-1] of every layer in a plain pass over the same draws (float32
    rounding of the same sums blocked otherwise: values in [0, 1], 1e-6 a few ulp)."""
    model = model_for("fuzzy-logic")
    codes = fuzzy_logic_codes(model, logic, "train", examples=300)
    generator = logic.make_generator(0)
    batches = [logic.sample(n, "train", generator, inputs="fixed_query") for n in (256, 44)]
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(2)]
    with torch.no_grad():
        caches = [model.run_with_cache(batch.inputs, names_filter=names)[1] for batch in batches]
    for layer, name in enumerate(names):
        expected = torch.cat([cache[name][:, :, -1, -1] for cache in caches])
        torch.testing.assert_close(codes.codes[:, layer, :, 0], expected, rtol=0, atol=1e-6)
    bits = torch.cat([batch.labels["term_bits"] for batch in batches]).reshape(300, -1)
    assert torch.equal(codes.target, bits.float())


def test_decoding_table_finds_the_head_that_carries_the_rule() -> None:
    generator = torch.Generator().manual_seed(0)
    rules = torch.randint(0, 3, (600,), generator=generator)
    codes = torch.rand(600, 2, 3, 2, generator=generator)
    codes[:, 1, 2, 0] = rules.float() + 0.05 * torch.randn(600, generator=generator)
    fit = CodeSet(codes[:300], rules[:300], rules[:300, None], rules[:300], "id", "classification")
    test = CodeSet(
        codes[300:], rules[300:], rules[300:, None], rules[300:], "ood", "classification"
    )
    rows = {(r["layer"], r["heads"]): r for r in decoding_table(fit, test)}
    assert rows[("all", "all")]["test"] == 1.0
    assert rows[(1, "h2")]["test"] == 1.0
    assert rows[(1, "-h2")]["test"] < 0.5  # dropping the carrier loses the rule
    assert rows[(0, "all")]["test"] < 0.5  # layer 0 carries nothing
    assert rows[(1, "h2")]["shuffled"] < 0.5
    assert len(rows) == 1 + 2 * (1 + 3 + 3)


def test_head_ablation_equals_a_manual_zeroing_and_a_dead_head_changes_nothing() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    model = model_for("fuzzy-logic")
    batch = task.sample(64, "test")
    result = ablate_head(model, task, batch, layer=0, head=1)

    def zero(z, hook):
        z[:, :, 1] = 0.0
        return z

    with torch.no_grad():
        manual = model.run_with_hooks(batch.inputs, fwd_hooks=[("blocks.0.attn.hook_z", zero)])
    assert result.intervened == pytest.approx(float(task.metrics(manual, batch)["r2"]))
    assert result.change != 0.0
    with torch.no_grad():
        model.blocks[1].attn.W_O[3] = 0.0  # head 3 of layer 1 writes nothing
    rows = head_ablation_table(model, task, batch)
    assert len(rows) == 8
    dead = next(r for r in rows if (r["layer"], r["head"]) == (1, 3))
    assert dead["change"] == 0.0
    mean = ablate_head(model, task, batch, layer=0, head=1, mode="mean")
    assert mean.intervened != result.intervened
    with pytest.raises(ValueError, match="mode='drop'"):
        ablate_head(model, task, batch, 0, 1, mode="drop")


def test_head_ablation_table_measures_its_baseline_once(monkeypatch) -> None:
    """One forward pass of the batch per head plus one for the shared baseline (it was two
    per head: 128 passes, 100 s, for SRAVEN's 64 heads on a CPU); every row equals that
    head's own ablate_head, bit for bit, though a head of block 1 is run from block 1 on
    (the stream entering it kept from the baseline's pass). Zeroing a head, each pass
    computes the last block at the position the metric reads alone: the metric every
    position gives, to float32 rounding (relative 1e-6: the same sums blocked otherwise;
    the untrained model's R² is near -200)."""
    task = make_task("fuzzy-logic", None, seed=0)
    model = model_for("fuzzy-logic")
    batch = task.sample(64, "test")
    sizes: list[int] = []  # the batch size of every forward pass, from a permanent hook
    positions: list[torch.Size] = []  # the last block's [batch, positions] after its keys
    model.add_hook("hook_embed", lambda x, hook: sizes.append(len(x)), is_permanent=True)
    last_z = f"blocks.{model.cfg.n_layers - 1}.attn.hook_z"
    model.add_hook(last_z, lambda z, hook: positions.append(z.shape[:2]), is_permanent=True)
    try:
        rows = head_ablation_table(model, task, batch)
    finally:
        model.reset_hooks(including_permanent=True)
    # block 0 runs in the baseline's pass and layer 0's heads' alone
    assert sizes.count(len(batch)) == 1 + 4 and len(rows) == 8
    passes = [n for examples, n in positions if examples == len(batch)]
    assert passes == [task.loss_positions] * (len(rows) + 1)
    monkeypatch.setattr(interventions, "starts_at_layer", lambda model: False)
    assert head_ablation_table(model, task, batch) == rows  # every pass from the inputs
    for row in rows:
        alone = ablate_head(model, task, batch, row["layer"], row["head"])
        assert (row["baseline"], row["intervened"]) == (alone.baseline, alone.intervened)
        hook = head_ablation_hook(model, row["layer"], row["head"], "zero", "")
        every = task_metric(model, task, batch, [hook], row["metric"], every_position=True)
        assert row["intervened"] == pytest.approx(every.value, rel=1e-6)


@pytest.mark.parametrize(
    ("task_name", "metric"), [("fuzzy-logic", "r2"), ("sraven", "feature_accuracy")]
)
def test_a_changes_standard_error_matches_its_spread_over_independent_batches(
    task_name: str, metric: str
) -> None:
    """The standard error a result reports (from 16 parts of one batch) is the sampling
    noise of its change: over 20 independent batches the changes spread by it. Measured
    ratios 1.18 (fuzzy logic, whose per-example R² is heavy-tailed on an untrained model)
    and 0.87; each side is a 20-batch estimate good to about 16%, so [0.6, 1.6] is three
    of those wide. A head that writes nothing changes nothing, with no error."""
    task = make_task(task_name, None, seed=0)
    model = model_for(task_name)
    results = [
        ablate_head(model, task, task.sample(256, "test", task.make_generator(100 + i)), 0, 1,
                    metric=metric)
        for i in range(20)
    ]  # fmt: skip
    spread = torch.tensor([r.change for r in results]).std().item()
    reported = sum(r.standard_error for r in results) / len(results)
    assert 0.6 < reported / spread < 1.6, (reported, spread)
    with torch.no_grad():
        model.blocks[0].attn.W_O[1] = 0.0
    dead = ablate_head(model, task, task.sample(64, "test"), 0, 1, metric=metric)
    assert dead.change == 0.0 and dead.standard_error == 0.0
    one = ablate_head(model, task, task.sample(1, "test"), 0, 2, metric=metric)
    assert one.standard_error is None and one.to_dict()["standard_error"] is None


def test_patching_from_itself_is_a_no_op_and_from_others_changes_the_metric() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    model = model_for("fuzzy-logic")
    batch = task.sample(64, "test")
    same = patch_latent_code(model, task, batch, batch, layer=1, query=15, key=15)
    assert same.change == pytest.approx(0.0, abs=1e-6)
    other = task.sample(64, "test", task.make_generator(9))
    changed = patch_latent_code(model, task, batch, other, layer=1, query=15, key=15)
    assert abs(changed.change) > 1e-4
    # a baseline read once for several layers gives each the same result, and a patched
    # pass that starts at its block from the stream the baseline's pass brought there too
    entering: dict[int, torch.Tensor] = {}
    baseline = task_metric(model, task, batch, stream_keepers(model, [0, 1], entering))
    assert set(entering) == {1}
    for layer in (0, 1):
        alone = patch_latent_code(model, task, batch, other, layer, 15, 15)
        for streams in (None, entering):
            assert patch_latent_code(model, task, batch, other, layer, 15, 15,
                                     baseline=baseline, entering=streams) == alone  # fmt: skip
    with pytest.raises(ValueError, match="equal sizes"):
        patch_latent_code(model, task, batch, task.sample(3, "test"), 1, 15, 15)


def test_swapping_rule_codes() -> None:
    task = make_task("sraven", None, seed=0)
    model = model_for("sraven", n_layers=2)
    batch = task.sample(256, "test_unpermuted")
    rules = batch.labels["answer_rules"][:, -1]
    keys = sraven_key_positions(batch, 4)[:, 1]
    result = swap_rule_codes(model, task, batch, rules, 0, 5, 1, -1, keys, "feature_accuracy")
    assert result.metric == "feature_accuracy" and 0.0 <= result.intervened <= 1.0
    # measured on exactly the examples of the two rules
    chosen = (rules == 0) | (rules == 5)
    with torch.no_grad():
        subset_out = model(batch.inputs[chosen])
    sub = type(batch)(batch.inputs[chosen], batch.targets[chosen], {})
    expected = float(task.metrics(subset_out, sub)["feature_accuracy"])
    assert result.baseline == pytest.approx(expected)
    with pytest.raises(ValueError, match="needs examples of both rules"):
        swap_rule_codes(model, task, batch, rules, 0, 99, 1, -1, keys)


def test_interventions_on_an_encoder_decoder_feed_its_task_inputs() -> None:
    """Translation models take (source, decoder inputs): ablations and patches feed them
    the task's own model inputs, and reach the decoder's cross-attention codes."""
    task = make_task("translation", None, seed=0)
    torch.manual_seed(0)
    cfg = model_for_task("translation", None, "fusion", d_model=16, n_heads=2, qk_dim=8,
                         v_dim=8, d_mlp=32, n_layers_encoder=2, n_layers_decoder=2)  # fmt: skip
    model = EncoderDecoderTransformer(cfg).eval()
    batch = task.sample(16, "train")
    rows = head_ablation_table(model, task, batch)
    lines = list(dict.fromkeys((r["prefix"], r["layer"]) for r in rows))  # the model's order
    assert lines == [("encoder.", 0), ("encoder.", 1), ("decoder.", 0), ("decoder.", 1)]
    assert len(rows) == 8 and all(r["metric"] == rows[0]["metric"] for r in rows)
    cross = dict(layer=1, query=3, key=2, prefix="decoder.", module="cross_attn")
    same = patch_latent_code(model, task, batch, batch, **cross)
    assert same.change == pytest.approx(0.0, abs=1e-6)
    other = task.sample(16, "train", task.make_generator(9))
    name = "decoder.blocks.1.cross_attn.hook_pattern"
    with torch.no_grad():
        donor = model.run_with_cache(*task.model_inputs(other), names_filter=[name])[1][name]

    def by_hand(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        pattern = pattern.clone()
        pattern[:, :, 3, 2] = donor[:, :, 3, 2]
        return pattern

    # What the patched pair feeds on: the cross-attention's output z, recorded in the
    # intervention's last (patched) forward pass and computed here by hand.
    z_name = "decoder.blocks.1.cross_attn.hook_z"
    inputs = task.model_inputs(batch)
    with torch.no_grad(), model.hooks(fwd_hooks=[(name, by_hand)]):
        manual = model.run_with_cache(*inputs, names_filter=[z_name])[1][z_name]
    with torch.no_grad():
        plain = model.run_with_cache(*inputs, names_filter=[z_name])[1][z_name]
    seen = {}
    model.add_hook(z_name, lambda z, hook: seen.update(z=z.clone()))
    try:
        patched = patch_latent_code(model, task, batch, other, **cross)
    finally:
        model.reset_hooks()
    torch.testing.assert_close(seen["z"], manual, rtol=0, atol=0)
    assert not torch.equal(manual[:, 3], plain[:, 3])  # the patch reaches query 3's output
    torch.testing.assert_close(manual[:, :3], plain[:, :3], rtol=0, atol=0)  # and no other
    assert patched.metric == "token_accuracy"
    with pytest.raises(ValueError, match=r"blocks.1.cross_attn.hook_pattern is not a hook"):
        patch_latent_code(model, task, batch, other, 1, 3, 2, module="cross_attn")  # no prefix

"""The probes on any hooked model and any labelled source: a TransformerLens
TransformerBridge over a tiny config-built GPT-2 (random weights, written by the test, no
download), latentlens token models, and token pairs with a relation the test defines."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from latentlens import latent_codes
from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.pretrained import load_language_model, write_tiny_gpt2
from latentlens.probes import (
    LabelledSource,
    TokenPairs,
    latent_atlas,
    pair_codes,
    pattern_hooks,
    repeated_token_pairs,
)
from latentlens.probes.interventions import head_ablation_table, patch_latent_code
from latentlens.probes.relations import DISTANCE_RANGES, HELD_OUT
from latentlens.tasks import make_task

VOCAB = 96


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"), vocab_size=VOCAB)


@pytest.fixture
def bridge(gpt2_folder):
    return load_language_model(str(gpt2_folder), "cpu")


def _pairs(examples: int = 600, seed: int = 0) -> TokenPairs:
    return repeated_token_pairs(VOCAB, examples, seed=seed, bos_token_id=0, exclude=[0, 1])


def test_latentlens_tasks_and_token_pairs_are_labelled_sources() -> None:
    assert isinstance(make_task("fuzzy-logic", None, seed=0), LabelledSource)
    assert isinstance(_pairs(), LabelledSource)


def test_repeated_token_pairs_hold_the_relation_they_are_labelled_with() -> None:
    pairs = _pairs(900, seed=3)
    assert torch.equal(pairs.tokens, _pairs(900, seed=3).tokens)  # seeded
    assert not torch.equal(pairs.tokens, _pairs(900, seed=4).tokens)
    for i in range(len(pairs)):
        tokens, key, relation = pairs.tokens[i], int(pairs.keys[i, 0]), int(pairs.label[i])
        assert tokens[0] == 0 and int(pairs.query[i]) == len(tokens) - 1
        earlier = (tokens[1:-1] == tokens[-1]).nonzero().flatten() + 1
        assert len(earlier) == 1  # the query's token occurs exactly once before it
        assert len(set(tokens[1:-1].tolist())) == len(tokens) - 2  # no other repeat
        first = int(earlier[0])
        assert {0: key == first, 1: key == first + 1}.get(relation, key not in (first, first + 1))
        assert pairs.answer[i] == tokens[first + 1]
        low, high = DISTANCE_RANGES[int(pairs.factors[i, 1])]
        assert low <= int(pairs.query[i]) - key <= high
    held_out = {tuple(row) for row in pairs.factors[pairs.ood].tolist()}
    seen = {tuple(row) for row in pairs.factors[~pairs.ood].tolist()}
    assert held_out == set(HELD_OUT) and not held_out & seen and len(seen) == 6


def test_pair_codes_of_a_bridge_equal_the_pattern_read_by_hand(bridge) -> None:
    pairs = _pairs()
    codes = pair_codes(bridge, pairs, "ood", examples=50, batch_size=16, seed=2)
    order = next(pairs.labelled_batches("ood", 50, batch_size=50, seed=2)).labels["index"]
    _, cache = bridge.run_with_cache(
        pairs.tokens[order], names_filter=lambda n: n.endswith("attn.hook_pattern")
    )
    for layer in range(2):
        by_pair = latent_codes(cache, layer)  # [batch, query, key, head]
        expected = by_pair[torch.arange(50), pairs.query[order], pairs.keys[order, 0]]
        torch.testing.assert_close(codes.codes[:, layer, :, 0], expected, rtol=0, atol=0)
    assert torch.equal(codes.target, pairs.label[order])
    assert codes.codes.shape == (50, 2, 4, 1)


def test_pair_codes_of_a_latentlens_token_model() -> None:
    cfg = TransformerConfig(n_ctx=32, d_output=VOCAB, vocab_size=VOCAB, d_model=32,
                            n_layers=2, n_heads=4, causal=True)  # fmt: skip
    model = DecoderTransformer(cfg)
    pairs = _pairs()
    codes = pair_codes(model, pairs, "id")
    assert codes.codes.shape == (int((~pairs.ood).sum()), 2, 4, 1)
    assert torch.isfinite(codes.codes).all() and (codes.codes >= 0).all()


def _plant_duplicate_head(bridge, scale: float = 4.0) -> None:
    """Layer 0 head 0 of the tiny GPT-2 becomes a duplicate-token head: its query and key
    maps are one projection (a token's query meets its own key best) and positions are
    removed."""
    gpt2 = bridge.original_model
    width = gpt2.config.n_embd
    head = width // gpt2.config.n_head
    projection = torch.randn(width, head, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gpt2.transformer.wpe.weight.zero_()
        qkv = gpt2.transformer.h[0].attn.c_attn
        qkv.weight[:, :head] = scale * projection
        qkv.weight[:, width : width + head] = scale * projection
        qkv.bias.zero_()


def test_the_atlas_finds_a_planted_duplicate_token_head(bridge) -> None:
    _plant_duplicate_head(bridge)
    results = latent_atlas(bridge, _pairs(1200), "planted", ablation=False)
    rows = {(r["layer"], r["heads"]): r for r in results["decoding"]}
    planted = rows[(0, "h0")]
    # The head tells duplicate pairs from the rest, not induction from unrelated: 2/3 at
    # best. OOD holds 400 pairs, so chance's standard error is 0.024.
    assert planted["test"] > 0.6 and planted["id_test"] > 0.6
    assert planted["chance"] < 0.36 and planted["shuffled"] < 0.45
    for head in (1, 2, 3):
        assert rows[(0, f"h{head}")]["test"] < 0.45
    weight = {(r["layer"], r["head"], r["relation"]): r["mean"] for r in results["mean_weight"]}
    assert weight[(0, 0, "duplicate")] > 0.4 > 0.05 > weight[(0, 0, "induction")]
    assert results["embedding"]["layer"] == 0
    assert not results["degenerate"]


def test_the_atlas_of_a_random_model_does_not_decode_held_out_combinations(bridge) -> None:
    results = latent_atlas(bridge, _pairs(1200), "random")
    overall = results["decoding"][0]
    assert overall["test"] < overall["chance"] + 0.1  # it can fail, and here it does
    assert {r["layer"] for r in results["clustering"]} == {0, 1}
    assert len(results["ablation"]) == 8 and results["ablation"][0]["metric"] == "answer_logprob"


def test_interventions_run_on_a_bridge_with_token_pairs(bridge) -> None:
    pairs = _pairs()
    batch = pairs.batch(torch.arange(64))
    with torch.no_grad():
        plain = pairs.metrics(bridge(batch.inputs), batch)["answer_logprob"]
    rows = head_ablation_table(bridge, pairs, batch, metric="answer_logprob")
    assert len(rows) == 8
    assert all(r["baseline"] == pytest.approx(float(plain), abs=1e-5) for r in rows)
    assert any(abs(r["change"]) > 0 for r in rows)
    query = int(pairs.query[0])
    same = patch_latent_code(bridge, pairs, batch, batch, 1, query, query, "answer_logprob")
    assert same.change == pytest.approx(0.0, abs=1e-6)  # its own code patched in: no change
    other = pairs.batch(torch.arange(64, 128))
    patched = patch_latent_code(bridge, pairs, batch, other, 1, query, 3, "answer_logprob")
    assert patched.change != 0.0


def test_bad_pairs_are_clear_errors() -> None:
    tokens = torch.randint(2, 50, (6, 10))
    keys, ood = torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([0, 0, 0, 0, 1, 1]).bool()
    with pytest.raises(ValueError, match="label has 5 rows but tokens has 6 sequences"):
        TokenPairs.build(tokens, torch.full((6,), 9), keys, [0, 1, 0, 1, 0], ood)
    with pytest.raises(ValueError, match="'id' split holds 1 class"):
        TokenPairs.build(tokens, torch.full((6,), 9), keys, [0, 0, 0, 0, 0, 1], ood)
    with pytest.raises(ValueError, match="query holds positions outside"):
        TokenPairs.build(tokens, torch.full((6,), 10), keys, [0, 1, 0, 1, 0, 1], ood)
    with pytest.raises(ValueError, match="integer token ids"):
        TokenPairs.build(tokens.float(), torch.full((6,), 9), keys, [0, 1, 0, 1, 0, 1], ood)
    pairs = TokenPairs.build(tokens, torch.full((6,), 9), keys, [0, 1, 0, 1, 0, 1], ood)
    with pytest.raises(ValueError, match="exceeds the 2 examples of split 'ood'"):
        next(pairs.labelled_batches("ood", 3))
    with pytest.raises(ValueError, match="seq_len=20 is too short"):
        repeated_token_pairs(VOCAB, seq_len=20)


class _NoPatterns(HookedRootModule):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.hook_embed = HookPoint()
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.hook_embed(self.embed(tokens))


def test_a_model_without_pattern_hooks_is_a_clear_error(gpt2_folder) -> None:
    with pytest.raises(ValueError, match="has no blocks.{layer}.attn.hook_pattern hook points"):
        pattern_hooks(_NoPatterns())
    from transformers import GPT2LMHeadModel

    bare = GPT2LMHeadModel.from_pretrained(gpt2_folder)
    with pytest.raises(TypeError, match="load_language_model"):
        pair_codes(bare, _pairs(), "id")


def test_loading_a_missing_model_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="no folder /nowhere/model"):
        load_language_model("/nowhere/model", "cpu")
    with pytest.raises(ValueError, match="the folder holds no Hugging Face model"):
        load_language_model(str(tmp_path), "cpu")


def test_pickled_or_damaged_weights_are_one_line_errors(tmp_path) -> None:
    """Round three (#71): a model.safetensors linked to another file ended in `unexpected
    error: SafetensorError`; a pickle .bin in torch's eight-line refusal."""
    import shutil

    folder = write_tiny_gpt2(tmp_path / "gpt2", vocab_size=VOCAB)
    (tmp_path / "notes.txt").write_text("not a safetensors file")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="safetensors weights are damaged") as err:
        load_language_model(str(folder), "cpu")
    assert "\n" not in str(err.value)
    (folder / "model.safetensors").unlink()
    shutil.copyfile(tmp_path / "notes.txt", folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin, a pickle that can run code"):
        load_language_model(str(folder), "cpu")


def test_padded_pairs_whose_batches_end_at_different_lengths_are_extracted(bridge) -> None:
    """Text whose words split into different numbers of tokens: each example's length
    differs, and a causal model's batches are cut after their last query, so each batch is
    as long as its longest query (the atlas's `--relation text` crashed on the second
    batch: its attention mask was collected as if it were a label of one shape). The codes
    of every batch are the pattern at each example's own pair."""
    generator = torch.Generator().manual_seed(3)
    rows, queries = [], []
    for n in range(10):
        length = 6 + 3 * n  # every example a different length
        rows.append(torch.randint(2, VOCAB, (length,), generator=generator))
        queries.append(length - 1 - n % 3)
    tokens = torch.zeros(10, max(len(r) for r in rows), dtype=torch.long)
    mask = torch.zeros_like(tokens)
    for n, row in enumerate(rows):
        tokens[n, : len(row)], mask[n, : len(row)] = row, 1
    query = torch.tensor(queries)
    ood = torch.arange(10) >= 8  # two of each label's examples in each split at least
    pairs = TokenPairs.build(
        tokens,
        query=query,
        keys=query - 2,
        label=torch.arange(10) % 2,
        ood=ood,
        attention_mask=mask,
    )
    codes = pair_codes(bridge, pairs, "id", batch_size=3, causal=True)  # batches of 3, 3, 2
    assert codes.codes.shape == (8, 2, 4, 1)  # [example, layer, head, key]
    order = pairs.rows("id")[torch.randperm(8, generator=torch.Generator().manual_seed(0))]
    with torch.no_grad():
        for e, row in enumerate(order.tolist()):
            length = len(rows[row])
            _, cache = bridge.run_with_cache(
                tokens[row : row + 1, :length], names_filter=lambda n: n.endswith("hook_pattern")
            )
            for layer in range(2):
                pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]
                torch.testing.assert_close(codes.codes[e, layer, :, 0],
                                           pattern[:, queries[row], queries[row] - 2])  # fmt: skip

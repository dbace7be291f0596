"""Synthetic compositional translation: the grammar, the held-out compounds, CTER, BLEU."""

from __future__ import annotations

import pytest
import torch

from latentlens.tasks import (
    TranslationConfig,
    TranslationTask,
    bleu,
    compound_translation_error_rate,
)
from latentlens.tasks.translation import BOS, EOS, PAD, strip


def adjective_noun_pairs(task: TranslationTask, source: torch.Tensor) -> set[tuple[int, int]]:
    """Every adjacent (adjective, noun) pair of the source sentences, as class indices."""
    a0, n0 = task.word_start["adj"], task.word_start["noun"]
    cfg = task.config
    is_adj = (source >= a0) & (source < a0 + cfg.num_adjectives)
    is_noun = (source >= n0) & (source < n0 + cfg.num_nouns)
    both = is_adj[:, :-1] & is_noun[:, 1:]
    adjs = source[:, :-1][both] - a0
    nouns = source[:, 1:][both] - n0
    return set(zip(adjs.tolist(), nouns.tolist(), strict=True))


def test_heldout_compounds_never_occur_in_training_or_test_data() -> None:
    task = TranslationTask(seed=0)
    held = {tuple(pair) for pair in task.describe()["heldout_compounds"]}
    assert len(held) == 10
    for split in ("train", "test"):
        seen = adjective_noun_pairs(task, task.sample(20_000, split).inputs)
        assert not seen & held
        assert len(seen) == 70  # every kept compound does occur
    compound = task.compound_test_set()
    found = adjective_noun_pairs(task, compound.inputs)
    assert found <= held | adjective_noun_pairs(task, task.sample(20_000, "train").inputs)
    assert held <= found
    counts = torch.bincount(compound.labels["compound"])
    assert counts.tolist() == [5] * 10  # each compound in frames_per_compound frames
    assert set(compound.labels["frame"].tolist()) == {0, 1, 2}


def test_translation_rules_on_a_decoded_sentence() -> None:
    task = TranslationTask(seed=3)
    b = task.sample(200, "train")
    cfg, shift = task.config, task.config.source_words
    for source, target in zip(b.inputs.tolist(), b.targets.tolist(), strict=True):
        words, out = strip(source), strip(target)
        assert sorted(w + shift for w in words) == sorted(out)  # a word-by-word lexicon
        verb = next(w for w in words if task.word_start["verb"] <= w < task.word_start["prep"])
        assert out[-1] == verb + shift  # verb-final
        for i in range(len(words) - 2):  # DET ADJ NOUN -> DET' NOUN' ADJ'
            det, adj, noun = words[i : i + 3]
            if (task.word_start["adj"] <= adj < task.word_start["noun"]
                    and task.word_start["noun"] <= noun < task.word_start["verb"]):  # fmt: skip
                part = [det + shift, noun + shift, adj + shift]
                assert any(out[j : j + 3] == part for j in range(len(out) - 2))
    assert (b.labels["decoder_inputs"][:, 0] == BOS).all()
    assert torch.equal(b.labels["decoder_inputs"][:, 1:], b.targets[:, :-1])
    assert ((b.targets == EOS).sum(1) == 1).all() and cfg.vocab_size == 61


def test_cter_on_hand_made_outputs() -> None:
    compound = [[10, 11, 12], [20, 21, 22]]
    outputs = [
        [5, 10, 11, 12, 6, EOS],  # compound 0 intact
        [5, 10, 12, 11, EOS],  # compound 0 broken (reordered)
        [20, 21, 22, EOS, PAD],  # compound 1 intact
        [1, 7, 20, 21, 22, EOS],  # compound 1 intact after BOS
        [20, 21, EOS, 22],  # compound 1 cut by EOS
        [9, 9, EOS],  # compound 1 missing
    ]
    refs = [compound[0], compound[0], compound[1], compound[1], compound[1], compound[1]]
    ids = [0, 0, 1, 1, 1, 1]
    scores = compound_translation_error_rate(outputs, refs, ids)
    assert scores["instance"] == pytest.approx(3 / 6)
    assert scores["aggregate"] == 1.0  # both compounds fail somewhere
    good = compound_translation_error_rate(outputs[2:4], refs[2:4], ids[2:4])
    assert good == {"instance": 0.0, "aggregate": 0.0}
    with pytest.raises(ValueError, match="one entry per sentence"):
        compound_translation_error_rate(outputs, refs[:2], ids)


def test_bleu_is_100_for_exact_outputs_and_lower_otherwise() -> None:
    references = [[5, 6, 7, 8, 9, EOS], [10, 11, 12, 13, EOS]]
    assert bleu(references, references) == pytest.approx(100.0)
    assert bleu([[5, 6, 7, 9, 8, EOS], [10, 11, EOS]], references) < 60.0


def test_bad_configs() -> None:
    with pytest.raises(ValueError, match="frac_heldout=0.001 holds out 0 of 80"):
        TranslationConfig(frac_heldout=0.001)
    with pytest.raises(ValueError, match="pp_probability=0"):
        TranslationConfig(pp_probability=0)
    with pytest.raises(ValueError, match="lower frac_heldout"):
        TranslationTask(TranslationConfig(num_adjectives=1, num_nouns=3, frac_heldout=0.4))

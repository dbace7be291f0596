"""Compositional translation: the synthetic CoGnition twin (grammar, held-out compounds,
pattern mix), CTER's rules on hand-made hypotheses, BLEU, and sampling."""

from __future__ import annotations

import pytest
import torch

from latentlens.tasks.translation import (
    SUBSETS,
    Lexicon,
    TranslationConfig,
    TranslationTask,
    bleu,
    compound_correct,
    compound_translation_error_rate,
)
from latentlens.tasks.translation.grammar import (
    ADJECTIVES,
    DETERMINERS,
    MODIFIERS,
    NOUNS,
    PATTERNS,
    PREPOSITIONS,
    VERBS,
    Generator,
    Language,
    held_out_pairs,
)

SMALL = TranslationConfig(
    train_sentences=3_000, valid_sentences=50, test_sentences=200, compounds_per_subset=72
)


@pytest.fixture(scope="module")
def task() -> TranslationTask:
    return TranslationTask(SMALL)


def source_text(task: TranslationTask, ids: list[int]) -> str:
    return " ".join(task.corpus.tokens[i] for i in ids if i > 3)


def test_no_held_out_compound_occurs_in_any_training_sentence(task: TranslationTask) -> None:
    """The CoGnition guarantee, checked on the text itself: no CG compound is a phrase of a
    training, validation or random-test sentence, while every CG line holds its compound."""
    corpus = task.corpus
    seen = "\n".join(
        f" {source_text(task, row)} "
        for split in ("train", "valid", "test")
        for row in corpus.splits[split][0].tolist()
    )
    assert not [c for c in corpus.cg.compounds if f" {c} " in seen]
    cg_lines = [f" {source_text(task, row)} " for row in corpus.splits["cg"][0].tolist()]
    for line, compound in zip(cg_lines, corpus.cg.compound.tolist(), strict=True):
        assert f" {corpus.cg.compounds[compound]} " in line


def test_every_atom_occurs_in_training(task: TranslationTask) -> None:
    words = set(
        " ".join(source_text(task, r) for r in task.corpus.splits["train"][0].tolist()).split()
    )
    atoms = {
        w
        for phrase in (*DETERMINERS, *ADJECTIVES, *NOUNS, *MODIFIERS, *VERBS, *PREPOSITIONS)
        for w in phrase.split()
    }
    assert atoms <= words


def test_cg_test_has_cognitions_pattern_mix_and_consecutive_contexts(task: TranslationTask) -> None:
    cg = task.corpus.cg
    lexicon = task.lexicon
    assert len(cg.compounds) == 3 * 72 and len(cg.compound) == 5 * len(cg.compounds)
    assert cg.compound.tolist() == [i for i in range(len(cg.compounds)) for _ in range(5)]
    for index, subset in enumerate(SUBSETS):
        names = [
            c for c, s in zip(cg.compounds, cg.subset[::5].tolist(), strict=True) if s == index
        ]
        assert {lexicon.subset(c) for c in names} == {subset}
        classes = [[lexicon.classes[a] for a in lexicon.atoms(c)] for c in names]
        counts = [
            sum(("ADJ" in c) == adj and ("MOD" in c) == mod for c in classes)
            for adj, mod, _ in PATTERNS
        ]
        assert counts == [round(full * 72 / 720) for *_, full in PATTERNS]  # 4, 8, 20, 40


def test_held_out_pairs_leave_every_atom_a_training_pair() -> None:
    masks = held_out_pairs(
        {k: 0.6 for k in ("det_noun", "adj_noun", "noun_mod", "verb_noun", "prep_noun")},
        torch.Generator().manual_seed(0),
    )
    for mask in masks.values():
        assert (~mask).any(0).all() and (~mask).any(1).all()
        assert abs(mask.float().mean() - 0.6) < 0.02


def test_the_target_grammar_on_hand_built_sentences() -> None:
    """Verb-final, postpositions before the object, modifiers before the noun, the
    classifier of the noun's class, adjective and verb forms by animacy, `the` dropped."""
    config = TranslationConfig()
    gen = Generator(
        config,
        held_out_pairs(
            {k: 0.5 for k in ("det_noun", "adj_noun", "noun_mod", "verb_noun", "prep_noun")},
            torch.Generator(),
        ),
        torch.Generator(),
    )
    lang: Language = gen.lang
    w = lang.target_word

    def np_(det: str, adj: str | None, noun: str, mod: str | None) -> dict[str, torch.Tensor]:
        return {
            "det": torch.tensor([DETERMINERS.index(det)]),
            "adj": torch.tensor([ADJECTIVES.index(adj) if adj else -1]),
            "noun": torch.tensor([NOUNS.index(noun)]),
            "mod": torch.tensor([MODIFIERS.index(mod) if mod else -1]),
        }

    slots = {
        "template": torch.tensor([1]),
        "opener": torch.tensor([-1]),
        "subject_is_np": torch.tensor([True]),
        "name": torch.tensor([0]),
        "subject": np_("every", "small", "dog", None),
        "object": np_("the", "red", "hat", "he liked"),
        "pp": np_("another", None, "farm", None),
        "second": np_("the", None, "dog", None),
        "verb": torch.tensor([VERBS.index("took")]),
        "prep": torch.tensor([PREPOSITIONS.index("near")]),
        "conj": torch.tensor([0]),
        "pronoun": torch.tensor([0]),
        "verb2": torch.tensor([0]),
    }
    source, target = gen.render(slots)
    words = [lang.tokens[i] for i in source[0].tolist() if i > 3]
    assert " ".join(words) == "every small dog took the red hat he liked near another farm ."
    expected = [
        w["det:every"],
        w["clf:1"],
        w["adj:small:0"],
        w["noun:dog"],  # animal: animate
        w["det:another"],
        w["clf:3"],
        w["noun:farm"],
        w["prep:near"],  # PP' = NP' P'
        w["mod:0:0"],
        w["mod:0:1"],
        w["rel"],
        w["adj:red:1"],
        w["noun:hat"],  # inanimate
        w["verb:took:1"],
        w["period"],
    ]
    assert lang.detokenize(target[0].tolist()) == " ".join(expected)


LEXICON = Lexicon(
    translations={
        "the": (),
        "every": ("Mei",),
        "small": ("Xiao", "Xiaoa"),
        "dog": ("Gou",),
        "took": ("Na", "Dai"),
        "near": ("Jin",),
        "mod0": ("TaXihuanDe",),
        "liked": ("Xihuan", ""),
    },
    classes={
        "the": "DET",
        "every": "DET",
        "small": "ADJ",
        "dog": "N",
        "took": "V",
        "near": "P",
        "mod0": "MOD",
        "liked": "V",
    },
    modifiers={"he liked": "mod0"},
)


@pytest.mark.parametrize(
    ("hypothesis", "compound", "correct"),
    [
        ("Mei Xiao Gou Na", "every small dog", True),
        ("Mei Xiaoa Gou", "every small dog", True),  # the other acceptable form
        ("Mei Gou", "every small dog", False),  # the adjective is missing
        ("Mei Gou Xiao", "every small dog", False),  # ADJ after N
        ("Gou Mei", "every dog", False),  # DET after N
        ("Ta Xihuan De Gou", "the dog he liked", True),  # `the` accepts anything; spaces squeezed
        ("Gou Ta Xihuan De", "the dog he liked", False),  # MOD after N in a noun phrase
        ("Gou Ta Xihuan De Na", "took the dog he liked", True),  # no MOD order check with a verb
        ("Gou Jin", "near the dog", True),
        ("Gou", "near the dog", False),
        ("Gou", "liked the dog", True),  # an empty alternative matches everywhere (release quirk)
        ("Gou Xi@@ ao Mei", "every small dog", False),  # subword markers removed, then order
        ("Mei Xi@@ ao Gou", "every small dog", True),
    ],
)
def test_cter_rules_on_hand_made_hypotheses(hypothesis: str, compound: str, correct: bool) -> None:
    assert compound_correct(hypothesis, compound, LEXICON) is correct


def test_cter_instance_aggregate_and_subsets() -> None:
    compounds = ["every dog"] * 2 + ["every small dog"] * 2 + ["took the dog"] * 2
    hypotheses = ["Mei Gou", "Gou", "Mei Xiao Gou", "Mei Xiao Gou", "Gou Na", "Gou Dai"]
    scores = compound_translation_error_rate(hypotheses, compounds, LEXICON)
    assert scores["instance"] == pytest.approx(1 / 6)
    assert scores["aggregate"] == pytest.approx(1 / 3)
    assert scores["NP_instance"] == pytest.approx(1 / 4) and scores["NP_aggregate"] == 0.5
    assert scores["VP_instance"] == 0.0 and "PP_instance" not in scores
    with pytest.raises(ValueError, match="one entry per CG-test line"):
        compound_translation_error_rate(hypotheses[:2], compounds, LEXICON)
    with pytest.raises(ValueError, match=r"atoms \['cat'\] are not in the lexicon"):
        compound_correct("Gou", "every cat", LEXICON)


def test_references_score_zero_cter_and_bleu_100(task: TranslationTask) -> None:
    cg = task.split_set("cg")
    refs = [task.detokenize(row) for row in cg.targets.tolist()]
    compounds = [task.corpus.cg.compounds[i] for i in cg.labels["compound"].tolist()]
    assert compound_translation_error_rate(refs, compounds, task.lexicon)["instance"] == 0.0
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert bleu([" ".join(r.split()[::-1]) for r in refs], refs) < 50.0


def test_sampling_draws_rows_with_labels_and_is_seeded(task: TranslationTask) -> None:
    a = task.sample(64, "cg", task.make_generator(3))
    b = task.sample(64, "cg", task.make_generator(3))
    assert torch.equal(a.inputs, b.inputs) and a.inputs.shape[1] == task.model_io()["n_ctx_source"]
    assert torch.equal(a.labels["decoder_inputs"][:, 1:], a.targets[:, :-1])
    assert (a.labels["compound"] >= 0).all() and set(a.labels["subset"].tolist()) <= {0, 1, 2}
    train = task.sample(16, "train")
    assert (train.labels["compound"] == -1).all()
    part = task.split_set("cg", 60)  # every k-th compound: all three subsets, whole contexts
    assert set(part.labels["subset"].tolist()) == {0, 1, 2}
    assert torch.bincount(part.labels["compound"]).max() == 5 and len(part) % 5 == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"heldout_adj_noun": 1.0}, "heldout_adj_noun=1.0 is invalid"),
        ({"template_weights": [0, 0, 0]}, "template_weights"),
        ({"compounds_per_subset": 0}, "compounds_per_subset"),
        ({"atom_probability": float("nan")}, "atom_probability"),
    ],
)
def test_bad_config_values_are_named(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TranslationConfig(**overrides)


def test_held_out_fractions_that_would_drop_an_atom_are_refused() -> None:
    with pytest.raises(ValueError, match="heldout_det_noun=0.95 holds out 90 of 95 pairs"):
        held_out_pairs(
            {
                "det_noun": 0.95,
                "adj_noun": 0.5,
                "noun_mod": 0.5,
                "verb_noun": 0.5,
                "prep_noun": 0.5,
            },
            torch.Generator(),
        )


def test_too_few_novel_compounds_for_the_pattern_mix_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="novel compounds for .* wanted"):
        TranslationTask(
            TranslationConfig(
                heldout_det_noun=0.05, train_sentences=100, valid_sentences=10, test_sentences=10
            )
        )

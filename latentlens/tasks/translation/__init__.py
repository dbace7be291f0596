"""Compositional translation: a synthetic twin of CoGnition and a loader for the real release,
the compound translation error rate and BLEU (docs/methods/tasks.md)."""

from latentlens.tasks.translation.corpus import (
    BOS,
    EOS,
    PAD,
    SUBSETS,
    CompoundTest,
    Lexicon,
    ParallelCorpus,
    strip,
)
from latentlens.tasks.translation.cter import (
    bleu,
    compound_correct,
    compound_translation_error_rate,
)
from latentlens.tasks.translation.task import TranslationConfig, TranslationTask, load_corpus

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SUBSETS",
    "CompoundTest",
    "Lexicon",
    "ParallelCorpus",
    "TranslationConfig",
    "TranslationTask",
    "bleu",
    "compound_correct",
    "compound_translation_error_rate",
    "load_corpus",
    "strip",
]

"""Compositional translation as hard as CoGnition (docs/methods/tasks.md): the
synthetic twin by default, the real release with ``data_dir``.

Splits: ``train``, ``valid``, ``test`` (random, in distribution) and ``cg`` (the CG test:
every held-out compound in ``contexts`` sentences). A batch is rows drawn at random from its
split: ``inputs`` ``[batch, S]`` source ids and ``targets`` ``[batch, T]`` target ids (both
EOS-terminated, padded with 0); labels ``decoder_inputs`` ``[batch, T]`` (BOS + target shifted
right), ``compound`` ``[batch]`` (the CG compound's index, -1 off the CG test) and ``subset``
``[batch]`` (0 NP, 1 VP, 2 PP; -1 off the CG test). :meth:`TranslationTask.split_set` gives a
split's sentences in order, for decoding and CTER (:mod:`latentlens.probes.translation`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from latentlens.configs import (
    JsonConfig,
    require_non_negative,
    require_positive,
    require_probability,
)
from latentlens.tasks.base import Batch, Task
from latentlens.tasks.translation.corpus import BOS, PAD, SUBSETS, ParallelCorpus
from latentlens.tasks.translation.grammar import PAIR_KINDS, build_synthetic_corpus


@dataclass(frozen=True)
class TranslationConfig(JsonConfig):
    """The corpus: the synthetic twin's sizes and difficulty knobs (see
    :mod:`latentlens.tasks.translation.grammar`), or ``data_dir``, a folder with the real
    CoGnition release (:mod:`latentlens.tasks.translation.cognition_files`), tokenised
    with a BPE vocabulary of ``bpe_vocab_size`` trained on its training side."""

    train_sentences: int = 20_000
    valid_sentences: int = 1_000
    test_sentences: int = 2_000
    compounds_per_subset: int = 720
    contexts: int = 5
    heldout_det_noun: float = 0.5
    heldout_adj_noun: float = 0.3
    heldout_noun_mod: float = 0.3
    heldout_verb_noun: float = 0.3
    heldout_prep_noun: float = 0.3
    the_probability: float = 0.4
    atom_probability: float = 0.6
    adjective_probability: float = 0.5
    modifier_probability: float = 0.25
    adjective_with_modifier_probability: float = 0.02
    np_subject_probability: float = 0.4
    opener_probability: float = 0.3
    template_weights: tuple[float, float, float] = (0.35, 0.4, 0.25)
    split_seed: int = 2024
    data_dir: str | None = None
    bpe_vocab_size: int = 8_000

    def __post_init__(self) -> None:
        owner = "TranslationConfig"
        for name in (
            "train_sentences",
            "valid_sentences",
            "test_sentences",
            "compounds_per_subset",
            "contexts",
            "bpe_vocab_size",
        ):
            require_positive(owner, name, getattr(self, name))
        for kind in PAIR_KINDS:
            require_probability(
                owner, f"heldout_{kind}", getattr(self, f"heldout_{kind}"), exclude_zero=True
            )
        for name in (
            "the_probability",
            "atom_probability",
            "adjective_probability",
            "modifier_probability",
            "adjective_with_modifier_probability",
            "np_subject_probability",
            "opener_probability",
        ):
            require_probability(owner, name, getattr(self, name))
        weights = tuple(self.template_weights)
        if len(weights) != 3 or any(not w >= 0 for w in weights) or not sum(weights) > 0:
            raise ValueError(
                f"{owner}.template_weights={self.template_weights!r} is invalid: three "
                "non-negative weights (simple, prepositional phrase, second clause), not all 0"
            )
        object.__setattr__(self, "template_weights", weights)
        require_non_negative(owner, "split_seed", self.split_seed, integer=True)
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            raise ValueError(f"{owner}.data_dir={self.data_dir!r} must be a path string")


@functools.lru_cache(maxsize=4)
def load_corpus(config: TranslationConfig) -> ParallelCorpus:
    """The corpus of ``config`` (built once per config and process)."""
    if config.data_dir is not None:
        from latentlens.tasks.translation.cognition_files import load_cognition

        return load_cognition(Path(config.data_dir), config.bpe_vocab_size)
    return build_synthetic_corpus(config)


class TranslationTask(Task):
    """Compositional translation; see the module docstring."""

    name = "translation"
    splits = ("train", "valid", "test", "cg")
    headline = ("cg", "token_accuracy")  # the compositional test
    split_titles = {
        "train": "training sentences",
        "valid": "validation",
        "test": "random test (in distribution)",
        "cg": "CG test (novel compounds)",
    }

    def __init__(
        self,
        config: TranslationConfig | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(seed, device)
        self.config = config or TranslationConfig()
        self.corpus = load_corpus(self.config)
        self._splits = {
            name: (source.to(self.device), target.to(self.device))
            for name, (source, target) in self.corpus.splits.items()
        }
        self._cg_labels = (
            self.corpus.cg.compound.to(self.device),
            self.corpus.cg.subset.to(self.device),
        )

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return ("train", "test", "cg")

    @property
    def lexicon(self):
        return self.corpus.lexicon

    def detokenize(self, ids: list[int]) -> str:
        """Target ids -> word-segmented text (up to the first EOS)."""
        return self.corpus.detokenize(ids)

    def describe(self) -> dict[str, Any]:
        corpus = self.corpus
        return {
            **corpus.description,
            "sentences": {name: len(source) for name, (source, _) in corpus.splits.items()},
            "compounds": len(corpus.cg.compounds),
            "vocab_size": len(corpus.tokens),
        }

    def model_io(self) -> dict[str, int]:
        return {
            "vocab_size": len(self.corpus.tokens),
            "n_ctx_source": self.corpus.source_len,
            "n_ctx_target": self.corpus.target_len,
        }

    def model_inputs(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """The encoder-decoder's inputs: source ids and the teacher-forced decoder inputs."""
        return batch.inputs, batch.labels["decoder_inputs"]

    def _batch(self, split: str, rows: torch.Tensor) -> Batch:
        source, target = self._splits[split]
        source, target = source[rows], target[rows]
        if split == "cg":
            compound, subset = (labels[rows] for labels in self._cg_labels)
        else:
            compound = subset = torch.full_like(rows, -1)
        return Batch(
            inputs=source,
            targets=target,
            labels={
                "decoder_inputs": F.pad(target[:, :-1], (1, 0), value=BOS),
                "compound": compound,
                "subset": subset,
            },
        )

    def sample(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> Batch:
        self.check_split(split)
        self.check_batch_size(batch_size)
        count = len(self._splits[split][0])
        rows = torch.randint(
            count, (batch_size,), generator=generator or self.generator, device=self.device
        )
        return self._batch(split, rows)

    def split_set(self, split: str, limit: int | None = None) -> Batch:
        """A split's sentences in order (the first ``limit``); for ``cg``, whole compounds
        with every context: every k-th compound, about ``limit // contexts`` of them spread
        over the three subsets."""
        self.check_split(split)
        count = len(self._splits[split][0])
        if limit is None or limit >= count:
            return self._batch(split, torch.arange(count, device=self.device))
        if split != "cg":
            return self._batch(split, torch.arange(limit, device=self.device))
        compounds = self._cg_labels[0]
        stride = -(-len(self.corpus.cg.compounds) // max(1, limit // self.config.contexts))
        return self._batch(split, (compounds % stride == 0).nonzero()[:, 0])

    @staticmethod
    def loss(predictions: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Teacher-forced cross-entropy over target tokens (padding ignored).
        ``predictions`` ``[batch, T, vocab]``."""
        return F.cross_entropy(predictions.flatten(0, 1), batch.targets.flatten(), ignore_index=PAD)

    @staticmethod
    def metrics(predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Teacher-forced ``token_accuracy`` (non-padding) and ``sequence_accuracy``."""
        real = batch.targets != PAD
        right = (predictions.argmax(-1) == batch.targets) | ~real
        return {
            "token_accuracy": (right & real).sum() / real.sum(),
            "sequence_accuracy": right.all(dim=1).float().mean(),
        }


__all__ = ["SUBSETS", "TranslationConfig", "TranslationTask", "load_corpus"]

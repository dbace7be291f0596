"""Synthetic compositional translation (reference/fusion_gca.md section 2).

A small grammar generates source sentences ``SUBJ VERB OBJ [PREP NP]`` whose noun phrases
are ``DET [ADJ] NOUN``. The target language translates word by word through a fixed
lexicon and reorders: adjectives follow their noun (``DET' NOUN' ADJ'``), the verb goes last,
prepositions become postpositions (``NP' PREP'``)::

    the red dog sees a cat on the old table
    -> THE DOG RED A CAT THE TABLE OLD ON SEES

A *compound* is an adjective-noun pair. A held-out set of compounds never occurs in the
``train`` and ``test`` splits; the ``compound`` split puts one held-out compound into a
random sentence frame (subject, object or prepositional object), and
:meth:`TranslationTask.compound_test_set` places every held-out compound into the same
number of frames, for the compound translation error rate (CTER) at instance and
aggregate level.

Tokens: one vocabulary, ``0`` padding, ``1`` BOS, ``2`` EOS, then the source words, then the
target words. Batch: ``inputs`` ``[batch, S]`` source ids (EOS-terminated, padded);
``targets`` ``[batch, T]`` target ids (EOS-terminated, padded); labels ``decoder_inputs``
``[batch, T]`` (BOS + target shifted right), ``compound`` ``[batch]`` (held-out compound
index, -1 for none), ``compound_tokens`` ``[batch, 3]`` (the compound's reference
translation ``DET' NOUN' ADJ'``, for CTER), ``frame`` ``[batch]`` (0 subject, 1 object,
2 prepositional object).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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

PAD, BOS, EOS = 0, 1, 2
SPECIALS = 3
FRAMES = ("subject", "object", "prepositional object")


@dataclass(frozen=True)
class TranslationConfig(JsonConfig):
    """Sizes of the grammar and of the held-out compound set."""

    num_determiners: int = 2
    num_adjectives: int = 8
    num_nouns: int = 10
    num_verbs: int = 6
    num_prepositions: int = 3
    frac_heldout: float = 0.125
    adjective_probability: float = 0.6
    pp_probability: float = 0.5
    frames_per_compound: int = 5
    split_seed: int = 2024

    def __post_init__(self) -> None:
        owner = "TranslationConfig"
        for name in ("num_determiners", "num_adjectives", "num_nouns", "num_verbs",
                     "num_prepositions", "frames_per_compound"):  # fmt: skip
            require_positive(owner, name, getattr(self, name))
        require_probability(owner, "frac_heldout", self.frac_heldout, exclude_zero=True)
        for name in ("adjective_probability", "pp_probability"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{owner}.{name}={value!r} is invalid: it must be in (0, 1]")
        require_non_negative(owner, "split_seed", self.split_seed, integer=True)
        if self.num_heldout < 1 or self.num_heldout >= self.num_compounds:
            raise ValueError(
                f"{owner}.frac_heldout={self.frac_heldout} holds out {self.num_heldout} of "
                f"{self.num_compounds} compounds: at least one must be held out and one kept"
            )

    @property
    def num_compounds(self) -> int:
        return self.num_adjectives * self.num_nouns

    @property
    def num_heldout(self) -> int:
        return int(self.num_compounds * self.frac_heldout)

    @property
    def source_words(self) -> int:
        return (self.num_determiners + self.num_adjectives + self.num_nouns + self.num_verbs
                + self.num_prepositions)  # fmt: skip

    @property
    def vocab_size(self) -> int:
        return SPECIALS + 2 * self.source_words

    @property
    def source_len(self) -> int:
        """NP(3) VERB NP(3) PREP NP(3) EOS."""
        return 12

    @property
    def target_len(self) -> int:
        return 12


class TranslationTask(Task):
    """Compositional translation; see the module docstring."""

    name = "translation"
    splits = ("train", "test", "compound")
    split_titles = {
        "train": "in-distribution",
        "test": "in-distribution, new sentences",
        "compound": "held-out compounds",
    }

    def __init__(
        self,
        config: TranslationConfig | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(seed, device)
        cfg = self.config = config or TranslationConfig()
        # word classes: source ids, then target ids at the same offset + source_words
        sizes = [cfg.num_determiners, cfg.num_adjectives, cfg.num_nouns, cfg.num_verbs,
                 cfg.num_prepositions]  # fmt: skip
        starts = torch.cumsum(torch.tensor([SPECIALS, *sizes[:-1]]), 0).tolist()
        self.word_start = dict(zip(("det", "adj", "noun", "verb", "prep"), starts, strict=True))
        fixed = torch.Generator().manual_seed(cfg.split_seed)
        order = torch.randperm(cfg.num_compounds, generator=fixed)
        heldout = order[: cfg.num_heldout].sort().values
        kept = order[cfg.num_heldout :].sort().values
        self.heldout_compounds = heldout  # compound = adjective * num_nouns + noun
        missing_adj = set(range(cfg.num_adjectives)) - set((kept // cfg.num_nouns).tolist())
        missing_noun = set(range(cfg.num_nouns)) - set((kept % cfg.num_nouns).tolist())
        if missing_adj or missing_noun:
            raise ValueError(
                f"TranslationConfig: with frac_heldout={cfg.frac_heldout} and split_seed="
                f"{cfg.split_seed} the adjectives {sorted(missing_adj)} / nouns "
                f"{sorted(missing_noun)} only occur in held-out compounds; lower frac_heldout"
            )
        self._kept = kept.to(self.device)
        self._heldout = heldout.to(self.device)

    # ------------------------------------------------------------------ vocabulary
    def target_id(self, source_ids: torch.Tensor) -> torch.Tensor:
        """The lexicon: target id of each source word id (specials map to themselves)."""
        shift = self.config.source_words
        return torch.where(source_ids >= SPECIALS, source_ids + shift, source_ids)

    def word(self, kind: str, index: torch.Tensor) -> torch.Tensor:
        return index + self.word_start[kind]

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        pairs = [[int(c) // cfg.num_nouns, int(c) % cfg.num_nouns] for c in self.heldout_compounds]
        return {
            "heldout_compounds": pairs,
            "num_compounds": cfg.num_compounds,
            "vocab_size": cfg.vocab_size,
        }

    def model_io(self) -> dict[str, int]:
        cfg = self.config
        return {"vocab_size": cfg.vocab_size, "n_ctx_source": cfg.source_len,
                "n_ctx_target": cfg.target_len}  # fmt: skip

    def model_inputs(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """The encoder-decoder's inputs: source ids and the teacher-forced decoder inputs."""
        return batch.inputs, batch.labels["decoder_inputs"]

    # ------------------------------------------------------------------ sampling
    def _noun_phrases(
        self, count: int, gen: torch.Generator, heldout: bool
    ) -> tuple[torch.Tensor, ...]:
        """``count`` noun phrases: determiner, adjective (or -1), noun, compound id."""
        cfg, dev = self.config, self.device
        det = torch.randint(cfg.num_determiners, (count,), generator=gen, device=dev)
        pool = self._heldout if heldout else self._kept
        compound = pool[torch.randint(len(pool), (count,), generator=gen, device=dev)]
        adj, noun = compound // cfg.num_nouns, compound % cfg.num_nouns
        if not heldout:
            bare = torch.rand(count, generator=gen, device=dev) >= cfg.adjective_probability
            adj = torch.where(bare, -1, adj)
            noun = torch.where(
                bare, torch.randint(cfg.num_nouns, (count,), generator=gen, device=dev), noun
            )
        return det, adj, noun, compound

    def _render_np(self, det, adj, noun, target: bool) -> torch.Tensor:
        """``[count, 3]`` ids: source ``DET ADJ NOUN`` or target ``DET' NOUN' ADJ'``; a missing
        adjective leaves a gap (removed when the sentence is packed)."""
        d, n = self.word("det", det), self.word("noun", noun)
        a = torch.where(adj >= 0, self.word("adj", adj.clamp(min=0)), PAD)
        if target:
            return self.target_id(torch.stack([d, n, a], dim=1))
        return torch.stack([d, a, n], dim=1)

    def sample(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None,
        frames: torch.Tensor | None = None, compounds: torch.Tensor | None = None,
    ) -> Batch:  # fmt: skip
        self.check_split(split)
        self.check_batch_size(batch_size)
        cfg, dev, gen = self.config, self.device, generator or self.generator
        nps = [self._noun_phrases(batch_size, gen, heldout=False) for _ in range(3)]
        has_pp = torch.rand(batch_size, generator=gen, device=dev) < cfg.pp_probability
        frame = torch.full((batch_size,), -1, device=dev)
        compound = torch.full((batch_size,), -1, device=dev)
        if split == "compound":
            frame = (
                frames
                if frames is not None
                else torch.randint(3, (batch_size,), generator=gen, device=dev)
            )
            held = self._noun_phrases(batch_size, gen, heldout=True)
            if compounds is not None:
                chosen = self._heldout[compounds]
                held = (held[0], chosen // cfg.num_nouns, chosen % cfg.num_nouns, chosen)
            has_pp = has_pp | (frame == 2)
            nps = [
                tuple(
                    torch.where(frame == slot, h, n) for h, n in zip(held, nps[slot], strict=True)
                )
                for slot in range(3)
            ]
            compound = torch.searchsorted(self._heldout, held[3])
        verb = self.word(
            "verb", torch.randint(cfg.num_verbs, (batch_size,), generator=gen, device=dev)
        )
        prep = self.word(
            "prep", torch.randint(cfg.num_prepositions, (batch_size,), generator=gen, device=dev)
        )
        source_parts = [self._render_np(*nps[0][:3], target=False), verb[:, None],
                        self._render_np(*nps[1][:3], target=False), prep[:, None],
                        self._render_np(*nps[2][:3], target=False)]  # fmt: skip
        target_parts = [self._render_np(*nps[0][:3], target=True),
                        self._render_np(*nps[1][:3], target=True),
                        self._render_np(*nps[2][:3], target=True), self.target_id(prep)[:, None],
                        self.target_id(verb)[:, None]]  # fmt: skip
        source = torch.cat(source_parts, dim=1)  # [batch, 11]
        target = torch.cat(target_parts, dim=1)  # [batch, 11]
        source[:, 7:] = torch.where(has_pp[:, None], source[:, 7:], PAD)
        target[:, 6:10] = torch.where(has_pp[:, None], target[:, 6:10], PAD)
        source, target = _pack(source), _pack(target)
        decoder_inputs = F.pad(target[:, :-1], (1, 0), value=BOS)
        slot = frame.clamp(min=0)
        compound_tokens = torch.stack(
            [self._render_np(*nps[s][:3], target=True) for s in range(3)], 1
        )
        compound_tokens = compound_tokens[torch.arange(batch_size, device=dev), slot]
        return Batch(
            inputs=source,
            targets=target,
            labels={
                "decoder_inputs": decoder_inputs,
                "compound": compound,
                "compound_tokens": compound_tokens,
                "frame": frame,
            },
        )

    def compound_test_set(self, seed: int = 0) -> Batch:
        """Every held-out compound in ``frames_per_compound`` random sentence frames
        (frames cycle through subject, object, prepositional object)."""
        cfg = self.config
        count = len(self._heldout) * cfg.frames_per_compound
        compounds = torch.arange(len(self._heldout), device=self.device).repeat_interleave(
            cfg.frames_per_compound
        )
        frames = torch.arange(count, device=self.device) % 3
        return self.sample(
            count, "compound", self.make_generator(seed), frames=frames, compounds=compounds
        )

    # ------------------------------------------------------------------ scoring
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


def _pack(tokens: torch.Tensor) -> torch.Tensor:
    """Move padding gaps to the end (stable), then append EOS after the last word."""
    real = tokens != PAD
    order = torch.sort((~real).int(), dim=1, stable=True).indices
    packed = tokens.gather(1, order)
    lengths = real.sum(dim=1)
    packed = F.pad(packed, (0, 1), value=PAD)
    return packed.scatter_(1, lengths[:, None], EOS)  # no host tensor: CUDA-graph safe


def strip(tokens: Sequence[int]) -> list[int]:
    """Tokens up to (not including) the first EOS, without BOS and padding."""
    out = []
    for token in tokens:
        if token == EOS:
            break
        if token not in (PAD, BOS):
            out.append(int(token))
    return out


def contains(sequence: Sequence[int], part: Sequence[int]) -> bool:
    """Whether ``part`` occurs contiguously in ``sequence``."""
    part = list(part)
    return any(
        list(sequence[i : i + len(part)]) == part for i in range(len(sequence) - len(part) + 1)
    )


def compound_translation_error_rate(
    outputs: Sequence[Sequence[int]],
    compound_tokens: Sequence[Sequence[int]],
    compounds: Sequence[int],
) -> dict[str, float]:
    """CTER (reference/fusion_gca.md section 2): a compound is translated correctly in a
    sentence when its reference translation appears intact in the output.

    ``instance``: the fraction of sentences whose compound is mistranslated; ``aggregate``:
    the fraction of compounds mistranslated in at least one of their sentences.
    """
    if not (len(outputs) == len(compound_tokens) == len(compounds)):
        raise ValueError(
            f"outputs ({len(outputs)}), compound_tokens ({len(compound_tokens)}) and compounds "
            f"({len(compounds)}) must have one entry per sentence"
        )
    if not outputs:
        raise ValueError("CTER needs at least one sentence")
    wrong = [
        not contains(strip(o), strip(c)) for o, c in zip(outputs, compound_tokens, strict=True)
    ]
    per_compound: dict[int, bool] = {}
    for compound, bad in zip(compounds, wrong, strict=True):
        per_compound[int(compound)] = per_compound.get(int(compound), False) or bad
    return {
        "instance": sum(wrong) / len(wrong),
        "aggregate": sum(per_compound.values()) / len(per_compound),
    }


def bleu(outputs: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> float:
    """Corpus BLEU (sacrebleu) of token-id sequences, read as whitespace-separated words."""
    import sacrebleu

    hypotheses = [" ".join(map(str, strip(o))) for o in outputs]
    refs = [" ".join(map(str, strip(r))) for r in references]
    return float(sacrebleu.corpus_bleu(hypotheses, [refs], tokenize="none").score)

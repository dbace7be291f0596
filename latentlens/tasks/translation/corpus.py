"""A tokenised parallel corpus with a compositional-generalisation test set, the shape both
the synthetic CoGnition twin (:mod:`.grammar`) and the real release (:mod:`.cognition_files`)
take.

Token ids: ``0`` padding, ``1`` BOS, ``2`` EOS, ``3`` unknown, then the vocabulary; source and
target share one vocabulary (the encoder-decoder shares its embedding). Every split is a pair
of tensors ``source [N, S]`` and ``target [N, T]``: EOS-terminated, padded with ``0``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
SUBSETS = ("NP", "VP", "PP")
ATOM_CLASSES = ("DET", "ADJ", "N", "MOD", "V", "P")


@dataclass(frozen=True)
class Lexicon:
    """CTER's lexicon (docs/methods/tasks.md).

    ``translations``: each atom's acceptable target strings (an empty tuple accepts anything,
    the release's ``/``); ``classes``: each atom's class (``DET ADJ N MOD V P``);
    ``modifiers``: multi-word source phrases that are one atom (``"he liked" -> "mod0"``).
    """

    translations: Mapping[str, tuple[str, ...]]
    classes: Mapping[str, str]
    modifiers: Mapping[str, str] = field(default_factory=dict)

    def atoms(self, compound: str) -> list[str]:
        """The atoms of a compound's source text, modifier phrases read as one atom."""
        text = f" {compound.strip()} "
        for phrase, atom in self.modifiers.items():
            text = text.replace(f" {phrase} ", f" {atom} ")
        atoms = text.split()
        unknown = [a for a in atoms if a not in self.translations or a not in self.classes]
        if unknown:
            raise ValueError(
                f"compound {compound!r}: the atoms {unknown} are not in the lexicon (or have no "
                "class); add them to the lexicon file"
            )
        return atoms

    def subset(self, compound: str) -> str:
        """``VP`` when the compound starts with a verb, ``PP`` with a preposition, else ``NP``."""
        first = self.classes[self.atoms(compound)[0]]
        return {"V": "VP", "P": "PP"}.get(first, "NP")


@dataclass
class CompoundTest:
    """The CG test's labels: ``compounds`` (each distinct compound's source text) and, per
    CG-test line, ``compound [N]`` (index into ``compounds``) and ``subset [N]`` (index into
    :data:`SUBSETS`). Each compound's contexts are consecutive lines."""

    compounds: list[str]
    compound: torch.Tensor
    subset: torch.Tensor


@dataclass
class ParallelCorpus:
    """Token tensors per split (``train``, ``valid``, ``test``, ``cg``), the CG test's
    labels, the lexicon, and ``detokenize``: target ids -> word-segmented text."""

    tokens: list[str]
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]]
    cg: CompoundTest
    lexicon: Lexicon
    detokenize: Callable[[Sequence[int]], str]
    description: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = {"train", "valid", "test", "cg"} - set(self.splits)
        if missing:
            raise ValueError(f"a parallel corpus needs the splits {sorted(missing)}")
        lines = len(self.splits["cg"][0])
        if not (len(self.cg.compound) == len(self.cg.subset) == lines):
            raise ValueError(
                f"the CG test has {lines} lines but {len(self.cg.compound)} compound labels"
            )

    @property
    def source_len(self) -> int:
        return max(source.shape[1] for source, _ in self.splits.values())

    @property
    def target_len(self) -> int:
        return max(target.shape[1] for _, target in self.splits.values())


def strip(ids: Sequence[int]) -> list[int]:
    """Token ids up to (not including) the first EOS, without BOS and padding."""
    out = []
    for token in ids:
        if token == EOS:
            break
        if token not in (PAD, BOS):
            out.append(int(token))
    return out


def pad_rows(rows: Sequence[Sequence[int]], width: int | None = None) -> torch.Tensor:
    """``[len(rows), width]`` ids: each row then EOS, padded with PAD (``width``: the
    longest row + 1)."""
    width = width or max(len(row) for row in rows) + 1
    out = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        out[i, len(row)] = EOS
    return out

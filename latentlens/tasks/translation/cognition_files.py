"""The real CoGnition release (Li et al., ACL 2021) read from disk, for a user who has it.

``data_dir`` is the release's ``data`` folder, or any folder holding the same files:
``train.en``/``train.zh``, ``valid.*``, ``test.*`` (word-segmented, one sentence a line),
``cg-test.en``/``cg-test.zh``/``cg-test.compound`` (here or under ``cg-test/``: each CG
line's compound, a compound's contexts on consecutive lines) and ``lexicon`` (here, or in
the release's ``eval/`` beside ``data``: ``atom<TAB>translation/translation/...``; ``/``
alone accepts anything). Atom classes are CoGnition's (the atoms of
:mod:`~latentlens.tasks.translation.grammar`).

Both sides are tokenised with one BPE vocabulary (Hugging Face ``tokenizers``, Metaspace
pre-tokeniser so decoding restores the word segmentation) trained on the training side; the
trained tokeniser is kept as ``latentlens-bpe-{size}.json`` in ``data_dir`` (when it is
writable) so that later runs and evaluations read the same vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from latentlens.tasks.translation.corpus import (
    SPECIAL_TOKENS,
    SUBSETS,
    UNK,
    CompoundTest,
    Lexicon,
    ParallelCorpus,
    pad_rows,
    strip,
)
from latentlens.tasks.translation.grammar import ATOM_CLASSES, MODIFIER_ATOMS

SPLIT_FILES = {"train": "train", "valid": "valid", "test": "test", "cg": "cg-test"}


def _find(data_dir: Path, name: str, *extra: Path) -> Path:
    places = [data_dir / name, data_dir / "cg-test" / name, *extra]
    for place in places:
        if place.is_file():
            return place
    raise ValueError(
        f"CoGnition file {name!r} not found in --data-dir {data_dir} (looked at "
        f"{', '.join(str(p) for p in places)}); point --data-dir at the release's data folder"
    )


def _lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} could not be read as UTF-8 text ({err})") from None
    return [line.strip() for line in text.splitlines()]


def read_lexicon(path: Path) -> Lexicon:
    """The release's lexicon file: ``atom<TAB>alternatives`` per line."""
    translations: dict[str, tuple[str, ...]] = {}
    for number, line in enumerate(_lines(path), 1):
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0]:
            raise ValueError(
                f"{path} line {number} is {line!r}; each line must be ATOM<TAB>TRANSLATIONS "
                "(alternatives separated by '/', '/' alone for any)"
            )
        atom, alternatives = parts
        translations[atom] = () if alternatives == "/" else tuple(alternatives.split("/"))
    return Lexicon(translations, ATOM_CLASSES, MODIFIER_ATOMS)


def _tokenizer(data_dir: Path, texts: Sequence[str], vocab_size: int):
    """A BPE tokeniser trained on ``texts`` (or the one kept in ``data_dir``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    kept = data_dir / f"latentlens-bpe-{vocab_size}.json"
    if kept.is_file():
        return Tokenizer.from_file(str(kept))
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK]))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    temporary = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    try:
        tokenizer.save(str(temporary))
        os.replace(temporary, kept)
    except OSError:  # a read-only data folder: the tokeniser is retrained next time
        temporary.unlink(missing_ok=True)
    return tokenizer


def load_cognition(data_dir: Path, vocab_size: int) -> ParallelCorpus:
    """The CoGnition release in ``data_dir`` as a :class:`ParallelCorpus`."""
    if not data_dir.is_dir():
        raise ValueError(f"--data-dir {data_dir} is not a folder; give the CoGnition data folder")
    texts: dict[str, tuple[list[str], list[str]]] = {}
    for split, stem in SPLIT_FILES.items():
        source, target = (_find(data_dir, f"{stem}.{lang}") for lang in ("en", "zh"))
        pair = _lines(source), _lines(target)
        if len(pair[0]) != len(pair[1]) or not pair[0]:
            raise ValueError(
                f"{source} has {len(pair[0])} lines and {target} {len(pair[1])}: a split "
                "needs the same number of source and target lines, at least one"
            )
        texts[split] = pair
    compound_file = _find(data_dir, "cg-test.compound")
    compounds = _lines(compound_file)
    if len(compounds) != len(texts["cg"][0]):
        raise ValueError(
            f"{compound_file} has {len(compounds)} lines for {len(texts['cg'][0])} CG-test "
            "sentences; it needs one compound per CG-test line"
        )
    lexicon = read_lexicon(_find(data_dir, "lexicon", data_dir.parent / "eval" / "lexicon"))
    names: list[str] = []
    compound_ids, subset_ids = [], []
    for compound in compounds:
        if not names or names[-1] != compound:
            names.append(compound)
        compound_ids.append(len(names) - 1)
        subset_ids.append(SUBSETS.index(lexicon.subset(compound)))
    tokenizer = _tokenizer(data_dir, [*texts["train"][0], *texts["train"][1]], vocab_size)
    splits = {}
    for split, (source, target) in texts.items():
        encoded = [[e.ids for e in tokenizer.encode_batch(side)] for side in (source, target)]
        splits[split] = (pad_rows(encoded[0]), pad_rows(encoded[1]))
    return ParallelCorpus(
        tokens=[tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())],
        splits=splits,
        cg=CompoundTest(names, torch.tensor(compound_ids), torch.tensor(subset_ids)),
        lexicon=lexicon,
        detokenize=lambda ids: tokenizer.decode(strip(ids)),
        description={"source": "CoGnition files", "data_dir": str(data_dir.resolve())},
    )

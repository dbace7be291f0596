"""Relations real language models have, on natural text the project generates (nothing to
download): previous-token, duplicate-token and induction pairs, with a control.

Each sequence is a short story of simple English sentences drawn from a small grammar
(``The old farmer carried a heavy basket across the river.``) in which one sentence occurs
twice: ``A, R, [gap sentences], R, B``. The query is a token of the second copy of ``R``
whose token occurs exactly twice in the sequence (at ``p`` in the first copy and at the
query ``q``). The labelled key is one of four relations to the query:

- ``previous``: the key is ``q - 1`` (what a previous-token head attends to);
- ``duplicate``: the key is ``p``, the earlier occurrence of the query's token;
- ``induction``: the key is ``p + 1``, the token that followed it (what an induction head
  attends to, and the model's next token: the pair's ``answer`` in every relation);
- ``unrelated``: any other real token before the query.

The relation is crossed with the **gap** between the two copies (``near``: adjacent,
``mid``: one sentence between, ``far``: two), which sets the query-key distance of the
duplicate and induction pairs. Four combinations are held out as the OOD split, one per
relation and each gap at least once: previous-far, duplicate-near, induction-mid,
unrelated-far. Sentences are tokenised one at a time (with a leading space) and joined,
so both copies of ``R`` are the same tokens. Sequences differ in length and are padded
(right by default, or left) with an ``attention_mask``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from latentlens.probes.pairs import TokenPairs

RELATIONS = ("previous", "duplicate", "induction", "unrelated")
GAPS = ("near", "mid", "far")  # sentences between the two copies: 0, 1, 2
HELD_OUT = ((0, 2), (1, 0), (2, 1), (3, 2))  # (relation, gap) combinations of the OOD split

ADJECTIVES = ("old", "young", "tired", "clever", "quiet", "famous", "angry", "kind",
              "little", "brave", "busy", "lonely")  # fmt: skip
PEOPLE = ("farmer", "doctor", "teacher", "sailor", "painter", "baker", "soldier", "queen",
          "student", "driver", "writer", "hunter", "singer", "miller")  # fmt: skip
VERBS = ("carried", "found", "painted", "sold", "dropped", "opened", "hid", "washed",
         "repaired", "borrowed", "lifted", "wrapped")  # fmt: skip
THINGS = ("basket", "letter", "lantern", "violin", "blanket", "bottle", "ladder", "mirror",
          "wagon", "kettle", "bucket", "saddle", "candle", "drum")  # fmt: skip
QUALITIES = ("heavy", "broken", "shiny", "wooden", "small", "red", "strange", "new",
             "dusty", "green")  # fmt: skip
PLACES = ("across the river", "near the mill", "behind the church", "in the market",
          "under the bridge", "on the hill", "by the harbour", "inside the barn",
          "at the station", "through the forest")  # fmt: skip


def sentence(generator: torch.Generator) -> str:
    """One sentence of the grammar, drawn with ``generator``."""

    def pick(words: tuple[str, ...]) -> str:
        return words[int(torch.randint(len(words), (), generator=generator))]

    return (
        f"The {pick(ADJECTIVES)} {pick(PEOPLE)} {pick(VERBS)} a {pick(QUALITIES)} "
        f"{pick(THINGS)} {pick(PLACES)}."
    )


def story_text(generator: torch.Generator, gap: int = 1) -> str:
    """One story as text, ``A R [gap sentences] R B``: what the head detector reads."""
    sentences = [sentence(generator) for _ in range(gap + 3)]
    return " ".join([*sentences[:-1], sentences[1], sentences[-1]])


def _special(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids a sequence starts and ends with: ``[CLS]`` and ``[SEP]`` for an encoder's
    tokenizer, the beginning-of-sequence token for a decoder's (where it has one)."""
    cls, sep = getattr(tokenizer, "cls_token_id", None), getattr(tokenizer, "sep_token_id", None)
    if cls is not None and sep is not None:
        return [cls], [sep]
    bos = getattr(tokenizer, "bos_token_id", None)
    return ([bos] if bos is not None else []), []


def _story(
    pool: list[list[int]],
    special: tuple[list[int], list[int]],
    generator: torch.Generator,
    gap: int,
) -> tuple[list[int], int, int, int]:
    """The token ids of ``A, R, gap sentences, R, B`` (sentences drawn from ``pool``, the
    special tokens around them), where the first copy of ``R`` starts, its length and the
    distance between the copies in tokens."""
    start, end = special
    chosen = torch.randint(len(pool), (gap + 3,), generator=generator).tolist()
    parts = [pool[i] for i in chosen[:-1]]  # A, R, the gap sentences
    first = len(start) + len(parts[0])
    distance = sum(len(p) for p in parts[1:])
    parts += [parts[1], pool[chosen[-1]]]  # R again, B
    return start + [t for p in parts for t in p] + end, first, len(parts[1]), distance


def sentence_pool(tokenizer: Any, size: int, generator: torch.Generator) -> list[list[int]]:
    """``size`` sentences of the grammar, each tokenised alone with a leading space (one
    batched call of the tokenizer)."""
    texts = [" " + sentence(generator) for _ in range(size)]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def text_relation_pairs(
    tokenizer: Any,
    examples: int = 2_000,
    seed: int = 0,
    padding_side: str = "right",
) -> TokenPairs:
    """``examples`` stories labelled as in the module's docstring (about a third OOD; their
    sentences drawn from a pool of ``max(256, examples)``), tokenised by ``tokenizer`` (a
    Hugging Face tokenizer: the model's own) and padded on ``padding_side`` with the
    tokenizer's pad token (else its end-of-sequence token, else 0). ``factors``: relation
    and gap ids; the same ``seed`` gives the same pairs."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side={padding_side!r} is invalid: choose 'right' or 'left'")
    combos = len(RELATIONS) * len(GAPS)
    if examples < 2 * combos:
        raise ValueError(f"examples={examples} is too few: give at least {2 * combos}")
    generator = torch.Generator().manual_seed(seed)
    combination = torch.arange(examples) % combos
    combination = combination[torch.randperm(examples, generator=generator)].tolist()
    pool = sentence_pool(tokenizer, max(256, examples), generator)
    special = _special(tokenizer)
    rows: list[tuple[list[int], int, int, int, int]] = []  # tokens, query, key, relation, gap
    for combo in combination:
        relation, gap = divmod(combo, len(GAPS))
        while True:  # a story whose repeated sentence has a token occurring exactly twice
            tokens, first, length, distance = _story(pool, special, generator, gap)
            counts = Counter(tokens)
            # a token of R's second copy (with a real token after it) occurring only twice
            candidates = [
                first + i + distance for i in range(length) if counts[tokens[first + i]] == 2
            ]
            if candidates:
                break
        query = candidates[int(torch.randint(len(candidates), (), generator=generator))]
        earlier = query - distance
        if relation == 0:
            key = query - 1
        elif relation == 1:
            key = earlier
        elif relation == 2:
            key = earlier + 1
        else:
            taken = {query - 1, earlier, earlier + 1}
            others = [k for k in range(query) if k not in taken]
            key = others[int(torch.randint(len(others), (), generator=generator))]
        rows.append((tokens, query, key, relation, gap))
    return _padded_pairs(rows, tokenizer, padding_side)


def _padded_pairs(
    rows: list[tuple[list[int], int, int, int, int]], tokenizer: Any, padding_side: str
) -> TokenPairs:
    length = max(len(r[0]) for r in rows)
    pad = next(
        (t for t in (getattr(tokenizer, "pad_token_id", None),
                     getattr(tokenizer, "eos_token_id", None)) if t is not None),
        0,
    )  # fmt: skip
    tokens = torch.full((len(rows), length), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    query, key, relation, gap, answer = (torch.empty(len(rows), dtype=torch.long) for _ in "qkrga")
    for n, (ids, q, k, r, g) in enumerate(rows):
        shift = length - len(ids) if padding_side == "left" else 0
        tokens[n, shift : shift + len(ids)] = torch.tensor(ids)
        mask[n, shift : shift + len(ids)] = 1
        query[n], key[n], relation[n], gap[n] = q + shift, k + shift, r, g
        answer[n] = ids[q + 1]
    held_out = torch.zeros(len(rows), dtype=torch.bool)
    for r, g in HELD_OUT:
        held_out |= (relation == r) & (gap == g)
    return TokenPairs.build(
        tokens,
        query=query,
        keys=key,
        label=relation,
        ood=held_out,
        label_names=RELATIONS,
        factors=torch.stack([relation, gap], dim=1),
        factor_names=("relation", "gap"),
        answer=answer,
        description=(
            "natural text with a repeated sentence: a token of the second copy towards the "
            "token before it (previous), its earlier occurrence (duplicate), the token after "
            "that (induction) or another token (unrelated), the copies adjacent or one or "
            "two sentences apart (near/mid/far); OOD: previous-far, duplicate-near, "
            "induction-mid, unrelated-far"
        ),
        attention_mask=mask,
    )

"""The compound translation error rate (CTER) by CoGnition's rule, and BLEU.

CTER (docs/methods/tasks.md), per CG-test line: the hypothesis, its spaces
and subword markers (``@@ ``) removed, translates the compound correctly iff

1. every atom of the compound has one of its lexicon translations as a substring (an atom
   whose lexicon entry is empty accepts anything; an empty alternative, as in the release's
   ``liked -> 喜欢/``, matches everywhere), and
2. the target-side order holds: DET before N, ADJ before N and, for a compound without a
   verb, MOD before N. An atom's positions are the first and last start of any of its
   translations; a check passes when the first atom's first position is before the noun's
   last, or when either has no position.

Instance CTER: wrong lines / lines; aggregate CTER: compounds wrong in at least one of
their contexts / compounds. Substrings are literal (the release's script reads them as
regular expressions; no lexicon entry holds a special character).
"""

from __future__ import annotations

from collections.abc import Sequence

from latentlens.tasks.translation.corpus import SUBSETS, Lexicon

ORDER_CHECKS = (("DET", "N"), ("ADJ", "N"), ("MOD", "N"))


def normalise_hypothesis(text: str) -> str:
    """The hypothesis as the rule reads it: subword markers and every space removed."""
    return text.replace("@@ ", "").replace(" ", "")


def _positions(alternatives: tuple[str, ...], hypothesis: str) -> tuple[bool, list[int]]:
    """Whether an atom is found, and its ``[first, last]`` start position (``[]``: no
    position, for an atom that accepts anything)."""
    if not alternatives:
        return True, []
    starts: list[int] = []
    for alternative in alternatives:
        if not alternative:  # an empty pattern matches at every index
            starts += list(range(len(hypothesis) + 1))
            continue
        at = hypothesis.find(alternative)
        while at >= 0:  # non-overlapping, as re.finditer
            starts.append(at)
            at = hypothesis.find(alternative, at + len(alternative))
    return bool(starts), ([min(starts), max(starts)] if starts else [])


def compound_correct(hypothesis: str, compound: str, lexicon: Lexicon) -> bool:
    """Whether ``hypothesis`` (detokenised text) translates ``compound`` correctly."""
    text = normalise_hypothesis(hypothesis)
    state: dict[str, tuple[bool, list[int]]] = {}
    for atom in lexicon.atoms(compound):
        state[lexicon.classes[atom]] = _positions(lexicon.translations[atom], text)
    if not all(found for found, _ in state.values()):
        return False
    positions = {cls: pos for cls, (_, pos) in state.items()}
    verb = bool(positions.get("V"))
    for first, second in ORDER_CHECKS:
        if first == "MOD" and verb:
            continue  # a verb phrase's modifier may modify the verb
        a, b = positions.get(first, []), positions.get(second, [])
        if a and b and not min(a) < max(b):
            return False
    return True


def compound_translation_error_rate(
    hypotheses: Sequence[str],
    compounds: Sequence[str],
    lexicon: Lexicon,
    subsets: Sequence[str] | None = None,
) -> dict[str, float]:
    """CTER of CG-test ``hypotheses`` (detokenised text, one per line) for the lines'
    ``compounds`` (their source text). Returns ``instance`` and ``aggregate``, and per subset
    (``subsets``: ``NP``/``VP``/``PP`` per line) ``NP_instance``, ``NP_aggregate``, ...
    A compound's lines are grouped by its text within its subset."""
    if len(hypotheses) != len(compounds) or (
        subsets is not None and len(subsets) != len(compounds)
    ):
        raise ValueError(
            f"hypotheses ({len(hypotheses)}), compounds ({len(compounds)}) and subsets "
            f"({'none' if subsets is None else len(subsets)}) must have one entry per CG-test line"
        )
    if not hypotheses:
        raise ValueError("CTER needs at least one CG-test line")
    subsets = list(subsets) if subsets is not None else [lexicon.subset(c) for c in compounds]
    wrong = [
        not compound_correct(h, c, lexicon) for h, c in zip(hypotheses, compounds, strict=True)
    ]
    scores = _rates(wrong, compounds, subsets)
    for name in SUBSETS:
        lines = [i for i, s in enumerate(subsets) if s == name]
        if lines:
            rates = _rates(
                [wrong[i] for i in lines], [compounds[i] for i in lines], [name] * len(lines)
            )
            scores.update({f"{name}_{key}": value for key, value in rates.items()})
    return scores


def _rates(wrong: list[bool], compounds: Sequence[str], subsets: Sequence[str]) -> dict[str, float]:
    per_compound: dict[tuple[str, str], bool] = {}
    for bad, compound, subset in zip(wrong, compounds, subsets, strict=True):
        key = (subset, compound)
        per_compound[key] = per_compound.get(key, False) or bad
    return {
        "instance": sum(wrong) / len(wrong),
        "aggregate": sum(per_compound.values()) / len(per_compound),
    }


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (sacrebleu) of word-segmented texts, read as whitespace-separated words."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], tokenize="none").score)

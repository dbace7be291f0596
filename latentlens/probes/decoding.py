"""Decoding tables over layers and heads: every head together, each head alone, and every
head but one (which head carries what the decoder reads)."""

from __future__ import annotations

from typing import Any

from latentlens.probes.codes import CodeSet
from latentlens.probes.linear import classifier_decoding, cross_validated_decoding, ridge_decoding


def _decode(fit: CodeSet, test: CodeSet | None, layers: list[int], heads: list[int] | None,
            folds: int, seed: int):  # fmt: skip
    x_fit = fit.features(layers, heads)
    if test is None:
        kind = "ridge" if fit.target_kind == "regression" else "classifier"
        return cross_validated_decoding(x_fit, fit.target, kind=kind, folds=folds, seed=seed)
    decode = ridge_decoding if fit.target_kind == "regression" else classifier_decoding
    return decode(x_fit, fit.target, test.features(layers, heads), test.target, seed=seed)


def decoding_table(
    fit: CodeSet, test: CodeSet | None = None, folds: int = 2, seed: int = 0
) -> list[dict[str, Any]]:
    """Rows ``{"layer", "heads", "metric", "fit", "test", "chance", "shuffled"}``.

    ``layer`` is a layer index or ``"all"``; ``heads`` is ``"all"``, ``"h{i}"`` (head i
    alone) or ``"-h{i}"`` (every head but i). With ``test`` the decoder is fit on ``fit``
    and scored on ``test`` (e.g. in-distribution -> OOD); without, by ``folds``-fold
    cross-validation within ``fit`` (the fuzzy-logic protocol: fit on one half, score the
    other, averaged).
    """
    _, num_layers, num_heads, _ = fit.codes.shape
    rows = []
    all_layers = list(range(num_layers))
    score = _decode(fit, test, all_layers, None, folds, seed)
    rows.append({"layer": "all", "heads": "all", **score.to_dict()})
    for layer in all_layers:
        options: list[tuple[str, list[int] | None]] = [("all", None)]
        options += [(f"h{h}", [h]) for h in range(num_heads)]
        if num_heads > 1:
            options += [
                (f"-h{h}", [i for i in range(num_heads) if i != h]) for h in range(num_heads)
            ]
        for label, heads in options:
            score = _decode(fit, test, [layer], heads, folds, seed)
            rows.append({"layer": layer, "heads": label, **score.to_dict()})
    return rows

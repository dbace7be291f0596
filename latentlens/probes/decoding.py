"""Decoding tables over layers and heads: every head together, each head alone, and every
head but one (which head carries what the decoder reads).

Classification tables fit their decoders together (:mod:`latentlens.probes.logistic`:
scikit-learn's logistic-regression objective, solved to its optimum, every decoder of one
width in one batch); regression tables fit scikit-learn's ridge, one decoder at a time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from latentlens.probes.codes import CodeSet
from latentlens.probes.linear import (
    PERMUTATIONS,
    DecodingScore,
    check_pair,
    check_permutations,
    cross_validated_decoding,
    label_permutations,
    permutation_control,
    ridge_decoding,
)
from latentlens.probes.logistic import fit_logistic, predict_logistic, standardise

# (layer label, heads label, layers read, heads read: None for all)
Decoder = tuple[int | str, str, list[int], list[int] | None]


def _decoders(num_layers: int, num_heads: int) -> list[Decoder]:
    """Every code together, then per layer: all heads, each head alone, all but each."""
    decoders: list[Decoder] = [("all", "all", list(range(num_layers)), None)]
    for layer in range(num_layers):
        decoders.append((layer, "all", [layer], None))
        decoders += [(layer, f"h{h}", [layer], [h]) for h in range(num_heads)]
        if num_heads > 1:
            decoders += [
                (layer, f"-h{h}", [layer], [i for i in range(num_heads) if i != h])
                for h in range(num_heads)
            ]
    return decoders


def _accuracy_columns(
    fit: CodeSet,
    tests: Mapping[str, CodeSet],
    decoders: list[Decoder],
    seed: int,
    permutations: int,
) -> list[dict[str, Any]]:
    """Per decoder: fit accuracy, and for each test set its accuracy, binomial standard
    error, majority-class chance and the permutation controls' accuracies."""
    labels = fit.target.long()
    classes, fit_ids = torch.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"the fit set holds a single class ({classes.tolist()}); a classifier needs at "
            "least 2 classes: sample more examples or another split"
        )
    orders = torch.as_tensor(label_permutations(len(fit_ids), permutations, seed))
    label_sets = torch.cat([fit_ids[None], fit_ids[orders]])  # [1 + permutations, examples]
    # the decoders' Newton systems on a GPU where there is one (float64 either way)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    label_sets, classes = label_sets.to(device), classes.to(device)
    columns: list[dict[str, Any]] = [{} for _ in decoders]
    _, _, num_heads, keys = fit.codes.shape
    by_width: dict[int, list[int]] = defaultdict(list)
    for index, (_, _, layers, heads) in enumerate(decoders):
        by_width[len(layers) * len(heads or range(num_heads)) * keys].append(index)
    for members in by_width.values():
        chosen = [decoders[i] for i in members]
        x_fit = torch.stack([fit.features(layers, heads) for _, _, layers, heads in chosen])
        x_tests = [
            torch.stack([test.features(layers, heads) for _, _, layers, heads in chosen])
            for test in tests.values()
        ]
        x_fit, *x_tests = standardise(x_fit.to(device, torch.float64),
                                      *(x.to(device, torch.float64) for x in x_tests))  # fmt: skip
        count, sets = len(chosen), len(label_sets)
        # decoder-major: decoder d's real fit, then its permutations
        weights = fit_logistic(
            x_fit.repeat_interleave(sets, 0), label_sets.repeat(count, 1), len(classes)
        ).unflatten(0, (count, sets))
        real = weights[:, 0]
        fitted = classes[predict_logistic(real, x_fit)].cpu()
        for slot, index in enumerate(members):
            columns[index]["fit"] = float((fitted[slot] == labels).double().mean())
        for (name, test), x_test in zip(tests.items(), x_tests, strict=True):
            truth = test.target.long().to(device)
            _, counts = torch.unique(truth, return_counts=True)
            chance = float(counts.max() / len(truth))
            predicted = predict_logistic(weights.flatten(0, 1), x_test.repeat_interleave(sets, 0))
            hits = (classes[predicted] == truth).double().mean(1).unflatten(0, (count, sets)).cpu()
            for slot, index in enumerate(members):
                accuracy = float(hits[slot, 0])
                columns[index][name] = {
                    "test": accuracy, "chance": chance, "controls": hits[slot, 1:].numpy(),
                    "test_se": float(np.sqrt(accuracy * (1 - accuracy) / len(truth))),
                }  # fmt: skip
    return columns


def _classifier_rows(
    fit: CodeSet,
    test: CodeSet,
    also: Mapping[str, CodeSet],
    decoders: list[Decoder],
    seed: int,
    permutations: int,
) -> list[dict[str, Any]]:
    check_pair(fit.codes, fit.target, "fit set")
    if not torch.isfinite(fit.codes).all():
        raise ValueError("the fit set's codes hold NaN or infinite values")
    for name, other in {"test": test, **also}.items():
        check_pair(other.codes, other.target, f"{name} set")
        if not torch.isfinite(other.codes).all():
            raise ValueError(f"the {name} set's codes hold NaN or infinite values")
        if other.codes.shape[1:] != fit.codes.shape[1:]:
            raise ValueError(
                f"fit and {name} sets differ in shape: codes {list(fit.codes.shape[1:])} vs "
                f"{list(other.codes.shape[1:])} [layer, head, key]"
            )
    columns = _accuracy_columns(fit, {"test": test, **also}, decoders, seed, permutations)
    rows = []
    for (layer, heads, _, _), column in zip(decoders, columns, strict=True):
        main = column["test"]
        score = DecodingScore(
            "accuracy", column["fit"], main["test"], main["chance"], test_se=main["test_se"],
            **permutation_control(main["test"], main["controls"]),
        )  # fmt: skip
        row = {"layer": layer, "heads": heads, **score.to_dict()}
        for name in also:
            extra = column[name]
            row |= {name: extra["test"], f"{name}_se": extra["test_se"],
                    f"{name}_chance": extra["chance"]}  # fmt: skip
        rows.append(row)
    return rows


def decoding_table(
    fit: CodeSet,
    test: CodeSet | None = None,
    folds: int = 2,
    seed: int = 0,
    also: Mapping[str, CodeSet] | None = None,
    permutations: int = PERMUTATIONS,
) -> list[dict[str, Any]]:
    """Rows ``{"layer", "heads", "metric", "fit", "test", "chance", "shuffled",
    "shuffled_band", "p_value", "permutations", "test_se"}``: ``shuffled`` is the mean
    of ``permutations`` decoders fit on permuted labels, ``shuffled_band`` their 5th-95th
    percentiles and ``p_value`` the permutation p-value of ``test``.

    ``layer`` is a layer index or ``"all"``; ``heads`` is ``"all"``, ``"h{i}"`` (head i
    alone) or ``"-h{i}"`` (every head but i). With ``test`` the decoder is fit on ``fit``
    and scored on ``test`` (e.g. in-distribution -> OOD); without, by ``folds``-fold
    cross-validation within ``fit`` (the fuzzy-logic protocol: fit on one half, score the
    other, averaged). ``also`` names more test sets the same decoders are scored on: a
    row gets ``{name}``, ``{name}_se`` and ``{name}_chance`` for each.
    """
    also = dict(also or {})
    check_permutations(permutations)
    if also and test is None:
        raise ValueError("also= scores the decoders on more test sets: pass test= as well")
    _, num_layers, num_heads, _ = fit.codes.shape
    decoders = _decoders(num_layers, num_heads)
    if test is not None and fit.target_kind == "classification":
        return _classifier_rows(fit, test, also, decoders, seed, permutations)
    rows = []
    for layer, label, layers, heads in decoders:
        x_fit = fit.features(layers, heads)
        if test is None:
            kind = "ridge" if fit.target_kind == "regression" else "classifier"
            score = cross_validated_decoding(
                x_fit, fit.target, kind=kind, folds=folds, seed=seed, permutations=permutations
            )
            rows.append({"layer": layer, "heads": label, **score.to_dict()})
            continue
        row = {"layer": layer, "heads": label}
        row |= ridge_decoding(x_fit, fit.target, test.features(layers, heads), test.target,
                              seed=seed, permutations=permutations).to_dict()  # fmt: skip
        for name, other in also.items():
            extra = ridge_decoding(x_fit, fit.target, other.features(layers, heads),
                                   other.target, seed=seed, permutations=1)  # fmt: skip
            row |= {name: extra.test, f"{name}_se": extra.test_se, f"{name}_chance": 0.0}
        rows.append(row)
    return rows

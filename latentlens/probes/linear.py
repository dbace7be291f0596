"""Linear decoders fit in-distribution and scored out-of-distribution (scikit-learn).

Every score comes with its baselines: ``chance`` (what a decoder with no information
reaches: 0 for R², the majority class's share of the test set for accuracy) and the
permutation control: the same decoder fit on the fit set's labels permuted
:data:`PERMUTATIONS` times, each scored on the real test labels, summarised as their mean
(``shuffled``), their 5th-95th percentile band and a permutation p-value, so that a number
is never read without what it must beat.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from latentlens.probes.logistic import fit_logistic, predict_logistic, standardise

ArrayLike = np.ndarray | torch.Tensor


@dataclass(frozen=True)
class DecodingScore:
    """A decoder's ``metric`` (``r2`` or ``accuracy``) on the data it was fit on (``fit``)
    and on held-out data (``test``, with its standard error ``test_se``), beside ``chance``
    and the ``shuffled``-label control. For several regression targets, R² is the uniform
    average over targets."""

    metric: str
    fit: float
    test: float
    chance: float
    shuffled: float
    test_se: float | None = None  # standard error of ``test`` (see the decoders)
    # the permutation controls' 5th and 95th percentiles, and the p-value of ``test``
    # against them: (1 + controls scoring at least ``test``) / (1 + permutations)
    shuffled_band: tuple[float, float] | None = None
    p_value: float | None = None
    permutations: int = 0

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


# Label permutations per decoder: the smallest p-value they can give is 1 / 21 < 0.05.
PERMUTATIONS = 20


def check_permutations(permutations: int) -> None:
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ValueError(
            f"permutations={permutations!r} is invalid: the control needs at least 1 label "
            f"permutation ({PERMUTATIONS} give a p-value below 0.05)"
        )


def label_permutations(examples: int, count: int, seed: int) -> np.ndarray:
    """``[count, examples]`` index permutations, drawn from one seeded generator."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(examples) for _ in range(count)])


def permutation_control(real: float, controls: np.ndarray) -> dict[str, object]:
    """What the permutation controls ``[permutations]`` say of the ``real`` score: their
    mean (``shuffled``), 5th-95th percentile band and the one-sided p-value of ``real``."""
    controls = np.asarray(controls, dtype=np.float64)
    low, high = np.percentile(controls, [5, 95])
    return {
        "shuffled": float(controls.mean()),
        "shuffled_band": (float(low), float(high)),
        "p_value": float((1 + np.sum(controls >= real)) / (1 + len(controls))),
        "permutations": len(controls),
    }


def as_matrix(name: str, values: ArrayLike) -> np.ndarray:
    """``[examples, features]`` float64 (a 1-D array becomes one column)."""
    array = values.detach().cpu().double().numpy() if isinstance(values, torch.Tensor) else values
    array = np.asarray(array, dtype=np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"{name} must be [examples, features], got shape {list(array.shape)}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return array


def as_classes(name: str, values: ArrayLike) -> np.ndarray:
    """``[examples]`` integer class ids."""
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values
    array = np.asarray(array)
    if array.ndim != 1:
        raise ValueError(f"{name} must be [examples] class ids, got shape {list(array.shape)}")
    return array


def check_pair(features: np.ndarray, targets: np.ndarray, what: str) -> None:
    if len(features) != len(targets):
        raise ValueError(
            f"{what}: {len(features)} feature rows but {len(targets)} target rows; "
            "pass one target per example"
        )
    if len(features) < 2:
        raise ValueError(f"{what}: {len(features)} example(s); a decoder needs at least 2")


def _check_widths(x_fit: np.ndarray, x_test: np.ndarray) -> None:
    if x_fit.shape[1] != x_test.shape[1]:
        raise ValueError(
            f"fit and test sets differ in width: features {x_fit.shape[1]} vs {x_test.shape[1]}"
        )


def r2_of_blocks(targets: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """scikit-learn's ``r2_score(targets, block)`` (R² of each column, a column with no
    variance scoring 1 if predicted exactly and 0 otherwise, then their mean) for every
    ``targets``-wide block of ``predicted``, in one pass instead of one validated call per
    block. Shapes: ``targets`` ``[n, k]`` (n >= 2), ``predicted`` ``[n, blocks * k]``;
    returns ``[blocks]``."""
    n, width = targets.shape
    blocks = predicted.reshape(n, -1, width)
    numerator = ((targets[:, None, :] - blocks) ** 2).sum(axis=0)  # [blocks, k]
    denominator = ((targets - targets.mean(axis=0)) ** 2).sum(axis=0)  # [k]
    varies = denominator != 0
    ratio = numerator / np.where(varies, denominator, 1.0)
    scores = np.where(varies & (numerator != 0), 1 - ratio, np.where(numerator != 0, 0.0, 1.0))
    return scores.mean(axis=1)


# A held-out R²'s standard error is read from its spread over this many parts of the set.
R2_PARTS = 16


def r2_standard_error(targets: np.ndarray, predictions: np.ndarray) -> float | None:
    """Standard error of a test R² from its values on :data:`R2_PARTS` contiguous parts of
    the test set (at least 4 examples each): sample std / sqrt(parts); None when too few."""
    parts = min(R2_PARTS, len(targets) // 4)
    if parts < 2:
        return None
    targets, predictions = (np.reshape(a, (len(a), -1)) for a in (targets, predictions))
    pairs = zip(np.array_split(targets, parts), np.array_split(predictions, parts), strict=True)
    values = [r2_of_blocks(y, p)[0] for y, p in pairs]
    return float(np.std(values, ddof=1) / np.sqrt(parts))


def ridge_decoding(
    fit_features: ArrayLike,
    fit_targets: ArrayLike,
    test_features: ArrayLike,
    test_targets: ArrayLike,
    alpha: float = 1.0,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
) -> DecodingScore:
    """Ridge regression (``alpha``, with intercept) fit on one set, R² on both, beside
    ``permutations`` decoders fit on permuted targets (one multi-output fit).

    Shapes: features ``[examples, d]``, targets ``[examples]`` or ``[examples, k]``.
    """
    score, _ = _ridge(fit_features, fit_targets, test_features, test_targets, alpha, seed,
                      permutations)  # fmt: skip
    return score


def _ridge(
    fit_features: ArrayLike,
    fit_targets: ArrayLike,
    test_features: ArrayLike,
    test_targets: ArrayLike,
    alpha: float,
    seed: int,
    permutations: int,
) -> tuple[DecodingScore, np.ndarray]:
    """:func:`ridge_decoding`'s score and its controls' test R² ``[permutations]``."""
    if alpha < 0:
        raise ValueError(f"alpha={alpha} is invalid: ridge needs alpha >= 0")
    check_permutations(permutations)
    x_fit, y_fit = as_matrix("fit_features", fit_features), as_matrix("fit_targets", fit_targets)
    x_test = as_matrix("test_features", test_features)
    y_test = as_matrix("test_targets", test_targets)
    check_pair(x_fit, y_fit, "fit set")
    check_pair(x_test, y_test, "test set")
    _check_widths(x_fit, x_test)
    if y_fit.shape[1] != y_test.shape[1]:
        raise ValueError(
            f"fit and test sets differ in width: targets {y_fit.shape[1]} vs {y_test.shape[1]}"
        )
    orders = label_permutations(len(y_fit), permutations, seed)
    # every permutation's targets side by side: ridge solves each column on its own
    stacked = np.concatenate([y_fit] + [y_fit[order] for order in orders], axis=1)
    from sklearn.linear_model import Ridge  # noqa: PLC0415 (scikit-learn loads slowly: 1.2 s)

    predicted = Ridge(alpha=alpha).fit(x_fit, stacked).predict(np.concatenate([x_fit, x_test]))
    width = y_fit.shape[1]
    on_fit, on_test = predicted[: len(x_fit), :width], predicted[len(x_fit) :]
    scores = r2_of_blocks(y_test, on_test)  # the decoder's, then each control's
    test, controls = float(scores[0]), scores[1:]
    score = DecodingScore(
        metric="r2",
        fit=float(r2_of_blocks(y_fit, on_fit)[0]),
        test=test,
        chance=0.0,
        test_se=r2_standard_error(y_test, on_test[:, :width]),
        **permutation_control(test, controls),
    )
    return score, controls


def classifier_decoding(
    fit_features: ArrayLike,
    fit_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
) -> DecodingScore:
    """Multinomial logistic regression on standardised features (scikit-learn's
    ``LogisticRegression`` objective, solved to its optimum by
    :func:`latentlens.probes.logistic.fit_logistic`, the controls in the same batch), fit
    on one set and scored (accuracy) on both; ``chance`` is the test set's majority-class
    share.

    Shapes: features ``[examples, d]``, labels ``[examples]`` class ids.
    """
    score, _ = _classifier(fit_features, fit_labels, test_features, test_labels, seed,
                           permutations)  # fmt: skip
    return score


def _classifier(
    fit_features: ArrayLike,
    fit_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    seed: int,
    permutations: int,
) -> tuple[DecodingScore, np.ndarray]:
    """:func:`classifier_decoding`'s score and its controls' accuracies ``[permutations]``."""
    check_permutations(permutations)
    x_fit, x_test = (
        as_matrix("fit_features", fit_features),
        as_matrix("test_features", test_features),
    )
    y_fit, y_test = as_classes("fit_labels", fit_labels), as_classes("test_labels", test_labels)
    check_pair(x_fit, y_fit, "fit set")
    check_pair(x_test, y_test, "test set")
    _check_widths(x_fit, x_test)
    classes, fit_ids = np.unique(y_fit, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"the fit set holds a single class ({classes.tolist()}); a classifier needs at "
            "least 2 classes: sample more examples or another split"
        )
    orders = label_permutations(len(y_fit), permutations, seed)
    labels = torch.as_tensor(np.stack([fit_ids] + [fit_ids[order] for order in orders]))
    count = len(labels)
    scaled_fit, scaled_test = standardise(
        torch.as_tensor(x_fit)[None], torch.as_tensor(x_test)[None]
    )
    weights = fit_logistic(scaled_fit.expand(count, -1, -1), labels, len(classes))
    on_test = classes[predict_logistic(weights, scaled_test.expand(count, -1, -1)).numpy()]
    hits = (on_test == y_test).mean(1)
    fitted = classes[predict_logistic(weights[:1], scaled_fit[:1]).numpy()[0]]
    _, counts = np.unique(y_test, return_counts=True)
    accuracy = float(hits[0])
    score = DecodingScore(
        metric="accuracy",
        fit=float((fitted == y_fit).mean()),
        test=accuracy,
        chance=float(counts.max() / len(y_test)),
        test_se=float(np.sqrt(accuracy * (1 - accuracy) / len(y_test))),  # binomial
        **permutation_control(accuracy, hits[1:]),
    )
    return score, hits[1:]


def cross_validated_decoding(
    features: ArrayLike,
    targets: ArrayLike,
    kind: str = "ridge",
    folds: int = 5,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
    **options: float,
) -> DecodingScore:
    """K-fold decoding within one set (when there is no separate test set): each fold is
    scored by a decoder fit on the others; ``test`` and the baselines are fold means and
    ``fit`` the mean score on the folds' fit parts; each permutation control's score is its
    mean over the folds. ``kind``: ``ridge`` or ``classifier``.
    """
    if kind not in ("ridge", "classifier"):
        raise ValueError(f"kind={kind!r} is invalid: choose 'ridge' or 'classifier'")
    x = as_matrix("features", features)
    y = as_matrix("targets", targets) if kind == "ridge" else as_classes("targets", targets)
    check_pair(x, y, "data")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds={folds!r} is invalid: cross-validation needs folds >= 2")
    if len(x) < folds:
        raise ValueError(
            f"{len(x)} examples cannot be split into {folds} folds; use folds <= {len(x)} "
            "or more examples"
        )
    if kind == "classifier":
        _, counts = np.unique(y, return_counts=True)
        if len(counts) < 2:
            raise ValueError("the labels hold a single class; a classifier needs at least 2")
        if counts.min() < folds:
            raise ValueError(
                f"the rarest class has {counts.min()} examples, fewer than folds={folds}; "
                "lower folds or sample more examples"
            )
        from sklearn.model_selection import StratifiedKFold  # noqa: PLC0415 (slow import)

        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
        results = [
            _classifier(x[fit], y[fit], x[test], y[test], seed, permutations)
            for fit, test in splitter.split(x, y)
        ]
    else:
        from sklearn.model_selection import KFold  # noqa: PLC0415 (slow import)

        splitter = KFold(folds, shuffle=True, random_state=seed)
        alpha = options.get("alpha", 1.0)
        results = [
            _ridge(x[fit], y[fit], x[test], y[test], alpha, seed, permutations)
            for fit, test in splitter.split(x, y)
        ]
    scores = [score for score, _ in results]
    test = float(np.mean([s.test for s in scores]))
    controls = np.mean([controls for _, controls in results], axis=0)
    errors = [s.test_se for s in scores]
    return DecodingScore(
        metric=scores[0].metric,
        fit=float(np.mean([s.fit for s in scores])),
        test=test,
        chance=float(np.mean([s.chance for s in scores])),
        # the folds' test sets are disjoint: the errors of their mean add in quadrature
        test_se=None if None in errors else float(np.sqrt(np.sum(np.square(errors))) / folds),
        **permutation_control(test, controls),
    )

"""Linear decoders fit in-distribution and scored out-of-distribution (scikit-learn).

Every score comes with its baselines: ``chance`` (what a decoder with no information
reaches: 0 for R², the majority class's share of the test set for accuracy) and
``shuffled`` (the same decoder fit on permuted labels, scored on the real test labels), so
that a number is never read without what it must beat.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

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

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


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


def permuted(labels: np.ndarray, seed: int) -> np.ndarray:
    """``labels`` in the shuffled-label control's order (seeded)."""
    return labels[np.random.default_rng(seed).permutation(len(labels))]


# A held-out R²'s standard error is read from its spread over this many parts of the set.
R2_PARTS = 16


def r2_standard_error(targets: np.ndarray, predictions: np.ndarray) -> float | None:
    """Standard error of a test R² from its values on :data:`R2_PARTS` contiguous parts of
    the test set (at least 4 examples each): sample std / sqrt(parts); None when too few."""
    parts = min(R2_PARTS, len(targets) // 4)
    if parts < 2:
        return None
    pairs = zip(np.array_split(targets, parts), np.array_split(predictions, parts), strict=True)
    values = [r2_score(y, p) for y, p in pairs]
    return float(np.std(values, ddof=1) / np.sqrt(parts))


def ridge_decoding(
    fit_features: ArrayLike,
    fit_targets: ArrayLike,
    test_features: ArrayLike,
    test_targets: ArrayLike,
    alpha: float = 1.0,
    seed: int = 0,
) -> DecodingScore:
    """Ridge regression (``alpha``, with intercept) fit on one set, R² on both.

    Shapes: features ``[examples, d]``, targets ``[examples]`` or ``[examples, k]``.
    """
    if alpha < 0:
        raise ValueError(f"alpha={alpha} is invalid: ridge needs alpha >= 0")
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
    decoder = Ridge(alpha=alpha).fit(x_fit, y_fit)
    control = Ridge(alpha=alpha).fit(x_fit, permuted(y_fit, seed))
    predicted = decoder.predict(x_test)
    return DecodingScore(
        metric="r2",
        fit=float(r2_score(y_fit, decoder.predict(x_fit))),
        test=float(r2_score(y_test, predicted)),
        chance=0.0,
        shuffled=float(r2_score(y_test, control.predict(x_test))),
        test_se=r2_standard_error(y_test, predicted),
    )


def _classifier(max_iter: int) -> object:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter))


def classifier_decoding(
    fit_features: ArrayLike,
    fit_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    max_iter: int = 1_000,
    seed: int = 0,
) -> DecodingScore:
    """Multinomial logistic regression on standardised features, fit on one set and
    scored (accuracy) on both; ``chance`` is the test set's majority-class share.

    Shapes: features ``[examples, d]``, labels ``[examples]`` class ids.
    """
    x_fit, x_test = (
        as_matrix("fit_features", fit_features),
        as_matrix("test_features", test_features),
    )
    y_fit, y_test = as_classes("fit_labels", fit_labels), as_classes("test_labels", test_labels)
    check_pair(x_fit, y_fit, "fit set")
    check_pair(x_test, y_test, "test set")
    _check_widths(x_fit, x_test)
    classes = np.unique(y_fit)
    if len(classes) < 2:
        raise ValueError(
            f"the fit set holds a single class ({classes.tolist()}); a classifier needs at "
            "least 2 classes: sample more examples or another split"
        )
    decoder = _classifier(max_iter).fit(x_fit, y_fit)
    control = _classifier(max_iter).fit(x_fit, permuted(y_fit, seed))
    _, counts = np.unique(y_test, return_counts=True)
    accuracy = float((decoder.predict(x_test) == y_test).mean())
    return DecodingScore(
        metric="accuracy",
        fit=float((decoder.predict(x_fit) == y_fit).mean()),
        test=accuracy,
        chance=float(counts.max() / len(y_test)),
        shuffled=float((control.predict(x_test) == y_test).mean()),
        test_se=float(np.sqrt(accuracy * (1 - accuracy) / len(y_test))),  # binomial
    )


def cross_validated_decoding(
    features: ArrayLike,
    targets: ArrayLike,
    kind: str = "ridge",
    folds: int = 5,
    seed: int = 0,
    **options: float,
) -> DecodingScore:
    """K-fold decoding within one set (when there is no separate test set): each fold is
    scored by a decoder fit on the others; ``test`` and the baselines are fold means and
    ``fit`` the mean score on the folds' fit parts. ``kind``: ``ridge`` or ``classifier``.
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
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    else:
        splitter = KFold(folds, shuffle=True, random_state=seed)
    decode = ridge_decoding if kind == "ridge" else classifier_decoding
    scores = [
        decode(x[fit], y[fit], x[test], y[test], seed=seed, **options)
        for fit, test in splitter.split(x, y)
    ]
    errors = [s.test_se for s in scores]
    return DecodingScore(
        metric=scores[0].metric,
        fit=float(np.mean([s.fit for s in scores])),
        test=float(np.mean([s.test for s in scores])),
        chance=float(np.mean([s.chance for s in scores])),
        shuffled=float(np.mean([s.shuffled for s in scores])),
        # the folds' test sets are disjoint: the errors of their mean add in quadrature
        test_se=None if None in errors else float(np.sqrt(np.sum(np.square(errors))) / folds),
    )

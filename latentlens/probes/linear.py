"""Linear decoders fit in-distribution and scored out-of-distribution (scikit-learn)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score

ArrayLike = np.ndarray | torch.Tensor


@dataclass(frozen=True)
class RegressionScore:
    """R² of a decoder on the data it was fit on (``fit``) and on held-out data (``test``);
    for several targets, the uniform average over targets (scikit-learn's default)."""

    fit: float
    test: float


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


def check_pair(features: np.ndarray, targets: np.ndarray, what: str) -> None:
    if len(features) != len(targets):
        raise ValueError(
            f"{what}: {len(features)} feature rows but {len(targets)} target rows; "
            "pass one target per example"
        )
    if len(features) < 2:
        raise ValueError(f"{what}: {len(features)} example(s); a decoder needs at least 2")


def ridge_decoding(
    fit_features: ArrayLike,
    fit_targets: ArrayLike,
    test_features: ArrayLike,
    test_targets: ArrayLike,
    alpha: float = 1.0,
) -> RegressionScore:
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
    if x_fit.shape[1] != x_test.shape[1] or y_fit.shape[1] != y_test.shape[1]:
        raise ValueError(
            f"fit and test sets differ in width: features {x_fit.shape[1]} vs "
            f"{x_test.shape[1]}, targets {y_fit.shape[1]} vs {y_test.shape[1]}"
        )
    decoder = Ridge(alpha=alpha, fit_intercept=True).fit(x_fit, y_fit)
    return RegressionScore(
        fit=float(r2_score(y_fit, decoder.predict(x_fit))),
        test=float(r2_score(y_test, decoder.predict(x_test))),
    )

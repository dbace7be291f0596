"""Ridge decoding on data with a known answer, and degenerate inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latentlens.probes import classifier_decoding, cross_validated_decoding, ridge_decoding


def test_planted_linear_code_is_decoded_and_random_features_are_not() -> None:
    rng = np.random.default_rng(0)
    z = rng.uniform(size=(2000, 6))
    mixing = rng.normal(size=(6, 32))
    features = z @ mixing + 0.01 * rng.normal(size=(2000, 32))
    # fit on the first half, score on a shifted second half (like an OOD set)
    score = ridge_decoding(features[:1000], z[:1000], features[1000:] + 0.0, z[1000:])
    assert score.fit > 0.99 and score.test > 0.99
    noise = rng.normal(size=(2000, 32))
    chance = ridge_decoding(noise[:1000], z[:1000], noise[1000:], z[1000:])
    assert chance.test < 0.02  # no information: R² at or below 0
    assert chance.fit < 0.1  # 32 features of 1000 examples overfit only a little


def test_torch_inputs_and_one_dimensional_targets() -> None:
    x = torch.randn(200, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 3.0
    score = ridge_decoding(x, y, x, y, alpha=0.0)
    assert score.test == pytest.approx(1.0)


def test_degenerate_inputs_are_clear_errors() -> None:
    x, y = np.zeros((10, 3)), np.zeros((10, 2))
    with pytest.raises(ValueError, match="10 feature rows but 9 target rows"):
        ridge_decoding(x, y[:9], x, y)
    with pytest.raises(ValueError, match="1 example"):
        ridge_decoding(x[:1], y[:1], x, y)
    with pytest.raises(ValueError, match="differ in width"):
        ridge_decoding(x, y, np.zeros((10, 4)), y)
    with pytest.raises(ValueError, match="NaN"):
        ridge_decoding(np.full((10, 3), np.nan), y, x, y)
    with pytest.raises(ValueError, match="alpha=-1"):
        ridge_decoding(x, y, x, y, alpha=-1)
    with pytest.raises(ValueError, match=r"\[examples, features\]"):
        ridge_decoding(np.zeros((10, 3, 2)), y, x, y)


def test_planted_rule_codes_are_classified_and_random_codes_are_at_chance() -> None:
    rng = np.random.default_rng(1)
    rules = rng.integers(0, 4, size=1200)
    centres = rng.normal(size=(4, 8)) * 3
    codes = centres[rules] + 0.1 * rng.normal(size=(1200, 8))
    score = classifier_decoding(codes[:600], rules[:600], codes[600:], rules[600:])
    assert score.fit == 1.0 and score.test == 1.0
    assert 0.2 < score.chance < 0.35 and score.shuffled < 0.4
    noise = rng.normal(size=(1200, 8))
    chance = classifier_decoding(noise[:600], rules[:600], noise[600:], rules[600:])
    assert chance.test < chance.chance + 0.06


def test_cross_validation_and_classifier_errors() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 3))
    labels = (x[:, 0] > 0).astype(int)
    score = cross_validated_decoding(x, labels, kind="classifier", folds=4)
    assert score.test > 0.85 and score.metric == "accuracy"
    ridge = cross_validated_decoding(x, 2 * x[:, 1], kind="ridge", folds=2)
    assert ridge.test > 0.99
    with pytest.raises(ValueError, match="single class"):
        classifier_decoding(x, np.zeros(40), x, labels)
    with pytest.raises(ValueError, match="3 examples cannot be split into 5 folds"):
        cross_validated_decoding(x[:3], x[:3, 0], folds=5)
    with pytest.raises(ValueError, match="rarest class has 1 examples"):
        cross_validated_decoding(x, np.r_[np.zeros(39), 1], kind="classifier", folds=2)
    with pytest.raises(ValueError, match="folds=1"):
        cross_validated_decoding(x, labels, folds=1)
    with pytest.raises(ValueError, match="kind='lasso'"):
        cross_validated_decoding(x, labels, kind="lasso")
    with pytest.raises(ValueError, match=r"\[examples\] class ids"):
        classifier_decoding(x, np.zeros((40, 2)), x, labels)


def test_decoding_scores_carry_standard_errors_that_match_their_spread() -> None:
    from latentlens.probes.linear import r2_standard_error

    rng = np.random.default_rng(0)
    weights = rng.normal(size=(6, 1))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, 6))
        return x, x @ weights + rng.normal(scale=2.0, size=(n, 1))

    x_fit, y_fit = draw(2_000)
    # The spread of the test R² over 40 fresh test sets, against the error one set reports.
    scores = [ridge_decoding(x_fit, y_fit, *draw(400)) for _ in range(40)]
    spread = np.std([s.test for s in scores], ddof=1)
    reported = np.median([s.test_se for s in scores])
    assert 0.6 < reported / spread < 1.6
    # By hand: 16 parts of 4 examples each, their R² values' std / 4.
    y, p = np.arange(64.0), np.arange(64.0) + 3 * np.sin(np.arange(64.0))
    parts = []
    for i in range(0, 64, 4):
        target, guess = y[i : i + 4], p[i : i + 4]
        parts.append(1 - np.sum((guess - target) ** 2) / np.sum((target - target.mean()) ** 2))
    assert np.std(parts) > 0.1  # parts that differ: the check is not of zeros
    assert r2_standard_error(y, p) == pytest.approx(np.std(parts, ddof=1) / 4)
    assert r2_standard_error(y[:7], p[:7]) is None  # under two parts of four
    # Accuracy: the binomial error of the held-out share.
    labels = np.repeat([0, 1], 100)
    features = labels[:, None] + rng.normal(scale=0.8, size=(200, 1))
    score = classifier_decoding(features, labels, features, labels)
    assert score.test_se == pytest.approx(np.sqrt(score.test * (1 - score.test) / 200))


def test_the_permutation_control_is_a_ridge_fit_per_permuted_target_with_a_p_value() -> None:
    """Each control is scikit-learn's ridge fit on the targets in one permuted order, scored
    on the real test targets; the p-value counts the controls at or above the real score."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    from latentlens.probes.linear import label_permutations

    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 5))
    y = x[:, :2] @ np.array([[0.3, -0.1], [0.2, 0.4]]) + rng.normal(size=(300, 2))
    score = ridge_decoding(x[:200], y[:200], x[200:], y[200:], seed=7, permutations=25)
    controls = np.array([
        r2_score(y[200:], Ridge(alpha=1.0).fit(x[:200], y[:200][order]).predict(x[200:]))
        for order in label_permutations(200, 25, seed=7)
    ])  # fmt: skip
    assert len(set(np.round(controls, 9))) == 25  # 25 different orders, not one repeated
    assert score.shuffled == pytest.approx(controls.mean(), abs=1e-12)
    assert score.shuffled_band == pytest.approx(np.percentile(controls, [5, 95]), abs=1e-12)
    assert score.p_value == pytest.approx((1 + (controls >= score.test).sum()) / 26)
    assert score.p_value == pytest.approx(1 / 26)  # a real signal beats every permutation
    assert score.test == pytest.approx(
        r2_score(y[200:], Ridge(alpha=1.0).fit(x[:200], y[:200]).predict(x[200:])), abs=1e-12
    )
    noise = ridge_decoding(x[:200], rng.normal(size=200), x[200:], rng.normal(size=100))
    assert noise.p_value > 0.1 and noise.permutations == 20  # no signal: inside the band


def test_classifier_controls_give_a_band_and_p_value_and_few_permutations_are_refused() -> None:
    rng = np.random.default_rng(4)
    rules = rng.integers(0, 3, size=600)
    codes = rng.normal(size=(600, 4))
    codes[:, 0] += 0.8 * rules
    score = classifier_decoding(codes[:300], rules[:300], codes[300:], rules[300:])
    low, high = score.shuffled_band
    assert low <= score.shuffled <= high < score.test and score.p_value == pytest.approx(1 / 21)
    folded = cross_validated_decoding(codes, rules, kind="classifier", folds=3, permutations=5)
    assert folded.permutations == 5 and folded.p_value == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="permutations=0 is invalid"):
        ridge_decoding(codes, rules, codes, rules, permutations=0)


def test_r2_of_blocks_is_scikit_learns_r2_of_each_block() -> None:
    """The one-pass R² of the decoders and their controls against scikit-learn's
    ``r2_score`` called on each block, the constant-column cases included (a column with
    no variance scores 1 where predicted exactly, 0 otherwise)."""
    from sklearn.metrics import r2_score

    from latentlens.probes.linear import r2_of_blocks

    rng = np.random.default_rng(0)
    targets = rng.normal(size=(50, 3))
    targets[:, 1] = 2.5  # no variance
    predicted = targets[:, None, :] + rng.normal(size=(50, 4, 3))
    predicted[:, 0, 1] = 2.5  # block 0 predicts the constant column exactly
    predicted = predicted.reshape(50, 12)
    expected = [r2_score(targets, predicted[:, 3 * b : 3 * (b + 1)]) for b in range(4)]
    np.testing.assert_array_equal(r2_of_blocks(targets, predicted), expected)
    one = rng.normal(size=(7, 1))
    assert r2_of_blocks(one, one)[0] == 1.0 == r2_score(one, one)

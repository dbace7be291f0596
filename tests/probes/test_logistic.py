"""The batched logistic-regression decoders against scikit-learn's, and the decoding table
they make against one scikit-learn fit per decoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from latentlens.probes.codes import CodeSet
from latentlens.probes.decoding import decoding_table
from latentlens.probes.linear import label_permutations
from latentlens.probes.logistic import fit_logistic, predict_logistic, standardise

# scikit-learn's lbfgs at tol=1e-12 stops with gradient entries near 1e-9; its coefficients
# are then within about 1e-7 of the optimum this solver reaches (to a gradient of 1e-9 per
# example). 1e-6 leaves room for that and fails on any difference of objective.
COEFFICIENTS = 1e-6


def reference(x: np.ndarray, y: np.ndarray) -> LogisticRegression:
    return LogisticRegression(tol=1e-12, max_iter=100_000).fit(x, y)


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_each_decoder_is_scikit_learns_logistic_regression(classes: int) -> None:
    rng = np.random.default_rng(classes)
    y = rng.integers(0, classes, (6, 240))
    x = rng.random((6, 240, 7)) ** 3  # skewed features, as attention weights are
    x[..., 0] += 0.3 * y  # some signal, not separable
    x[..., 3] = 0.25  # a constant feature: StandardScaler only centres it
    (scaled,) = standardise(torch.tensor(x))
    weights = fit_logistic(scaled, torch.tensor(y), classes)
    for b in range(6):
        standard = StandardScaler().fit_transform(x[b])
        np.testing.assert_allclose(scaled[b].numpy(), standard, atol=1e-12)
        expected = reference(standard, y[b])
        np.testing.assert_allclose(weights[b, :-1].numpy().T, expected.coef_, atol=COEFFICIENTS)
        assert np.array_equal(
            predict_logistic(weights[b : b + 1], scaled[b : b + 1])[0].numpy(),
            expected.predict(standard),
        )


def test_decoders_solved_in_chunks_are_the_decoders_solved_together(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    y = torch.tensor(rng.integers(0, 4, (5, 120)))
    (x,) = standardise(torch.tensor(rng.random((5, 120, 6))))
    together = fit_logistic(x, y, 4)
    monkeypatch.setattr("latentlens.probes.logistic.CHUNK_ENTRIES", 120 * 7 * 4 * 2)
    chunked = fit_logistic(x, y, 4)  # chunks of 2, 2 and 1 decoders
    torch.testing.assert_close(chunked, together, rtol=0, atol=1e-12)


def test_fewer_than_two_classes_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 classes"):
        fit_logistic(torch.zeros(1, 4, 2), torch.zeros(1, 4, dtype=torch.long), 1)


def code_sets() -> tuple[CodeSet, CodeSet, CodeSet]:
    generator = torch.Generator().manual_seed(1)
    rules = torch.randint(0, 4, (900,), generator=generator)
    codes = torch.rand(900, 3, 4, 2, generator=generator) ** 2
    codes[:, 1, 2, 0] += 0.5 * rules.float()  # layer 1 head 2 carries it, noisily
    codes[:, 2, :, 1] += 0.1 * (rules[:, None] == 3).float()

    def part(rows: slice, split: str) -> CodeSet:
        return CodeSet(codes[rows], rules[rows], rules[rows, None], rules[rows], split,
                       "classification")  # fmt: skip

    return part(slice(0, 300), "id"), part(slice(300, 600), "ood"), part(slice(600, 900), "id2")


def test_the_table_is_one_scikit_learn_fit_per_decoder_scored_on_every_test_set() -> None:
    fit, test, other = code_sets()
    rows = decoding_table(fit, test, seed=3, also={"held": other}, permutations=3)
    assert len(rows) == 1 + 3 * (1 + 4 + 4)
    permutations = label_permutations(len(fit), 3, seed=3)
    for row in rows:
        layers = list(range(3)) if row["layer"] == "all" else [row["layer"]]
        heads = {"all": None}.get(row["heads"])
        if row["heads"].startswith("-h"):
            heads = [h for h in range(4) if h != int(row["heads"][2:])]
        elif row["heads"].startswith("h"):
            heads = [int(row["heads"][1:])]
        scaler = StandardScaler().fit(fit.features(layers, heads).double().numpy())
        x_fit = scaler.transform(fit.features(layers, heads).double().numpy())
        y_fit = fit.target.numpy()
        decoder = reference(x_fit, y_fit)
        for name, key in ((test, "test"), (other, "held")):
            x = scaler.transform(name.features(layers, heads).double().numpy())
            accuracy = float((decoder.predict(x) == name.target.numpy()).mean())
            assert row[key] == accuracy, (row["layer"], row["heads"], key)
        x = scaler.transform(test.features(layers, heads).double().numpy())
        controls = np.array([
            (reference(x_fit, y_fit[order]).predict(x) == test.target.numpy()).mean()
            for order in permutations
        ])  # fmt: skip
        assert row["shuffled"] == pytest.approx(controls.mean(), abs=1e-12)
        assert row["shuffled_band"] == pytest.approx(np.percentile(controls, [5, 95]))
        assert row["p_value"] == (1 + (controls >= row["test"]).sum()) / 4
        assert row["permutations"] == 3
        assert row["fit"] == float((decoder.predict(x_fit) == y_fit).mean())
        assert row["held_se"] == pytest.approx(np.sqrt(row["held"] * (1 - row["held"]) / 300))
    by_key = {(r["layer"], r["heads"]): r for r in rows}
    assert by_key[(1, "h2")]["test"] > by_key[(1, "-h2")]["test"] + 0.1
    assert by_key[(1, "h2")]["chance"] == pytest.approx(
        float(torch.bincount(test.target).max() / 300)
    )


def test_codes_with_nan_are_a_clear_error() -> None:
    fit, test, _ = code_sets()
    test.codes[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="test set's codes hold NaN"):
        decoding_table(fit, test)

"""The official code's LogicLatents protocol (latentlens.probes.official) against slow
references written from callbacks.py and regression.py: the ridge's mask intercept, its
10 conjugate-gradient steps, the halves, the term bits, the tracker over training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.probes import extract
from latentlens.probes.official import (
    CG_ITERATIONS,
    LogicLatentsTracker,
    logic_latents,
    official_ridge_r2,
    read_logic_latents,
)
from latentlens.tasks import make_task


def slow_ridge_r2(x_fit, y_fit, x_test, y_test, l2=1.0, iterations=CG_ITERATIONS) -> list:
    """regression.py's RidgeRegression.fit/score per target, written out in float64 loops:
    intercept column = 1 where every feature is non-zero; (XᵀX + l2 I) w = Xᵀy by plain
    conjugate gradients from 0 (stop at |r|² <= 1e-10 |b|²); R² on the test rows."""
    x_fit, y_fit = np.asarray(x_fit, float), np.asarray(y_fit, float)
    x_test, y_test = np.asarray(x_test, float), np.asarray(y_test, float)
    mask = np.array([1.0 if all(v != 0 for v in row) else 0.0 for row in x_fit])
    design = np.column_stack([x_fit, mask])
    scores = []
    for t in range(y_fit.shape[1]):
        a = design.T @ design + l2 * np.eye(design.shape[1])
        b = design.T @ y_fit[:, t]
        w = np.zeros_like(b)
        r = b - a @ w
        p = r.copy()
        gamma = r @ r
        for _ in range(iterations):
            if not gamma > 1e-10 * (b @ b):
                break
            alpha = gamma / (p @ a @ p)
            w = w + alpha * p
            r = r - alpha * (a @ p)
            gamma, old = r @ r, gamma
            p = r + gamma / old * p
        predicted = x_test @ w[:-1] + w[-1]
        truth = y_test[:, t]
        scores.append(1 - np.sum((truth - predicted) ** 2) / np.sum((truth - truth.mean()) ** 2))
    return scores


def planted(n: int = 400, d: int = 17, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, d)) ** 2  # attention-like: non-negative, skewed
    x[::7, 3] = 0.0  # rows with a zero feature: their intercept column is 0
    y = (x[:, :8] @ rng.normal(size=(8, 8)) > 0.5).astype(float)  # bits
    return x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :]


def test_the_ridge_is_the_official_regression_written_out() -> None:
    x_fit, y_fit, x_test, y_test = planted()
    ours = official_ridge_r2(*(torch.tensor(v) for v in (x_fit, y_fit, x_test, y_test)))
    np.testing.assert_allclose(ours.numpy(), slow_ridge_r2(x_fit, y_fit, x_test, y_test),
                               atol=2e-4)  # float32 against float64 arithmetic  # fmt: skip
    assert ours.numpy().std() > 0.01  # eight targets, eight different scores


def test_ten_steps_are_not_the_exact_solution_and_the_mask_intercept_matters() -> None:
    """What makes the official number its own: 10 CG steps on a 17-dimensional system stop
    short of the ridge optimum, and a row with a zero feature gets no intercept in the fit."""
    x_fit, y_fit, x_test, y_test = planted(d=30)
    scales = np.logspace(-1.5, 1, 30)  # heads of very different spread: CG needs many steps
    x_fit, x_test = x_fit * scales, x_test * scales
    ten = slow_ridge_r2(x_fit, y_fit, x_test, y_test)
    exact = slow_ridge_r2(x_fit, y_fit, x_test, y_test, iterations=200)
    assert np.abs(np.subtract(ten, exact)).max() > 1e-3
    unmasked = x_fit.copy()
    unmasked[unmasked == 0] = 1e-9
    assert np.abs(np.subtract(slow_ridge_r2(unmasked, y_fit, x_test, y_test), ten)).max() > 1e-4


def test_the_ridge_matches_jaxs_conjugate_gradients() -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    x_fit, y_fit, x_test, y_test = planted()  # Table A1's 2 layers x 8 heads: 16 features
    design = jnp.column_stack([jnp.asarray(x_fit, jnp.float32),
                               jnp.all(jnp.asarray(x_fit) != 0, axis=1)])  # fmt: skip
    scores = []
    for t in range(y_fit.shape[1]):
        w = jax.scipy.sparse.linalg.cg(
            lambda u: design.T @ (design @ u) + u, design.T @ jnp.asarray(y_fit[:, t], jnp.float32),
            x0=jnp.zeros(design.shape[1], jnp.float32), maxiter=10,
        )[0]  # fmt: skip
        predicted = np.asarray(jnp.asarray(x_test, jnp.float32) @ w[:-1] + w[-1])
        truth = y_test[:, t]
        scores.append(1 - np.sum((truth - predicted) ** 2) / np.sum((truth - truth.mean()) ** 2))
    ours = official_ridge_r2(*(torch.tensor(v) for v in (x_fit, y_fit, x_test, y_test)))
    np.testing.assert_allclose(ours.numpy(), scores, atol=1e-4)


def tiny_model() -> tuple[DecoderTransformer, object]:
    task = make_task("fuzzy-logic", {"seq_len": 8}, seed=0)
    torch.manual_seed(0)
    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", n_ctx=8, d_model=16,
                                                        n_heads=4, qk_dim=8, v_dim=8))  # fmt: skip
    return model, task


def test_logic_latents_reads_the_last_self_codes_of_training_combinations_in_halves() -> None:
    model, task = tiny_model()
    result = logic_latents(model, task, examples=600, seed=3)
    names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    select = dict.fromkeys(names, lambda act, batch: act[:, :, -1, -1])
    got = extract(model, task, "train", names, 600, seed=3, select=select,
                  sample_options={"inputs": "fixed_query"})  # fmt: skip
    query = task.sample(2, "train", task.make_generator(9), inputs="fixed_query").inputs[:, -1]
    assert torch.equal(query[0], query[1])  # the query input is fixed
    x = torch.cat([got.activations[n] for n in names], dim=1).numpy()  # layer-major
    y = got.labels["term_bits"].flatten(1).numpy()
    expected = slow_ridge_r2(x[:300], y[:300], x[300:], y[300:])
    np.testing.assert_allclose(result["r2_per_target"], expected, atol=2e-4)
    assert result["r2_attn_latent"] == pytest.approx(np.mean(expected), abs=2e-4)
    with pytest.raises(ValueError, match="even count"):
        logic_latents(model, task, examples=601)


def test_the_tracker_records_every_evaluation_and_a_resume_keeps_its_own(tmp_path: Path) -> None:
    from latentlens.training import TrainConfig, Trainer, model_for_task

    config = Trainer.resolve_config(
        "fuzzy-logic", model_for_task("fuzzy-logic", {"seq_len": 8}, d_model=16),
        TrainConfig.for_task("fuzzy-logic", steps=6, eval_every=2, warmup_steps=1,
                             batch_size=16, eval_examples=32), {"seq_len": 8},
    )  # fmt: skip
    tracker = LogicLatentsTracker(examples=200)
    trainer = Trainer.create(tmp_path / "run", config, device="cpu", quiet=True,
                             callbacks=[tracker])  # fmt: skip
    trainer.train()
    records = read_logic_latents(tmp_path / "run")
    assert [r["step"] for r in records] == [0, 2, 4, 6]
    final = logic_latents(trainer.model, trainer.task, examples=200)
    assert records[-1]["r2_attn_latent"] == pytest.approx(final["r2_attn_latent"], abs=1e-6)


def test_latentlens_train_records_it_and_figures_draw_it(tmp_path: Path, capsys) -> None:
    from latentlens.cli import main
    from latentlens.training import Trainer

    run = tmp_path / "run"
    command = ["train", "--task", "fuzzy-logic", "--d-model", "16", "--steps", "4", "--eval-every",
               "2", "--warmup-steps", "1", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main([*command, "--tracking-examples", "200", "--run-dir", str(run)]) == 0
    records = read_logic_latents(run)
    assert [r["step"] for r in records] == [0, 2, 4]
    trained = Trainer.load(run, device="cpu")  # the last record read the flag's 200 examples
    assert trained.config["train"]["tracking_examples"] == 200
    final = logic_latents(trained.model, trained.task, examples=200)["r2_attn_latent"]
    assert records[-1]["r2_attn_latent"] == pytest.approx(final, abs=1e-6)
    assert final != pytest.approx(logic_latents(trained.model, trained.task, 400)["r2_attn_latent"])
    assert main([*command, "--tracking-examples", "201", "--run-dir", str(tmp_path / "odd")]) == 2
    assert "tracking_examples=201 is invalid: give an even integer" in capsys.readouterr().err
    assert not (tmp_path / "odd").exists()
    assert main(["figures", str(run), "--formats", "png"]) == 0
    assert (run / "figures" / "logic_latents_over_training.png").is_file()

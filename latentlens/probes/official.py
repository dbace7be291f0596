"""Protocols of the official code (smonsays/hypernetwork-attention, ``callbacks.py``),
computed as it computes them, so that latentlens's numbers can stand beside the official
code's own: :func:`logic_latents` is the callback ``LogicLatents``'s ``r2_attn_latent``.

``LogicLatents`` (fuzzy logic), as the official code runs it:

- the attention weights of the last query on the last key, a[:, T-1, T-1], of every layer
  and head (``[examples, layer x head]``, layer-major), on ``valid_fixed_query``: 16,000
  problems of the *training* term combinations, every problem sharing one query input;
- targets: the term bits, ``[examples, K x L]``;
- the first half fits, the second half scores (``jnp.split(x, 2)``, in the loader's order);
- per target, ``RidgeRegression(l2_reg=1.0, intercept=True)``: an intercept column that
  is 1 where every feature of the row is non-zero (else 0), penalised like the weights,
  no centring, the normal equations (XᵀX + I) w = Xᵀy solved by 10 iterations of
  conjugate gradients from w = 0 (``jax.scipy.sparse.linalg.cg``, relative tolerance
  1e-5), in float32;
- R² = 1 - SSE / SST on the second half, per target; ``r2_attn_latent`` is their mean.

It differs from latentlens's own decoding (:func:`latentlens.probes.fuzzy_logic_codes` on
held-out combinations, scikit-learn's ridge solved exactly with an unpenalised intercept,
2-fold cross-validation; docs/methods/probes.md) in the combinations, the intercept and the
solver; both are reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from latentlens.probes.codes import fuzzy_logic_codes
from latentlens.training.callbacks import Callback
from latentlens.training.run_dir import append_jsonl, read_jsonl, truncate_jsonl

if TYPE_CHECKING:
    from pathlib import Path

    from latentlens.models import HookedModel
    from latentlens.tasks import Task
    from latentlens.training.trainer import Trainer

# configs/logic.py: num_valid of every fuzzy-logic configuration
OFFICIAL_EXAMPLES = 16_000
# callbacks.py: RidgeRegression(feature_dim, l2_reg=1.0, intercept=True); regression.py: cg
L2_REG = 1.0
CG_ITERATIONS = 10
CG_TOLERANCE = 1e-5  # jax.scipy.sparse.linalg.cg's default tol (atol 0)
FILE_NAME = "logic_latents.jsonl"


def official_ridge_r2(
    x_fit: torch.Tensor,
    y_fit: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    l2_reg: float = L2_REG,
    iterations: int = CG_ITERATIONS,
) -> torch.Tensor:
    """R² ``[targets]`` of the official ``RidgeRegression`` fit on ``x_fit`` ``[n, d]``,
    ``y_fit`` ``[n, targets]`` and scored on the test set, each target on its own (the
    callback's ``vmap``), in float32: the mask intercept, the penalised normal equations,
    ``iterations`` conjugate-gradient steps from zero."""
    x_fit, x_test = (torch.as_tensor(x, dtype=torch.float32) for x in (x_fit, x_test))
    y_fit, y_test = (torch.as_tensor(y, dtype=torch.float32) for y in (y_fit, y_test))
    # fit: the intercept column is the rows' mask; apply: the intercept is added to every row
    design = torch.cat([x_fit, (x_fit != 0).all(1, keepdim=True).float()], dim=1)
    weights = torch.stack([
        _conjugate_gradients(design, y_fit[:, t], l2_reg, iterations)
        for t in range(y_fit.shape[1])
    ], dim=1)  # fmt: skip
    predicted = x_test @ weights[:-1] + weights[-1]
    residual = ((y_test - predicted) ** 2).sum(0)
    spread = ((y_test - y_test.mean(0)) ** 2).sum(0)
    return 1.0 - residual / spread


def _conjugate_gradients(
    design: torch.Tensor, target: torch.Tensor, l2_reg: float, iterations: int
) -> torch.Tensor:
    """``jax.scipy.sparse.linalg.cg`` on (XᵀX + l2 I) w = Xᵀy from w = 0, without a
    preconditioner: at most ``iterations`` steps, stopping once |r|² <= tol² |b|²."""

    def matvec(u: torch.Tensor) -> torch.Tensor:
        return design.T @ (design @ u) + l2_reg * u

    b = design.T @ target
    w = torch.zeros_like(b)
    r = b - matvec(w)
    p, gamma = r.clone(), torch.dot(r, r)
    bound = CG_TOLERANCE**2 * torch.dot(b, b)
    for _ in range(iterations):
        if not gamma > bound:
            break
        product = matvec(p)
        alpha = gamma / torch.dot(p, product)
        w = w + alpha * p
        r = r - alpha * product
        gamma, previous = torch.dot(r, r), gamma
        p = r + (gamma / previous) * p
    return w


def logic_latents(
    model: HookedModel, task: Task, examples: int = OFFICIAL_EXAMPLES, seed: int = 0
) -> dict[str, Any]:
    """``LogicLatents``'s ``r2_attn_latent`` of ``model`` on fuzzy-logic ``task`` (the
    module docstring's protocol), with each target's R²."""
    if examples < 4 or examples % 2:
        raise ValueError(f"examples={examples}: the protocol splits an even count of at least 4")
    codes = fuzzy_logic_codes(model, task, "train", examples, seed)
    x = codes.codes.flatten(1)  # [examples, layer x head x 1]: layer-major, as stacked there
    y = codes.target
    half = examples // 2
    per_target = official_ridge_r2(x[:half], y[:half], x[half:], y[half:])
    return {
        "r2_attn_latent": float(np.mean(per_target.double().numpy())),
        "r2_per_target": per_target.tolist(),
        "examples": examples,
        "protocol": "official LogicLatents: training combinations, fixed query, a[T-1, T-1] "
        "of every layer and head, first half fits, second half scores, ridge l2 1 with a "
        "penalised mask intercept by 10 conjugate-gradient steps, mean R² over term bits",
    }


def read_logic_latents(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records :class:`LogicLatentsTracker` wrote into ``run_dir``."""
    from latentlens.training.run_dir import RunDirectory  # noqa: PLC0415

    return read_jsonl(RunDirectory(run_dir).tracking / FILE_NAME)


class LogicLatentsTracker(Callback):
    """``r2_attn_latent`` at every evaluation, as the official callback logs it over
    training: ``{"step", "r2_attn_latent"}`` in ``tracking/logic_latents.jsonl``."""

    def __init__(self, examples: int = OFFICIAL_EXAMPLES, seed: int = 0) -> None:
        self.examples, self.seed = examples, seed

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        result = logic_latents(trainer.model, trainer.task, self.examples, self.seed)
        row = {"step": step, "r2_attn_latent": result["r2_attn_latent"]}
        append_jsonl(trainer.run_dir.tracking / FILE_NAME, [row])

    def on_resume(self, trainer: Trainer, step: int) -> None:
        path = trainer.run_dir.tracking / FILE_NAME
        if path.is_file():
            truncate_jsonl(path, step)

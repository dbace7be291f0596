"""Many logistic-regression decoders fit at once: scikit-learn's ``LogisticRegression``
(L2 penalty ``1 / (2C) * ||W||²``, intercept unpenalised; multinomial for three or more
classes, one logit for two) on features standardised as ``StandardScaler`` does, solved
to its optimum by Newton's method in float64, batched over decoders.

A latent-code atlas fits one decoder per head, per head left out and per layer, each
with a shuffled-label control: hundreds of small problems, each of which costs
scikit-learn's solver tens of milliseconds of set-up for a few iterations. Here every
problem of one width is a slice of one batch: the same objective, solved to a gradient
below :data:`TOLERANCE` (scikit-learn's own solver stops at ``tol=1e-4``).
"""

from __future__ import annotations

import torch

TOLERANCE = 1e-9  # the largest gradient entry at the optimum, per example
MAX_ITERATIONS = 100


def standardise(fit: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    """``[batch, examples, features]`` sets centred and scaled by the mean and population
    standard deviation of ``fit`` (a constant feature is only centred), as
    ``StandardScaler`` does."""
    mean = fit.mean(dim=1, keepdim=True)
    scale = fit.std(dim=1, correction=0, keepdim=True)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return [(x - mean) / scale for x in (fit, *others)]


def _logits(weights: torch.Tensor, x: torch.Tensor, binary: bool) -> torch.Tensor:
    """``[batch, examples, classes]`` logits; ``x`` carries a column of ones last. A
    binary decoder has one logit: class 0's is fixed at 0."""
    free = x @ weights
    return torch.cat([torch.zeros_like(free), free], dim=-1) if binary else free


def _objective(
    weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor, penalty: float, binary: bool
) -> torch.Tensor:
    """``[batch]``: the summed cross-entropy plus ``penalty / 2 * ||W||²`` (no intercept)."""
    log_p = _logits(weights, x, binary).log_softmax(-1)
    loss = -log_p.gather(-1, y[..., None]).squeeze(-1).sum(-1)
    return loss + 0.5 * penalty * weights[:, :-1].square().sum((1, 2))


def fit_logistic(x: torch.Tensor, y: torch.Tensor, classes: int, C: float = 1.0) -> torch.Tensor:
    """Weights ``[batch, features + 1, classes or 1]`` (the intercept last) of the decoders
    of ``x`` ``[batch, examples, features]`` (already standardised) to ``y`` ``[batch,
    examples]`` class ids in ``0 .. classes - 1``: the minimiser of the summed
    cross-entropy plus ``||W||² / (2C)``."""
    if classes < 2:
        raise ValueError(f"classes={classes}: a decoder needs at least 2 classes")
    batch, examples, features = x.shape
    x = torch.cat([x.double(), x.new_ones(batch, examples, 1, dtype=torch.float64)], dim=-1)
    binary = classes == 2
    free = 1 if binary else classes
    size = (features + 1) * free
    penalty = 1.0 / C
    onehot = torch.nn.functional.one_hot(y, classes).double()[..., -free:]
    penalised = torch.ones(features + 1, free, dtype=torch.float64)
    penalised[-1] = 0.0  # the intercept
    # The intercepts of a multinomial decoder can all move together without changing it:
    # a tiny ridge picks one of them (the probabilities do not depend on it).
    gauge = torch.zeros(features + 1, free, dtype=torch.float64)
    gauge[-1] = 0.0 if binary else 1e-10
    weights = torch.zeros(batch, features + 1, free, dtype=torch.float64)
    diagonal = (penalty * penalised + gauge).T.reshape(size)  # (class, feature) order
    objective = _objective(weights, x, y, penalty, binary)
    for _ in range(MAX_ITERATIONS):
        p = _logits(weights, x, binary).softmax(-1)[..., -free:]  # [batch, examples, free]
        gradient = x.transpose(1, 2) @ (p - onehot) + penalty * penalised * weights
        active = gradient.abs().amax((1, 2)) > TOLERANCE * examples
        if not active.any():
            break
        # Hessian of the cross-entropy: sum over examples of (diag(p) - p pᵀ) ⊗ x xᵀ,
        # ordered (class, feature) on both axes
        curvature = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
        hessian = torch.einsum("bncd,bnj,bnk->bcjdk", curvature, x, x)
        hessian = hessian.reshape(batch, size, size) + torch.diag(diagonal)
        step = torch.linalg.solve(hessian, gradient.transpose(1, 2).reshape(batch, size, 1))
        step = step.reshape(batch, free, features + 1).transpose(1, 2)
        step = step * active[:, None, None]  # converged decoders stay where they are
        slope = (gradient * step).sum((1, 2))
        scale = torch.ones(batch, dtype=torch.float64)
        for _ in range(30):  # backtracking: a decoder halves its step until it descends
            trial = weights - scale[:, None, None] * step
            value = _objective(trial, x, y, penalty, binary)
            # descent by Armijo's rule, up to the rounding of the objective itself
            bound = objective - 1e-4 * scale * slope + 1e-12 * objective.abs()
            worse = value > bound
            if not worse.any():
                break
            scale = torch.where(worse, scale / 2, scale)
        weights, objective = trial, value
    return weights


def predict_logistic(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Class ids ``[batch, examples]`` of the decoders ``weights`` on standardised ``x``."""
    ones = x.new_ones(*x.shape[:2], 1, dtype=torch.float64)
    return _logits(weights, torch.cat([x.double(), ones], -1), weights.shape[-1] == 1).argmax(-1)

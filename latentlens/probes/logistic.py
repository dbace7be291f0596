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


# The largest Newton system a chunk of decoders builds at once, in float64 entries of its
# per-example terms (``[decoders, examples, classes x features]``): 2^25, 256 MiB.
CHUNK_ENTRIES = 2**25


def fit_logistic(x: torch.Tensor, y: torch.Tensor, classes: int, C: float = 1.0) -> torch.Tensor:
    """Weights ``[batch, features + 1, classes or 1]`` (the intercept last) of the decoders
    of ``x`` ``[batch, examples, features]`` (already standardised) to ``y`` ``[batch,
    examples]`` class ids in ``0 .. classes - 1``: the minimiser of the summed
    cross-entropy plus ``||W||² / (2C)``. Decoders are solved in chunks of bounded memory,
    each on ``x``'s device."""
    if classes < 2:
        raise ValueError(f"classes={classes}: a decoder needs at least 2 classes")
    if not C > 0:
        raise ValueError(f"C={C}: the inverse penalty must be positive")
    batch, examples, features = x.shape
    free = 1 if classes == 2 else classes
    chunk = max(1, CHUNK_ENTRIES // max(1, examples * (features + 1) * free))
    return torch.cat([
        _fit_chunk(x[start : start + chunk], y[start : start + chunk], classes, C)
        for start in range(0, batch, chunk)
    ]) if batch else x.new_zeros(0, features + 1, free, dtype=torch.float64)  # fmt: skip


def _fit_chunk(x: torch.Tensor, y: torch.Tensor, classes: int, C: float) -> torch.Tensor:
    """:func:`fit_logistic` on one chunk of decoders, by Newton's method with backtracking."""
    batch, examples, features = x.shape
    x = torch.cat([x.double(), x.new_ones(batch, examples, 1, dtype=torch.float64)], dim=-1)
    y = y.to(x.device)
    binary = classes == 2
    free = 1 if binary else classes
    size = (features + 1) * free
    penalty = 1.0 / C
    onehot = torch.nn.functional.one_hot(y, classes).double()[..., -free:]
    options = dict(dtype=torch.float64, device=x.device)
    penalised = torch.ones(features + 1, free, **options)
    penalised[-1] = 0.0  # the intercept
    # (class, feature) order: the penalty's diagonal, and the intercepts' common mode
    fixed = torch.diag((penalty * penalised).T.reshape(size))
    if not binary:
        # A multinomial decoder's intercepts can all move together without changing its
        # probabilities: the cross-entropy's Hessian is singular along their sum. Its
        # gradient never has a part along it (the probabilities sum to 1, as the labels'
        # one-hot rows do), so curvature added there alone changes no Newton step's other
        # parts, keeps the sum at its start (0) and makes the system positive definite.
        common = torch.zeros(size, **options)
        common[features :: features + 1] = 1.0
        fixed = fixed + examples / 4 * torch.outer(common, common)
    weights = torch.zeros(batch, features + 1, free, **options)
    objective = _objective(weights, x, y, penalty, binary)
    for _ in range(MAX_ITERATIONS):
        p = _logits(weights, x, binary).softmax(-1)[..., -free:]  # [batch, examples, free]
        gradient = x.transpose(1, 2) @ (p - onehot) + penalty * penalised * weights
        active = gradient.abs().amax((1, 2)) > TOLERANCE * examples
        if not active.any():
            break
        step = _newton_step(x, p, gradient, fixed)
        step = step * active[:, None, None]  # converged decoders stay where they are
        slope = (gradient * step).sum((1, 2))
        scale = torch.ones(batch, **options)
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


def _newton_step(
    x: torch.Tensor, p: torch.Tensor, gradient: torch.Tensor, fixed: torch.Tensor
) -> torch.Tensor:
    """The Newton step ``[batch, features + 1, free]`` of the cross-entropy's Hessian,
    sum over examples of (diag(p) - p pᵀ) ⊗ x xᵀ ordered (class, feature) on both axes,
    plus ``fixed`` (the penalty's): the block diagonal Xᵀ diag(p_c) X less Qᵀ Q, Q = p ⊗ x
    per example. The system is positive definite: it is solved by Cholesky's factors (LU
    with pivoting found exact zero pivots on two MKL threads in the intercepts' direction
    that a tiny ridge had left near-singular)."""
    batch, _, width = x.shape
    free = p.shape[-1]
    size = width * free
    q = (p[..., :, None] * x[..., None, :]).flatten(2)  # [batch, examples, (class, feature)]
    hessian = -(q.transpose(1, 2) @ q)
    blocks = (q.transpose(1, 2) @ x).unflatten(1, (free, width))  # [batch, class, j, k]
    square = hessian.view(batch, free, width, free, width)
    for c in range(free):
        square[:, c, :, c, :] += blocks[:, c]
    factor, info = torch.linalg.cholesky_ex(hessian + fixed)
    if info.any():
        raise ValueError(
            "a decoder's Newton system is not positive definite: its features hold NaN or "
            "infinite values"
        )
    step = torch.cholesky_solve(gradient.transpose(1, 2).reshape(batch, size, 1), factor)
    return step.reshape(batch, free, width).transpose(1, 2)


def predict_logistic(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Class ids ``[batch, examples]`` of the decoders ``weights`` on standardised ``x``."""
    ones = x.new_ones(*x.shape[:2], 1, dtype=torch.float64)
    return _logits(weights, torch.cat([x.double(), ones], -1), weights.shape[-1] == 1).argmax(-1)

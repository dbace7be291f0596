"""Do heads work together? The paper's Fig. A8: the mean latent code per task (rule or term
combination) and, per example, how many heads are active, so that co-active heads are seen
on single examples and not only in averages (docs/methods/probes.md, "Heads together").

A code here is one query-key pair's weights over the heads of a layer, ``[heads]``; its
values may be negative (linear attention, HYLA), so activity is read from magnitudes:

- ``participation``: (Σ_h |a_h|)² / Σ_h |a_h|², the effective number of heads: 1 for one
  active head, H for H equal ones (undefined, and left out, for an all-zero code);
- ``active``: heads with |a_h| at least ``ACTIVE_SHARE`` of the example's largest.

A head whose weight is the same for every task (an offset) counts as active in both, yet
tells the tasks apart no better than none; ``variation_participation`` is therefore also
given: the effective number of heads of each task's mean code minus the mean over tasks,
the heads the tasks differ by.
"""

from __future__ import annotations

import torch

# A head is active where its weight's magnitude is at least half the largest of the code.
ACTIVE_SHARE = 0.5


def participation(codes: torch.Tensor) -> torch.Tensor:
    """Effective number of heads ``[n]`` of codes ``[n, heads]``; NaN for an all-zero code."""
    magnitude = codes.double().abs()
    total = magnitude.sum(-1)
    return torch.where(total > 0, total.square() / magnitude.square().sum(-1), torch.nan)


def active_heads(codes: torch.Tensor, share: float = ACTIVE_SHARE) -> torch.Tensor:
    """Heads ``[n]`` (long) whose magnitude is at least ``share`` of the code's largest."""
    if not 0 < share <= 1:
        raise ValueError(f"share={share} is invalid: choose a fraction in (0, 1]")
    magnitude = codes.double().abs()
    largest = magnitude.amax(-1, keepdim=True)
    return ((magnitude >= share * largest) & (largest > 0)).sum(-1)


def head_sharing(codes: torch.Tensor, groups: torch.Tensor) -> dict[str, object]:
    """Fig. A8 for codes ``[n, heads]`` of tasks ``groups`` ``[n]``: ``group_means``
    ``[g][heads]`` (the groups in ascending id, ``group_ids``), the participation and
    active-head count of each group's mean code, and per example the mean participation,
    its 5th/50th/95th percentiles, the share of examples with two or more active heads,
    and the histogram of active-head counts (index = count, 0 to H); and per group the
    effective heads of its mean's deviation from the mean over groups
    (``variation_participation``; NaN where every group's mean is the same)."""
    if codes.ndim != 2 or groups.shape != codes.shape[:1]:
        raise ValueError(
            f"codes {tuple(codes.shape)} and groups {tuple(groups.shape)}: expected [n, heads] "
            "and [n]"
        )
    ids = torch.unique(groups)
    means = torch.stack([codes[groups == g].double().mean(0) for g in ids])
    each = participation(codes)
    defined = each[~each.isnan()]
    counts = active_heads(codes)
    quantiles = (
        torch.quantile(defined, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)).tolist()
        if len(defined)
        else [float("nan")] * 3
    )
    return {
        "heads": codes.shape[1],
        "group_ids": ids.tolist(),
        "group_means": means.tolist(),
        "group_participation": participation(means).tolist(),
        "group_active": active_heads(means).tolist(),
        "variation_participation": participation(means - means.mean(0)).tolist(),
        "participation_mean": float(defined.mean()) if len(defined) else float("nan"),
        "participation_quantiles": quantiles,
        "share_two_or_more_active": float((counts >= 2).double().mean()),
        "active_histogram": torch.bincount(counts, minlength=codes.shape[1] + 1).tolist(),
    }

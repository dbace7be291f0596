"""Fig. A8's figure: per model, the mean code of each task (a heatmap, tasks by heads),
a sample of single examples' codes, and how many heads are active per example
(:mod:`latentlens.probes.head_sharing`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure


def head_sharing_figure(
    models: Mapping[str, tuple[Mapping[str, Any], np.ndarray]], task_label: str = "task"
) -> Figure:
    """One row per model (``name -> (head_sharing results, sample codes [m, heads])``):
    the mean code per task, ``m`` single codes, and the histogram of active heads per
    example. Each row's colour scale is symmetric about 0 (codes may be negative)."""
    if not models:
        raise ValueError("no model to draw: pass at least one")
    figure = Figure(figsize=(11, 2.6 * len(models)), layout="constrained")
    axes = figure.subplots(len(models), 3, squeeze=False, width_ratios=(1.2, 1.2, 1))
    for row, (name, (results, sample)) in zip(axes, models.items(), strict=True):
        means = np.asarray(results["group_means"], dtype=float)
        sample = np.asarray(sample, dtype=float)
        scale = float(max(np.abs(means).max(), np.abs(sample).max(), 1e-12))
        for ax, values, title in (
            (row[0], means, f"{name}: mean code per {task_label}"),
            (row[1], sample, f"{len(sample)} single examples"),
        ):
            image = ax.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-scale, vmax=scale,
                              interpolation="nearest")  # fmt: skip
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("head")
            ax.set_xticks(range(values.shape[1]))
        row[0].set_ylabel(task_label)
        row[1].set_ylabel("example")
        figure.colorbar(image, ax=row[1], shrink=0.8, label="weight")
        histogram: Sequence[int] = results["active_histogram"]
        share = np.asarray(histogram, dtype=float) / max(sum(histogram), 1)
        row[2].bar(range(len(share)), share, color="#4c72b0")
        row[2].set_xticks(range(len(share)))
        row[2].set_xlabel("active heads (≥ half the largest |weight|)")
        row[2].set_ylabel("share of examples")
        row[2].set_title(
            f"effective heads per example {results['participation_mean']:.2f}", fontsize=9
        )
    return figure

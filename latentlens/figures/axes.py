"""Axis and label conventions shared by the figures."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator


def step_axis(ax: Axes) -> None:
    """Label ``ax``'s x axis as training steps, ticked at whole steps only (a short run's
    few evaluations would otherwise get ticks such as 2.5)."""
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def metric_label(metric: str) -> str:
    """How a figure names a metric: ``r2`` is R², ``token_accuracy`` token accuracy."""
    return "R²" if metric == "r2" else metric.replace("_", " ")


def log_scaled(metric: str) -> bool:
    """Whether figures draw ``metric`` on a log axis: a loss, whose late fall a linear axis
    flattens."""
    return metric == "loss"

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


def metric_range(metric: str) -> tuple[float, float] | None:
    """The values ``metric`` can take where they are bounded, ``(0, 1)`` for an accuracy;
    ``None`` for R² (unbounded below) and a loss. Figures span the whole range of a bounded
    metric, so that a flat 0 is drawn as 0 of 1, not as noise, and a rise from 0.90 to
    0.92 as the small step it is."""
    return (0.0, 1.0) if metric.endswith("accuracy") else None


def padded(bounds: tuple[float, float], pad: float = 0.03) -> tuple[float, float]:
    """``bounds`` widened by ``pad`` of their span on each side: values on a bound stay
    visible inside the frame."""
    low, high = bounds
    return low - pad * (high - low), high + pad * (high - low)

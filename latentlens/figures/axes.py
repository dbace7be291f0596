"""Axis and label conventions shared by the figures."""

from __future__ import annotations

import re

from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, MaxNLocator


def step_label(step: float, _position: object = None) -> str:
    """A step count as a tick reads it: ``500``, ``12k``, ``1.5M`` (five digits side by
    side run into their neighbours on a panel a third of a page wide)."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if abs(step) >= size:
            return f"{step / size:g}{suffix}"
    return f"{step:g}"


def step_axis(ax: Axes) -> None:
    """Label ``ax``'s x axis as training steps, ticked at whole steps only (a short run's
    few evaluations would otherwise get ticks such as 2.5), at most 6 ticks, written short
    (:func:`step_label`)."""
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(step_label))


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


# Below this an R² curve says only "worse than predicting the mean": an untrained model's
# step-0 R² of -30 would otherwise stretch the axis and flatten the training curve.
R2_FLOOR = -1.0


def default_ylim(metric: str, lowest: float) -> tuple[float, float] | None:
    """The y-limits a figure clips ``metric`` to when the caller gives none: ``(R2_FLOOR,
    1)`` for an R² that falls below the floor (``lowest``: its smallest value), else None
    (the axis spans the values, or :func:`metric_range`)."""
    return (R2_FLOOR, 1.0) if metric == "r2" and lowest < R2_FLOOR else None


def wrap_label(label: str, width: int) -> str:
    """``label`` on lines of about ``width`` characters, broken after commas and at spaces,
    never inside a word ("attention=hyla,seed=1" breaks after its comma); its own line
    breaks stay."""
    if "\n" in label:
        return "\n".join(wrap_label(line, width) for line in label.split("\n"))
    tokens = [t for t in re.findall(r"[^\s,]*,?\s*", label) if t]
    lines: list[str] = []
    current = ""
    for token in tokens:
        if current and len(current + token.rstrip()) > width:
            lines.append(current.rstrip())
            current = ""
        current += token
    lines.append(current.rstrip())
    return "\n".join(lines)


def padded(bounds: tuple[float, float], pad: float = 0.03) -> tuple[float, float]:
    """``bounds`` widened by ``pad`` of their span on each side: values on a bound stay
    visible inside the frame."""
    low, high = bounds
    return low - pad * (high - low), high + pad * (high - low)

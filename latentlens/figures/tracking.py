"""Figures of arrays tracked over training (``tracking/{name}.safetensors``, as
:func:`latentlens.training.tracked_file.load_tracked` reads them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from latentlens.figures.probes import tracked_heatmap

MAX_PANELS = 16


def distance_to_last(values: np.ndarray) -> np.ndarray:
    """``[steps, rows, ...] -> [steps, rows]``: the distance of each row (index of the first
    value axis, e.g. a head) to its value at the last step, relative to that value's
    norm (absolute where that norm is 0): 0 at the end, 1 where the row differs by its
    own size."""
    rows = values.reshape(values.shape[0], values.shape[1], -1)
    distance = np.linalg.norm(rows - rows[-1], axis=-1)
    scale = np.linalg.norm(rows[-1], axis=-1)
    return distance / np.where(scale > 0, scale, 1.0)


def tracked_array(
    steps: Sequence[int],
    values: np.ndarray,
    title: str,
    axes: Sequence[str] | None = None,
) -> Figure:
    """A tracked array over training. Scalars and vectors per step (``[steps]``,
    ``[steps, features]``, e.g. fuse weights per source layer) as a heat map of their
    values over training. Larger arrays (``[steps, rows, ...]``, e.g. a mean attention
    pattern ``[head, query, key]``) as each row's relative distance to its last value
    over training (when it settled), beside the last value: one image per row (up to 16)
    of ``[rows, ...]`` with three or more axes, one image of ``[rows, columns]`` with two.
    ``axes`` names the axes of one value (as :func:`load_tracked` reads them) for the
    labels; without it they are indices."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 0 or values.shape[0] != len(steps) or not len(steps):
        raise ValueError(
            f"values must be [steps, ...] with {len(steps)} steps, got {list(values.shape)}"
        )
    if axes is not None and len(axes) != values.ndim - 1:
        raise ValueError(
            f"axes {list(axes)} name {len(axes)} axes, but each value has "
            f"{values.ndim - 1}: {list(values.shape[1:])}"
        )
    first = axes[0] if axes else "index"
    if values.ndim <= 2:
        values = values.reshape(len(steps), -1)
        names = [f"{first} {i}" for i in range(values.shape[1])]
        return tracked_heatmap(steps, values, names, title)
    shape = list(values.shape[1:])
    last = values[-1].reshape(shape[0], shape[1], -1) if values.ndim > 3 else values[-1]
    panels = min(shape[0], MAX_PANELS) if values.ndim > 3 else 1
    columns = math.ceil(math.sqrt(panels))
    grid_rows = math.ceil(panels / columns)
    width = 2.2 * columns if values.ndim > 3 else 4.0
    figure = Figure(figsize=(6 + width, max(3.2, 2.2 * grid_rows)), layout="constrained")
    left, right = figure.subfigures(1, 2, width_ratios=[6, width])
    ax = left.subplots()
    image = ax.imshow(
        distance_to_last(values).T, aspect="auto", cmap="magma", interpolation="nearest"
    )
    ax.yaxis.set_major_locator(MaxNLocator(nbins=min(shape[0], 12), integer=True))
    ax.set_ylabel(first if axes else "index (first axis)")
    ticks = np.linspace(0, len(steps) - 1, min(len(steps), 6)).round().astype(int)
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set_xlabel("training step")
    ax.set_title("distance to the last value (relative)", fontsize="medium")
    left.colorbar(image, ax=ax)
    left.suptitle(f"{title} {shape} per step")
    low, high = float(np.min(last)), float(np.max(last))
    grid = right.subplots(grid_rows, columns, squeeze=False).ravel()
    for index, panel in enumerate(grid):
        panel.set_axis_off()
        if index >= panels:
            continue
        shown, aspect = (last[index], "equal") if values.ndim > 3 else (last, "auto")
        image = panel.imshow(shown, cmap="viridis", vmin=low, vmax=high, aspect=aspect,
                             interpolation="nearest")  # fmt: skip
        panel.set_title(f"{first} {index}" if values.ndim > 3 else "", fontsize=8)
    more = f", first {panels} of {shape[0]}" if values.ndim > 3 and panels < shape[0] else ""
    image_axes = (axes or ())[-2:] if values.ndim == 3 else (axes or ())[1:]
    rows_by = (f": {image_axes[0]} (rows) x {' x '.join(image_axes[1:])} (columns)"
               if image_axes else ": rows x columns")  # fmt: skip
    right.suptitle(f"at step {steps[-1]}{more}{rows_by}", fontsize="medium")
    right.colorbar(image, ax=list(grid), shrink=0.8)
    return figure

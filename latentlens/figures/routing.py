"""How information is routed between layers over training: the fuse-attention weights per
layer and source layer, and the encoder-decoder routing matrix (tracked by the trainer)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from latentlens.figures.axes import padded, step_axis
from latentlens.training.run_dir import RunDirectory
from latentlens.training.tracked_file import load_tracked

_FUSE = re.compile(r"^(encoder|decoder)\.blocks\.(\d+)\.fuse\.hook_pattern\.safetensors$")


def load_fuse_weights(run_dir: str | Path) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """``{(side, layer): (steps [n], mean weights [n, source_layer])}`` from ``tracking/``."""
    found = {}
    for path in sorted(RunDirectory(run_dir).tracking.glob("*.safetensors")):
        if match := _FUSE.match(path.name):
            tracked = load_tracked(path)
            found[(match.group(1), int(match.group(2)))] = (np.array(tracked.steps), tracked.values)
    if not found:
        raise ValueError(f"{run_dir} has no tracked fuse weights: train a fusion model")
    return found


def _source_name(index: int) -> str:
    return "embedding" if index == 0 else f"layer {index - 1}"


def fuse_weight_curves(run_dir: str | Path, heatmaps: bool = False) -> Figure:
    """One panel per (side, layer): the mean fuse weight of each source layer against the
    training step (curves), or the same as a heatmap (source layer x step). The dashed
    line is the uniform weight 1/l that a layer with l sources starts near."""
    weights = load_fuse_weights(run_dir)
    sides = sorted({side for side, _ in weights}, key=["encoder", "decoder"].index)
    layers = 1 + max(layer for _, layer in weights)
    figure = Figure(figsize=(3.4 * layers, 2.8 * len(sides)), layout="constrained")
    axes = figure.subplots(len(sides), layers, squeeze=False, sharey=not heatmaps)
    for row, side in enumerate(sides):
        for layer in range(layers):
            ax = axes[row, layer]
            if (side, layer) not in weights:
                ax.set_visible(False)
                continue
            steps, values = weights[(side, layer)]
            sources = values.shape[1]
            if heatmaps:
                image = ax.imshow(values.T, aspect="auto", origin="lower", cmap="magma",
                                  vmin=0, vmax=1, interpolation="nearest")  # fmt: skip
                ax.set_yticks(range(sources), [_source_name(i) for i in range(sources)])
                ticks = np.linspace(0, len(steps) - 1, min(len(steps), 4)).round().astype(int)
                ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
                ax.set_xlabel("training step")
            else:
                for source in range(sources):
                    ax.plot(steps, values[:, source], label=_source_name(source))
                ax.axhline(1 / sources, color="gray", linestyle="--", linewidth=0.8)
                ax.set_ylim(*padded((0.0, 1.0)))  # a weight of 1 inside the frame
                ax.legend(frameon=False, fontsize="x-small")
                ax.grid(alpha=0.3)
                step_axis(ax)
            ax.set_title(f"{side} layer {layer}")
        axes[row, 0].set_ylabel("source layer" if heatmaps else "mean fuse weight")
    if heatmaps:
        figure.colorbar(image, ax=axes, label="mean fuse weight", shrink=0.8)
    return figure


def routing_evolution(run_dir: str | Path) -> Figure:
    """Left: the final routing matrix R[decoder layer, encoder layer]. Right: R over
    training, one line per (decoder layer, encoder layer) pair, one colour per decoder
    layer."""
    path = RunDirectory(run_dir).tracking / "routing_matrix.safetensors"
    if not path.is_file():
        raise ValueError(f"{run_dir} has no tracked routing matrix: train with --connection")
    tracked = load_tracked(path)
    steps, values = np.array(tracked.steps), tracked.values
    dec, enc = values.shape[1:]
    figure = Figure(figsize=(10, 3.4), layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=[1, 1.6])
    image = left.imshow(values[-1], vmin=0, vmax=1, cmap="viridis")
    for (j, i), value in np.ndenumerate(values[-1]):
        color = "k" if value > 0.5 else "w"
        left.text(i, j, f"{value:.2f}", ha="center", va="center", fontsize=8, color=color)
    left.set_xticks(range(enc))
    left.set_yticks(range(dec))
    left.set_xlabel("encoder layer")
    left.set_ylabel("decoder layer")
    left.set_title(f"routing at step {steps[-1]}")
    figure.colorbar(image, ax=left, label="share of the memory")
    styles = ["-", "--", ":", "-."]
    for j in range(dec):
        for i in range(enc):
            right.plot(steps, values[:, j, i], color=f"C{j}", linestyle=styles[i % len(styles)],
                       label=f"decoder {j} <- encoder {i}")  # fmt: skip
    step_axis(right)
    right.set_ylabel("share of the memory")
    right.set_ylim(*padded((0.0, 1.0)))  # shares of 0 and 1 inside the frame
    right.grid(alpha=0.3)
    right.legend(frameon=False, fontsize="x-small", ncols=dec)
    right.set_title("routing over training")
    return figure

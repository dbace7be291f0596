"""Figures of a latent-code atlas (:func:`latentlens.probes.atlas.latent_atlas`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from latentlens.figures.probes import annotated_heatmap, require_key


def relation_weights(results: Mapping[str, Any], title: str = "") -> Figure:
    """One heatmap per relation: the mean attention weight each head (layer x head) gives
    the labelled key, on one colour scale from 0 to the largest mean, so that a head that
    attends to one relation's keys stands out in that relation's panel only."""
    rows = require_key(results, "mean_weight")
    relations = list(dict.fromkeys(r["relation"] for r in rows))
    layers = 1 + max(r["layer"] for r in rows)
    heads = 1 + max(r["head"] for r in rows)
    grids = {name: np.full((layers, heads), np.nan) for name in relations}
    for r in rows:
        grids[r["relation"]][r["layer"], r["head"]] = r["mean"]
    top = max(float(np.nanmax(g)) for g in grids.values()) or 1.0
    width = max(3.0, 0.45 * heads + 1.2)
    figure = Figure(figsize=(width * len(relations) + 1.0, 0.45 * layers + 1.8),
                    layout="constrained")  # fmt: skip
    axes = np.atleast_1d(figure.subplots(1, len(relations), sharey=True))
    image = None
    for ax, name in zip(axes, relations, strict=True):
        image = annotated_heatmap(ax, grids[name], [str(i) for i in range(layers)], "magma",
                                   0.0, top, ".2f")  # fmt: skip
        ax.set_title(name)
    figure.colorbar(image, ax=list(axes), label="mean attention weight on the key")
    figure.suptitle(title or "where each head attends, by the pair's relation")
    return figure

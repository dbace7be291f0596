"""Interactive plotly figures for exploration (hover to see each point's rule and split)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from latentlens.figures.axes import default_ylim, log_scaled, metric_label, metric_range, padded
from latentlens.figures.probes import label_marks, legend_order, robust_view
from latentlens.figures.training import (
    RunOrSeeds,
    as_run_list,
    default_metric,
    metric_records,
    seed_curve,
    split_title,
    split_titles,
)

# matplotlib's markers of :data:`~latentlens.figures.probes.MARKERS` in plotly's names
PLOTLY_SYMBOLS = {"o": "circle", "s": "square", "^": "triangle-up", "D": "diamond",
                  "v": "triangle-down", "P": "cross", "*": "star", "h": "hexagon"}  # fmt: skip


# Points from which an embedding is drawn with WebGL rather than SVG.
WEBGL_FROM = 20_000


def code_embedding_plotly(results: Mapping[str, Any], title: str = "") -> go.Figure:
    """The 2-D embedding of latent codes, one trace per label (click the legend to hide
    one); out-of-distribution points are crosses in their label's colour. The colours are
    :func:`~latentlens.figures.code_embedding`'s (:func:`label_marks`: past 10 labels,
    each round of colours with its own symbol), each entry gives its number of points, and
    the first view holds all but the 1% most extreme points at each end (zoom out for
    them)."""
    if "embedding" not in results:
        raise ValueError("the probe results have no 'embedding'; run `latentlens probe` first")
    data = results["embedding"]
    figure = go.Figure()
    if "note" in data:  # codes that do not vary: say so rather than draw one dot
        figure.add_annotation(text=data["note"], showarrow=False, x=0.5, y=0.5,
                              xref="paper", yref="paper")  # fmt: skip
        figure.update_layout(
            title=title or f"latent codes, layer {data['layer']}",
            template="plotly_white",
            xaxis_visible=False,
            yaxis_visible=False,
        )
        return figure
    names = legend_order(data)
    marks = label_marks(names)
    # WebGL draws large clouds fast, but a browser gives a page about 16 contexts, one per
    # WebGL figure: a report of many embeddings lost its first ones (blank). Clouds up to
    # WEBGL_FROM points are SVG, as many per page as wanted.
    scatter = go.Scattergl if len(data["x"]) >= WEBGL_FROM else go.Scatter
    for name in names:
        marker, colour = marks[name]
        for is_ood in (False, True):
            rows = [
                i for i, (label, split) in enumerate(zip(data["label"], data["split"], strict=True))
                if label == name and ("ood" in split) == is_ood
            ]  # fmt: skip
            if not rows:
                continue
            figure.add_trace(
                scatter(
                    x=[data["x"][i] for i in rows],
                    y=[data["y"][i] for i in rows],
                    mode="markers",
                    name=f"{name} (OOD, {len(rows)})" if is_ood else f"{name} ({len(rows)})",
                    legendgroup=name,
                    marker={
                        "symbol": "x" if is_ood else PLOTLY_SYMBOLS[marker],
                        "size": 6,
                        "opacity": 0.7,
                        "color": colour,
                    },
                    text=[f"{name}, {data['split'][i]}" for i in rows],
                    hoverinfo="text",
                )
            )
    method = data["method"].upper()
    figure.update_xaxes(range=list(robust_view(np.asarray(data["x"]))))
    figure.update_yaxes(range=list(robust_view(np.asarray(data["y"]))))
    figure.update_layout(
        title=title or f"latent codes, layer {data['layer']}",
        xaxis_title=f"{method} 1",
        yaxis_title=f"{method} 2",
        template="plotly_white",
        legend_title=data.get("label_kind", "rule"),
    )
    return figure


def metric_curves_plotly(
    runs: Mapping[str, RunOrSeeds], metric: str | Sequence[str] | None = None
) -> go.Figure:
    """A metric over training, one line per run and split (dashes per split); a
    label mapped to several runs (one configuration's seeds) is drawn as their mean with a
    ± one sample standard deviation band, as :func:`metric_curves` does. ``metric`` names
    the metric (default: the task's), or several: the first is shown and a menu switches
    between them (a loss on a log scale)."""
    if not runs:
        raise ValueError("metric_curves_plotly needs at least one run")
    groups = {label: as_run_list(paths) for label, paths in runs.items()}
    loaded = {label: [metric_records(path) for path in paths] for label, paths in groups.items()}
    if metric is None or isinstance(metric, str):
        metrics = [metric or default_metric(next(iter(loaded.values()))[0])]
    elif not (metrics := list(metric)):
        raise ValueError("metric names no metric: give a name, several, or None")
    for name in metrics:
        for label, seeds in loaded.items():
            if any(name not in records[0] for records in seeds):
                raise ValueError(
                    f"a run of {label!r} has no metric {name!r}; it logs {sorted(seeds[0][0])}"
                )
    figure = go.Figure()
    shown_by_metric = []
    for index, name in enumerate(metrics):
        before = len(figure.data)
        _add_metric_traces(figure, groups, loaded, name, visible=index == 0)
        shown_by_metric.append(range(before, len(figure.data)))
    figure.update_layout(
        xaxis_title="training step",
        template="plotly_white",
    )
    lowest = {name: min(r[name] for seeds in loaded.values() for run in seeds for r in run)
              for name in metrics}  # fmt: skip
    figure.update_layout(_y_axis(metrics[0], lowest[metrics[0]]))
    if len(metrics) > 1:
        buttons = [
            {
                "label": metric_label(name),
                "method": "update",
                "args": [
                    {"visible": [i in shown for i in range(len(figure.data))]},
                    _y_axis(name, lowest[name]),
                ],
            }
            for name, shown in zip(metrics, shown_by_metric, strict=True)
        ]
        figure.update_layout(
            updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.15}]
        )
    return figure


def _y_axis(metric: str, lowest: float) -> dict[str, Any]:
    """The y-axis layout of ``metric``'s curves (for ``update_layout`` and the menu): its
    label, a log axis for a loss, the whole [0, 1] for an accuracy, [-1, 1] for an R²
    whose ``lowest`` value lies below -1 (as :func:`~latentlens.figures.metric_curves`;
    zoom out for the rest), else the range of the values."""
    bounds = metric_range(metric) or default_ylim(metric, lowest)
    return {
        "yaxis.title.text": metric_label(metric),
        "yaxis.type": "log" if log_scaled(metric) else "linear",
        "yaxis.autorange": bounds is None,
        "yaxis.range": None if bounds is None else list(padded(bounds)),
    }


def _add_metric_traces(
    figure: go.Figure,
    groups: Mapping[str, list],
    loaded: Mapping[str, list[list[dict]]],
    metric: str,
    visible: bool,
) -> None:
    """``metric``'s lines (and seed bands) of every run and split into ``figure``."""
    dashes = ["solid", "dash", "dot", "dashdot"]
    for index, (label, paths) in enumerate(groups.items()):
        seeds = loaded[label]
        titles = split_titles(paths[0])
        hue = (index * 97) % 360
        group = f" (mean ± std, {len(paths)} seeds)" if len(paths) > 1 else ""
        for s_index, split in enumerate(dict.fromkeys(r["split"] for r in seeds[0])):
            steps, values, std = seed_curve(seeds, split, metric)
            name = f"{label}{group}, {split_title(split, titles)}"
            if len(paths) > 1:  # the band: its lower edge, then the upper edge filled to it
                for edge, fill in ((values - std, None), (values + std, "tonexty")):
                    band = go.Scatter(x=steps, y=edge, mode="lines", line={"width": 0}, fill=fill,
                                      fillcolor=f"hsla({hue}, 60%, 45%, 0.2)", legendgroup=name,
                                      showlegend=False, hoverinfo="skip")  # fmt: skip
                    figure.add_trace(band.update(visible=visible))
            line = {"color": f"hsl({hue}, 60%, 45%)", "dash": dashes[s_index % len(dashes)]}
            figure.add_trace(go.Scatter(x=steps, y=values, name=name, legendgroup=name,
                                        line=line, visible=visible))  # fmt: skip

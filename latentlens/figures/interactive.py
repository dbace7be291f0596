"""Interactive plotly figures for exploration (hover to see each point's rule and split)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from latentlens.figures.axes import metric_label
from latentlens.figures.probes import legend_order
from latentlens.figures.training import default_metric, split_title, split_titles
from latentlens.training.run_dir import RunDirectory


def code_embedding_plotly(results: Mapping[str, Any], title: str = "") -> go.Figure:
    """The 2-D embedding of latent codes, one trace per rule (click the legend to hide
    one); out-of-distribution points are crosses."""
    if "embedding" not in results:
        raise ValueError("the probe results have no 'embedding'; run `latentlens probe` first")
    data = results["embedding"]
    figure = go.Figure()
    names = legend_order(data)
    for name in names:
        for is_ood in (False, True):
            rows = [
                i for i, (label, split) in enumerate(zip(data["label"], data["split"], strict=True))
                if label == name and ("ood" in split) == is_ood
            ]  # fmt: skip
            if not rows:
                continue
            figure.add_trace(
                go.Scattergl(
                    x=[data["x"][i] for i in rows],
                    y=[data["y"][i] for i in rows],
                    mode="markers",
                    name=f"{name} (OOD)" if is_ood else name,
                    legendgroup=name,
                    marker={"symbol": "x" if is_ood else "circle", "size": 6, "opacity": 0.7},
                    text=[f"{name}, {data['split'][i]}" for i in rows],
                    hoverinfo="text",
                )
            )
    method = data["method"].upper()
    figure.update_layout(
        title=title or f"latent codes, layer {data['layer']}",
        xaxis_title=f"{method} 1",
        yaxis_title=f"{method} 2",
        template="plotly_white",
        legend_title="rule",
    )
    return figure


def metric_curves_plotly(runs: Mapping[str, str | Path], metric: str | None = None) -> go.Figure:
    """The task metric over training, one line per run and split (dashes per split)."""
    figure = go.Figure()
    dashes = ["solid", "dash", "dot", "dashdot"]
    for index, (label, path) in enumerate(runs.items()):
        records = RunDirectory(path).read_metrics()
        if not records:
            raise ValueError(f"{path} has no metrics.jsonl records: train the run first")
        metric = metric or default_metric(records)
        splits = list(dict.fromkeys(r["split"] for r in records))
        titles = split_titles(path)
        for s_index, split in enumerate(splits):
            rows = [r for r in records if r["split"] == split]
            figure.add_trace(
                go.Scatter(
                    x=[r["step"] for r in rows],
                    y=[r[metric] for r in rows],
                    name=f"{label}, {split_title(split, titles)}",
                    line={
                        "color": f"hsl({(index * 97) % 360}, 60%, 45%)",
                        "dash": dashes[s_index % len(dashes)],
                    },
                )  # fmt: skip
            )
    figure.update_layout(
        xaxis_title="training step",
        yaxis_title=metric_label(metric),
        template="plotly_white",
    )
    return figure

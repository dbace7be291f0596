"""Figures: matplotlib for papers, plotly for exploration. Each function takes results
(run directories or probe results), returns the figure, and :func:`save_figure` /
:func:`save_plotly` write it (PNG, SVG, PDF, HTML)."""

from latentlens.figures.interactive import code_embedding_plotly, metric_curves_plotly
from latentlens.figures.probes import (
    code_embedding,
    decoding_by_head,
    head_ablation,
    structure_scores,
    tracked_heatmap,
)
from latentlens.figures.save import figure_svg, save_figure, save_plotly
from latentlens.figures.training import decoding_curves, metric_curves

__all__ = [
    "code_embedding",
    "code_embedding_plotly",
    "decoding_by_head",
    "decoding_curves",
    "figure_svg",
    "head_ablation",
    "metric_curves",
    "metric_curves_plotly",
    "save_figure",
    "save_plotly",
    "structure_scores",
    "tracked_heatmap",
]

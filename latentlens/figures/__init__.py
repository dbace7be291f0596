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
from latentlens.figures.routing import fuse_weight_curves, load_fuse_weights, routing_evolution
from latentlens.figures.save import figure_svg, save_figure, save_plotly
from latentlens.figures.token_viewer import TokenAttention, TokenViewer, token_attention
from latentlens.figures.tracking import tracked_array
from latentlens.figures.training import (
    decoding_curves,
    logic_latents_curves,
    metric_curves,
    translation_quality_curves,
)
from latentlens.training.tracked_file import TrackedArray, load_tracked

__all__ = [
    "TokenAttention",
    "TokenViewer",
    "TrackedArray",
    "code_embedding",
    "code_embedding_plotly",
    "decoding_by_head",
    "decoding_curves",
    "logic_latents_curves",
    "figure_svg",
    "fuse_weight_curves",
    "head_ablation",
    "load_fuse_weights",
    "metric_curves",
    "metric_curves_plotly",
    "routing_evolution",
    "save_figure",
    "save_plotly",
    "structure_scores",
    "load_tracked",
    "token_attention",
    "tracked_array",
    "tracked_heatmap",
    "translation_quality_curves",
]

"""Figures: matplotlib for papers; each function takes results, returns the figure, and
:func:`save_figure` writes it."""

from latentlens.figures.save import save_figure
from latentlens.figures.training import decoding_curves, metric_curves

__all__ = ["decoding_curves", "metric_curves", "save_figure"]

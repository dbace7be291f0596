"""Writing figures: matplotlib to PNG, SVG, PDF or a standalone HTML page (the SVG inline);
plotly to self-contained interactive HTML (plotly.js inline: opens offline)."""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
from matplotlib.figure import Figure

MATPLOTLIB_FORMATS = ("png", "svg", "pdf", "html")


def figure_svg(figure: Figure) -> str:
    """The figure as an SVG document string."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    return buffer.getvalue()


def save_figure(
    figure: Figure, stem: str | Path, formats: Sequence[str] = ("png", "svg"), dpi: int = 150
) -> list[Path]:
    """Write ``figure`` as ``stem.png``, ``stem.svg``, ...; returns the paths written.
    ``html`` is a page holding the SVG, titled by the file name."""
    unknown = sorted(set(formats) - set(MATPLOTLIB_FORMATS))
    if unknown:
        raise ValueError(
            f"formats {unknown} are not supported for matplotlib figures; "
            f"choose from {list(MATPLOTLIB_FORMATS)}"
        )
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        if fmt == "html":
            svg = figure_svg(figure)
            svg = svg[svg.index("<svg") :]
            title = html.escape(stem.name)
            path.write_text(
                f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title>"
                f"</head><body>\n{svg}\n</body></html>\n"
            )
        else:
            figure.savefig(path, dpi=dpi, bbox_inches="tight")
        paths.append(path)
    return paths


def save_plotly(figure: go.Figure, path: str | Path) -> Path:
    """Write a plotly figure as one self-contained HTML file (works offline)."""
    path = Path(path)
    if path.suffix != ".html":
        raise ValueError(
            f"{path}: plotly figures are written as .html (static export needs a browser; "
            "use the matplotlib figure for PNG/SVG)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(path, include_plotlyjs=True, full_html=True)
    return path

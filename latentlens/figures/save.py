"""Writing figures: matplotlib to PNG, SVG, PDF or a standalone HTML page (the SVG inline);
plotly to interactive HTML that opens offline, with plotly.js (4.8 MB) inline or, for a
folder of figures, one shared copy beside them."""

from __future__ import annotations

import html
import io
import os
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


def plotly_bundle(path: str | Path) -> Path:
    """Write plotly.js to ``path`` (a ``.js`` file) unless it is there already; ``path``."""
    import plotly.offline  # noqa: PLC0415

    from latentlens.training.checkpoint import atomic_write_bytes  # noqa: PLC0415

    path = Path(path)
    if path.suffix != ".js":
        raise ValueError(f"{path}: the plotly.js bundle is a .js file")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, plotly.offline.get_plotlyjs().encode())
    return path


def script_source(bundle: Path, page: Path) -> str:
    """The ``src`` of a ``<script>`` in ``page`` that loads ``bundle``: a relative path."""
    return Path(os.path.relpath(bundle.resolve(), page.resolve().parent)).as_posix()


def save_plotly(figure: go.Figure, path: str | Path, plotlyjs: str | Path | None = None) -> Path:
    """Write a plotly figure as an HTML file that works offline: plotly.js inline
    (``plotlyjs`` None: one self-contained file) or loaded from the bundle ``plotlyjs``
    (a ``.js`` path, written by :func:`plotly_bundle` if missing, referenced relatively:
    keep the two together), so that a folder of figures holds one copy of it."""
    path = Path(path)
    if path.suffix != ".html":
        raise ValueError(
            f"{path}: plotly figures are written as .html (static export needs a browser; "
            "use the matplotlib figure for PNG/SVG)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    include: bool | str = True
    if plotlyjs is not None:
        include = script_source(plotly_bundle(plotlyjs), path)
    figure.write_html(path, include_plotlyjs=include, full_html=True)
    return path

"""Writing figures: matplotlib to PNG, SVG, PDF or a standalone HTML page (the SVG inline);
plotly to interactive HTML that opens offline, with plotly.js (4.8 MB) inline or, for a
folder of figures, one shared copy beside them."""

from __future__ import annotations

import html
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib
import matplotlib.artist
import matplotlib.axis
import matplotlib.image
import matplotlib.text
import matplotlib.ticker
import numpy as np
import plotly.graph_objects as go
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

MATPLOTLIB_FORMATS = ("png", "svg", "pdf", "html")
# formatters whose tick labels are numbers, some written as mathtext on purpose
NUMERIC_FORMATTERS = (matplotlib.ticker.ScalarFormatter, matplotlib.ticker.LogFormatter)


def figure_svg(figure: Figure, bbox_inches: Bbox | str = "tight") -> str:
    """The figure as an SVG document string (cut to ``bbox_inches``: its tight box by
    default)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches=bbox_inches)
    return buffer.getvalue()


def tight_box(figure: Figure) -> Bbox:
    """The box ``savefig(bbox_inches="tight")`` cuts ``figure`` to, padded as it pads, in
    inches, from one draw (which also runs the figure's layout engine)."""
    figure.draw_without_rendering()
    return figure.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])


def draw_pixels(figure: Figure, dpi: float) -> tuple[np.ndarray, Bbox, Bbox]:
    """Draw ``figure`` once on an Agg canvas at ``dpi``, running its layout engine; its
    pixels ``[height, width, 4]`` (RGBA, uint8), its size and its tight box, both in
    inches, the box measured with the renderer that drew (unpadded). The figure keeps its
    canvas and dpi."""
    canvas, figure_dpi = figure.canvas, figure.dpi
    agg = FigureCanvasAgg(figure)
    try:
        figure.dpi = dpi
        agg.draw()
        box = figure.get_tightbbox(agg.get_renderer())
        pixels = np.array(agg.buffer_rgba())
    finally:
        figure.dpi = figure_dpi
        figure.set_canvas(canvas)
    return pixels, figure.bbox_inches.frozen(), box


def pixel_window(size: Bbox, box: Bbox, dpi: float) -> tuple[int, int, int, int]:
    """Where ``box`` (inches) lies in the pixels of a canvas of ``size`` (inches) drawn at
    ``dpi``: its top row, left column, height and width, sized as
    ``savefig(bbox_inches=box)`` sizes its image and placed to the nearest pixel."""
    height, width = int(box.height * dpi), int(box.width * dpi)
    return round((size.height - box.y1) * dpi), round(box.x0 * dpi), height, width


def cut_to_box(pixels: np.ndarray, size: Bbox, box: Bbox, dpi: float, face) -> np.ndarray:
    """The pixels ``[height, width, 4]`` of :func:`pixel_window` in ``pixels``, a canvas
    of ``size`` drawn at ``dpi``; what lies beyond the canvas is the figure's ``face``
    colour (only the padding may: see :func:`save_figure`)."""
    top, left, height, width = pixel_window(size, box, dpi)
    cut = np.empty((height, width, 4), np.uint8)
    cut[:] = np.round(np.asarray(to_rgba(face)) * 255).astype(np.uint8)
    rows = slice(max(top, 0), min(top + height, pixels.shape[0]))
    columns = slice(max(left, 0), min(left + width, pixels.shape[1]))
    cut[rows.start - top : rows.stop - top, columns.start - left : columns.stop - left] = pixels[
        rows, columns
    ]
    return cut


def within(inner: Bbox, outer: Bbox) -> bool:
    """Whether ``inner`` lies inside ``outer`` (to a thousandth of an inch)."""
    slack = 1e-3
    return (
        inner.x0 >= outer.x0 - slack
        and inner.y0 >= outer.y0 - slack
        and inner.x1 <= outer.x1 + slack
        and inner.y1 <= outer.y1 + slack
    )


def without_layout_engine(figure: Figure) -> None:
    """Drop ``figure``'s layout engine, keeping the positions it computed last. Not
    ``set_layout_engine("none")``: that leaves a placeholder engine, and ``savefig`` draws
    a figure that has any engine once more before drawing it to the file (two layout
    passes per figure of the five its PNG and SVG took)."""
    rc = {"figure.autolayout": False, "figure.constrained_layout.use": False}
    with matplotlib.rc_context(rc):
        figure.set_layout_engine(None)  # with both off, None removes the engine


def as_written(figure: Figure) -> None:
    """Every text of ``figure`` that holds words drawn as written, never as mathtext:
    labels hold run names and values (a run named ``r$\\frac{a}{$`` stopped ``latentlens
    figures`` with matplotlib's ParseSyntaxException); latentlens's own labels use no
    mathtext. Tick labels that a numeric formatter writes stay as it writes them (a log
    axis's powers of ten are mathtext); those given as strings are words."""
    for text in _worded_texts(figure):
        text.set_parse_math(False)


def _worded_texts(artist: matplotlib.artist.Artist) -> Iterator[matplotlib.text.Text]:
    """The texts under ``artist``, an axis's tick labels only where its formatter does not
    write numbers (a numeric axis's ticks are not visited, nor made to be visited)."""
    if isinstance(artist, matplotlib.axis.Axis):
        yield artist.label
        major = (artist.get_major_formatter(), artist.get_major_ticks)
        minor = (artist.get_minor_formatter(), artist.get_minor_ticks)
        for formatter, ticks in (major, minor):
            if not isinstance(formatter, NUMERIC_FORMATTERS):
                for tick in ticks():
                    yield tick.label1
                    yield tick.label2
        return
    if isinstance(artist, matplotlib.text.Text):
        yield artist
    for child in artist.get_children():
        yield from _worded_texts(child)


def save_figure(
    figure: Figure, stem: str | Path, formats: Sequence[str] = ("png", "svg"), dpi: int = 150
) -> list[Path]:
    """Write ``figure`` as ``stem.png``, ``stem.svg``, ...; returns the paths written.
    ``html`` is a page holding the SVG, titled by the file name. Every file is cut to the
    box ``savefig(bbox_inches="tight")`` gives, and the figure is laid out once for all of
    them (``bbox_inches="tight"`` drew the figure twice per file and ran its constrained
    layout each time). With ``png``, that one layout is drawn to the PNG's pixels, which
    are cut to the box, unless something is drawn beyond the figure's edge (then the PNG
    is drawn once more, as ``savefig`` draws it, as it is where ``savefig.facecolor``,
    ``savefig.edgecolor`` or ``savefig.transparent`` change the figure's colours); the
    SVG is drawn once for ``svg`` and ``html``."""
    unknown = sorted(set(formats) - set(MATPLOTLIB_FORMATS))
    if unknown:
        raise ValueError(
            f"formats {unknown} are not supported for matplotlib figures; "
            f"choose from {list(MATPLOTLIB_FORMATS)}"
        )
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    as_written(figure)
    png = None
    rc = matplotlib.rcParams
    as_drawn = rc["savefig.facecolor"] == rc["savefig.edgecolor"] == "auto"
    if "png" in formats and as_drawn and not rc["savefig.transparent"]:
        pixels, size, content = draw_pixels(figure, dpi)
        box = content.padded(rc["savefig.pad_inches"])
        if within(content, Bbox.from_bounds(0, 0, size.width, size.height)):
            png = cut_to_box(pixels, size, box, dpi, figure.get_facecolor())
    else:
        box = tight_box(figure)
    engine = figure.get_layout_engine()
    if engine is not None:
        without_layout_engine(figure)  # the positions just computed, for every file
    svg = None
    paths = []
    try:
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            if fmt in ("svg", "html"):
                svg = svg if svg is not None else figure_svg(figure, box)
            if fmt == "html":
                title = html.escape(stem.name)
                path.write_text(
                    f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}"
                    f"</title></head><body>\n{svg[svg.index('<svg') :]}\n</body></html>\n"
                )
            elif fmt == "svg":
                path.write_text(svg)
            elif fmt == "png" and png is not None:
                matplotlib.image.imsave(path, png, format="png", dpi=dpi)
            else:
                figure.savefig(path, dpi=dpi, bbox_inches=box)
            paths.append(path)
    finally:
        if engine is not None:
            figure.set_layout_engine(engine)
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

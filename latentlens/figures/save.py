"""Writing figures: matplotlib to PNG/SVG (and PDF), plotly to self-contained HTML."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

MATPLOTLIB_FORMATS = ("png", "svg", "pdf")


def save_figure(
    figure: Figure, stem: str | Path, formats: Sequence[str] = ("png", "svg"), dpi: int = 150
) -> list[Path]:
    """Write ``figure`` as ``stem.png``, ``stem.svg``, ...; returns the paths written."""
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
        figure.savefig(path, dpi=dpi, bbox_inches="tight")
        paths.append(path)
    return paths

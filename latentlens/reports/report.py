"""A report of what was run and what came out: ``report.md`` (figures linked) and
``report.html`` (figures embedded; opens offline), with plotly.js inline once or loaded
from the one copy a report folder shares with its figures."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from latentlens.figures.save import plotly_bundle, script_source
from latentlens.figures.token_viewer import VIEWER_SCRIPT, VIEWER_STYLE, TokenViewer
from latentlens.training.checkpoint import atomic_write_bytes


@dataclass
class Section:
    """A heading, paragraphs, an optional table (rows of equal keys), figures (PNG paths,
    with captions), interactive plotly figures with captions and token-level attention
    viewers with captions (both HTML report only; the markdown names the viewers). In
    the HTML report an interactive figure takes the place of the static figure of the same
    caption (the markdown keeps the static one): a figure is shown once."""

    heading: str
    paragraphs: Sequence[str] = ()
    table: Sequence[dict[str, Any]] = ()
    figures: Sequence[tuple[Path, str]] = ()
    interactive: Sequence[tuple[go.Figure, str]] = field(default_factory=list)
    viewers: Sequence[tuple[TokenViewer, str]] = ()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _markdown(title: str, sections: Sequence[Section], root: Path) -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.heading}", ""]
        for paragraph in section.paragraphs:
            lines += [paragraph, ""]
        if section.table:
            keys = list(section.table[0])
            lines.append("| " + " | ".join(keys) + " |")
            lines.append("|" + "---|" * len(keys))
            for row in section.table:
                lines.append("| " + " | ".join(_cell(row[k]) for k in keys) + " |")
            lines.append("")
        for path, caption in section.figures:
            link = path.resolve().relative_to(root.resolve()).as_posix()
            lines += [f"![{caption}]({link})", "", f"*{caption}*", ""]
        for _, caption in section.viewers:
            lines += [f"*{caption}: interactive, in report.html*", ""]
    return "\n".join(lines)


def _inline_code(text: str) -> str:
    """Markdown's `code` spans as <code> elements."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def _html(title: str, sections: Sequence[Section], plotlyjs: str | None = None) -> str:
    has_plotly = any(section.interactive for section in sections)
    head = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
        "line-height:1.45}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid "
        "#ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}img{max-width:100%}"
        "figcaption{color:#555;font-size:90%;margin-bottom:1.5em}</style>",
    ]
    if has_plotly and plotlyjs is not None:
        head.append(f"<script src='{html.escape(plotlyjs)}'></script>")
    elif has_plotly:
        head.append(f"<script>{plotly.offline.get_plotlyjs()}</script>")
    body = [f"</head><body><h1>{html.escape(title)}</h1>"]
    for section in sections:
        body.append(f"<h2>{html.escape(section.heading)}</h2>")
        body += [f"<p>{_inline_code(html.escape(p))}</p>" for p in section.paragraphs]
        if section.table:
            keys = list(section.table[0])
            body.append(
                "<table><tr>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>"
            )
            for row in section.table:
                cells = "".join(f"<td>{html.escape(_cell(row[k]))}</td>" for k in keys)
                body.append(f"<tr>{cells}</tr>")
            body.append("</table>")
        live = {caption for _, caption in section.interactive}
        for path, caption in section.figures:
            if caption in live:
                continue  # shown interactive below
            data = base64.b64encode(path.read_bytes()).decode()
            body.append(
                f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(caption)}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
        for figure, caption in section.interactive:
            body.append(
                f"<figure>{figure.to_html(full_html=False, include_plotlyjs=False)}"
                f"<figcaption>{html.escape(caption)} (interactive: hover a point for its "
                "label and split, click a legend entry to hide it)</figcaption></figure>"
            )
        for viewer, caption in section.viewers:
            body.append(
                f"<figure>{viewer.html()}<figcaption>{html.escape(caption)} (interactive: "
                "hover a token, then a key in its pattern; click a token to hold it)"
                "</figcaption></figure>"
            )
    if any(section.viewers for section in sections):  # the viewers' script, once
        body += [f"<style>{VIEWER_STYLE}</style>", f"<script>{VIEWER_SCRIPT}</script>"]
    body.append("</body></html>")
    return "\n".join(head + body) + "\n"


def write_report(
    out_dir: str | Path,
    title: str,
    sections: Sequence[Section],
    plotlyjs: str | Path | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` into ``out_dir``; figure paths must lie
    inside it (the markdown links them relatively). ``plotlyjs``: a plotly.js bundle in
    ``out_dir`` that the HTML loads (written if missing; the figures' pages can share it),
    instead of its own inline copy."""
    root = Path(out_dir)
    for section in sections:
        for path, _ in section.figures:
            if not path.is_file():
                raise ValueError(f"the report's figure {path} does not exist")
            if root.resolve() not in path.resolve().parents:
                raise ValueError(f"the report's figure {path} lies outside {root}")
    markdown, page = root / "report.md", root / "report.html"
    atomic_write_bytes(markdown, _markdown(title, sections, root).encode())
    source = None
    if plotlyjs is not None and any(section.interactive for section in sections):
        source = script_source(plotly_bundle(plotlyjs), page)
    atomic_write_bytes(page, _html(title, sections, source).encode())
    return markdown, page

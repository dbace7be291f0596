"""The finding a RESULTS section opens with, read from the section's own first table, so that
the sentence and the table cannot disagree: which row leads on the section's headline
column, by how much over the runner-up with the 95% Welch interval over seeds, and how the
published (or official) numbers beside it rank the same rows.

Each experiment module names its headline as ``FINDING`` (a :class:`Finding`);
``reproduce.py`` puts the sentence first, under the title. The table's cells are
``mean ± std`` over ``seeds`` runs, as :func:`latentlens.reports.seeds.mean_std` prints
them; rows without a spread (a published baseline) are not ranked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from latentlens.reports.seeds import summary_difference_interval

CELL = re.compile(r"^(-?[\d.]+) ± ([\d.]+)$")


@dataclass(frozen=True)
class Finding:
    """A section's headline: ``column`` of its first table (``row``: for a table whose rows
    are quantities and whose columns are the systems, the row that holds the headline),
    ranked highest first unless ``lower_is_better``; ``reference``: the header of the
    published numbers beside it (the first such column after each measured one)."""

    column: str
    reference: str | None = None
    lower_is_better: bool = False
    row: str | None = None


def first_table(text: str) -> list[list[str]]:
    """The cells of the first markdown table in ``text``: the header, then the rows."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ValueError("the section has no table to read its finding from")
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [table[0], *table[2:]]  # without the |---| line


def measured(table: list[list[str]], finding: Finding) -> list[tuple[str, str, str | None]]:
    """``(label, cell, reference cell)`` of each row (or column, for a ``row`` finding)."""
    header, rows = table[0], table[1:]
    if finding.row is not None:
        cells = next((r for r in rows if r[0] == finding.row), None)
        if cells is None:
            raise ValueError(f"the section's table has no row {finding.row!r}")
        found = []
        for index, name in enumerate(header[1:], start=1):
            if name != finding.reference:
                after = header[index + 1] if index + 1 < len(header) else None
                ref = cells[index + 1] if after == finding.reference else None
                found.append((name, cells[index], ref))
        return found
    if finding.column not in header:
        raise ValueError(f"the section's table has no column {finding.column!r}")
    index = header.index(finding.column)
    ref_index = None
    if finding.reference is not None:
        ref_index = next(i for i in range(index + 1, len(header)) if header[i] == finding.reference)
    labels = [r[0] for r in rows]
    found = []
    for r in rows:
        label = r[0] if labels.count(r[0]) == 1 else f"{r[0]} ({r[1]})"
        found.append((label, r[index], None if ref_index is None else r[ref_index]))
    return found


def number(cell: str | None) -> float | None:
    """A reference cell's value; None for ``n/a`` or an empty cell."""
    try:
        return float(cell) if cell is not None else None
    except ValueError:
        return None


def finding_sentence(text: str, finding: Finding, seeds: int) -> str:
    """The ``**Finding.**`` paragraph of a section whose markdown is ``text``."""
    rows = measured(first_table(text), finding)
    ranked = []
    for label, cell, reference in rows:
        match = CELL.match(cell) if seeds > 1 else None
        value = float(match[1]) if match else (number(cell) if seeds == 1 else None)
        if value is not None:
            spread = float(match[2]) if match else math.nan
            ranked.append((label, cell, value, spread, number(reference)))
    if len(ranked) < 2:
        raise ValueError(f"the column {finding.column!r} has fewer than two measured rows")
    sign = 1 if finding.lower_is_better else -1
    ranked.sort(key=lambda row: sign * row[2])
    (best, best_cell, top, top_sd, _), (second, second_cell, runner, runner_sd, _) = ranked[:2]
    which = "Lowest" if finding.lower_is_better else "Highest"
    text = f"**Finding.** {which} {finding.column}: {best} ({best_cell}), then {second}"
    text += f" ({second_cell})"
    if seeds > 1:
        digits = len(best_cell.split(" ±")[0].partition(".")[2])
        gap, low, high = summary_difference_interval(top, top_sd, seeds, runner, runner_sd, seeds)
        shown = f"{gap:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"
        told = low > 0 or high < 0
        text += f"; the difference is {shown} (95% Welch interval over {seeds} seeds)"
        text += "." if told else ", an interval that holds 0: the two are not told apart."
    else:
        text += "; one seed each, so no interval: the order is not established."
    published = [(label, value) for label, _, _, _, value in ranked if value is not None]
    if finding.reference is not None and len(published) >= 2:
        published.sort(key=lambda item: sign * item[1])
        first, value = published[0]
        agree = "as here" if first == best else f"where this table ranks {best} first"
        text += f" The {finding.reference} column ranks {first} first ({value:g}), {agree}."
    return text

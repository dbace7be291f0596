"""Metric tables printed by ``latentlens train`` and ``latentlens eval``: a split per row,
values with their standard errors, and the mean ± std over seeds."""

from __future__ import annotations

import statistics
from typing import Any


def print_seed_summary(runs: list[list[dict[str, Any]]]) -> None:
    """Each split's final metrics as mean ± sample standard deviation over the seeds' runs
    (``runs``: each run's final evaluation records; none where a resumed run had no steps
    left, and then there is nothing to summarise)."""
    if len(runs) < 2 or not all(runs):
        return
    names = [k for k in runs[0][0] if k not in ("step", "split") and not k.endswith("_se")]
    by_split = [{record["split"]: record for record in records} for records in runs]
    rows = {}
    for split in by_split[0]:
        cells = [[records[split][name] for records in by_split] for name in names]
        rows[split] = [f"{statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}" for v in cells]
    print(f"mean ± std over {len(runs)} seeds")
    _print_split_rows(names, rows, 22)


def print_table(records: list[dict[str, Any]]) -> None:
    """A split per row; a value ``name`` with a ``name_se`` beside it is printed as
    ``value ± standard error``."""
    if not records:
        return
    names = [k for k in records[0] if k not in ("step", "split") and not k.endswith("_se")]

    def cell(record: dict[str, Any], name: str) -> str:
        error = record.get(f"{name}_se")
        return f"{record[name]:.4f}" + ("" if error is None else f" ± {error:.4f}")

    rows = {record["split"]: [cell(record, n) for n in names] for record in records}
    width = 22 if any(f"{n}_se" in records[0] for n in names) else 18
    _print_split_rows(names, rows, width)


def _print_split_rows(names: list[str], rows: dict[str, list[str]], cell_width: int) -> None:
    """A table with a split column as wide as its longest name, then right-aligned cells."""
    width = max(len("split"), *map(len, rows)) + 2
    print(f"{'split':<{width}}" + "".join(f"{n:>{cell_width}}" for n in names))
    for split, cells in rows.items():
        print(f"{split:<{width}}" + "".join(f"{cell:>{cell_width}}" for cell in cells))

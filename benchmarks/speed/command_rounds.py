"""Every round of ``command_side_by_side.py`` in some results, summed up against a target.

    python benchmarks/speed/command_rounds.py RESULTS [RESULTS ...] [--target 3]

RESULTS: the ``--out`` JSON files of ``command_side_by_side.py``, or folders holding them
(other JSON files there are passed over). Each round's ratio is the command's steps/s over
the official code's in the same round. Per task, variant and mode the table gives the
rounds, their median ratio, how many met ``--target``, the mean ± standard deviation and
the mean's 95% confidence interval (Student's t over the rounds), and a verdict: *every
round* when all met the target; else whether the mean's interval lies above it, below it
or across it. A cell of one round has no interval. Above the table: the processors the
files were made on, where they recorded it.

On a shared 2-core cloud machine one round's ratio moves by ±20% (the official code's
own rate by up to a third within an hour), so a target met in most rounds can still miss
a few: the interval says whether the typical round meets it, the count whether every one
did. Give the folders of one machine and one state of the code at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from latentlens.reports.seeds import mean_std

CONFIDENCE = 0.95
# the order rows are shown in; others follow, in the order first met
ORDER = {"task": ("fuzzy-logic", "fuzzy-logic-a1", "sraven"), "mode": ("single", "cores"),
         "variant": ("softmax", "linear", "hyla")}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One task, variant and mode's ratios, a round each (command / official)."""

    task: str
    variant: str
    mode: str
    ratios: tuple[float, ...]

    def mean_interval(self) -> tuple[float, float] | None:
        """The mean's two-sided :data:`CONFIDENCE` interval (Student's t); None for one round."""
        if len(self.ratios) < 2:
            return None
        from scipy.stats import t  # lazy: SciPy is slow to import

        mean = statistics.fmean(self.ratios)
        half = t.ppf((1 + CONFIDENCE) / 2, len(self.ratios) - 1) * statistics.stdev(self.ratios)
        half /= math.sqrt(len(self.ratios))
        return mean - half, mean + half

    def verdict(self, target: float) -> str:
        """Whether the rounds meet ``target`` (the module's docstring)."""
        if all(ratio >= target for ratio in self.ratios):
            return "every round"
        interval = self.mean_interval()
        if interval is None:
            return "short"
        if interval[0] >= target:
            return "mean above, not every round"
        return "mean below" if interval[1] < target else "mean across"


def is_command_rounds(data: object) -> bool:
    """Whether ``data`` (a parsed JSON file) is ``command_side_by_side.py``'s output."""
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not data["rows"]:
        return False
    wanted = {"task", "variant", "mode", "official", "command"}
    return all(isinstance(row, dict) and wanted <= row.keys() for row in data["rows"])


def result_files(paths: list[Path]) -> list[Path]:
    """The JSON files under ``paths`` (files as given, folders' ``*.json`` in name order);
    raises ValueError naming a path that does not exist."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"{path}: no such file or folder (give command_side_by_side.py's "
                             "--out files or the folders that hold them)")  # fmt: skip
    return files


def read_outputs(files: list[Path]) -> dict[Path, dict]:
    """The ``command_side_by_side.py`` outputs among ``files``, parsed once, by file;
    raises ValueError for a file that is not JSON, or when none is such an output."""
    outputs: dict[Path, dict] = {}
    for file in files:
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{file}: not readable as JSON ({err})") from None
        if is_command_rounds(data):
            outputs[file] = data
    if not outputs:
        raise ValueError("no command_side_by_side.py rounds in "
                         + ", ".join(str(file) for file in files))  # fmt: skip
    return outputs


def collect(outputs: dict[Path, dict]) -> list[Cell]:
    """The cells of :func:`read_outputs`'s ``outputs``, their rounds pooled, in
    :data:`ORDER`; raises ValueError for a round whose rates are not positive."""
    pooled: dict[tuple[str, str, str], list[float]] = {}
    for file, data in outputs.items():
        for row in data["rows"]:
            pairs = list(zip(row["command"], row["official"], strict=True))
            if any(not (command > 0 and official > 0) for command, official in pairs):
                raise ValueError(f"{file}: a round of {row['task']} {row['variant']} "
                                 f"{row['mode']} has a rate that is not positive")  # fmt: skip
            key = (row["task"], row["variant"], row["mode"])
            pooled.setdefault(key, []).extend(command / official for command, official in pairs)
    cells = [Cell(*key, tuple(ratios)) for key, ratios in pooled.items()]
    return sorted(cells, key=lambda cell: tuple(rank(cell, field) for field in ORDER))


def rank(cell: Cell, field: str) -> int:
    """Where ``cell``'s ``field`` comes in :data:`ORDER` (after the named ones if not named)."""
    named = ORDER[field]
    value = getattr(cell, field)
    return named.index(value) if value in named else len(named)


def processors(outputs: dict[Path, dict]) -> dict[str, int]:
    """How many of :func:`read_outputs`'s ``outputs`` each processor ran
    (``meta.processor``; "not recorded" for files from before it was)."""
    counts: dict[str, int] = {}
    for data in outputs.values():
        name = data.get("meta", {}).get("processor", "not recorded")
        counts[name] = counts.get(name, 0) + 1
    return counts


def table(cells: list[Cell], target: float) -> str:
    """The cells as a Markdown table (the module's docstring)."""
    lines = [
        f"| task | variant | mode | rounds | median | at {target:g}x | mean ± std "
        f"| {CONFIDENCE:.0%} interval of the mean | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        met = sum(ratio >= target for ratio in cell.ratios)
        interval = cell.mean_interval()
        shown = "" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"
        lines.append(
            f"| {cell.task} | {cell.variant} | {cell.mode} | {len(cell.ratios)} "
            f"| {statistics.median(cell.ratios):.2f}x | {met} of {len(cell.ratios)} "
            f"| {mean_std(cell.ratios, digits=2)} "
            f"| {shown} | {cell.verdict(target)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", metavar="RESULTS")
    parser.add_argument("--target", type=float, default=3.0, help="ratio to meet (default 3)")
    args = parser.parse_args(argv)
    if not args.target > 0:
        parser.error(f"--target {args.target:g}: give a ratio above 0")
    try:
        outputs = read_outputs(result_files(args.results))
        cells = collect(outputs)
    except ValueError as err:
        print(f"command_rounds.py: {err}", file=sys.stderr)
        return 2
    ran = processors(outputs)
    shown = (f"{name} ({count} file{'s' * (count > 1)})" for name, count in ran.items())
    print("processors: " + "; ".join(shown))
    if len(ran.keys() - {"not recorded"}) > 1:
        print("(more than one processor: their rounds are pooled; give one machine's files)")
    print("\n" + table(cells, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())

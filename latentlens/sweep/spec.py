"""A sweep specification: a base run and the axes to vary, expanded into a grid of cells,
each an ordinary run config (``Trainer.resolve_config``).

A spec is a JSON or YAML file::

    task: fuzzy-logic              # the task (its alias too)
    model: transformer             # the model kind (default transformer)
    base:                          # sections as in `latentlens train --config`
      model: {d_model: 32}
      train: {steps: 200, eval_every: 100}
    axes:                          # every combination is a cell
      model.attention: [softmax, hyla]
      train.seed: [0, 1]
      task.frac_test: [0.5, 0.7]
    name: "{attention}-s{seed}-f{frac_test}"   # optional: each cell's folder

An axis is ``SECTION.FIELD`` with ``SECTION`` one of model, task, train. A cell's folder is
``attention=hyla,seed=0,frac_test=0.5`` unless ``name`` gives a template, in which each
axis's ``{FIELD}`` stands for its value.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECTIONS = ("model", "task", "train")
# A grid larger than this is refused unless the caller raises the limit: 10^6 cells filled
# 4 GB before the first one trained, and a grid that big is almost always a typo.
MAX_CELLS = 10_000
# What a cell's name may hold: it is one folder inside the sweep's --out
NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._=,+-]")


# A name template's format spec: fill and align, sign, zero, a width, a grouping, a
# precision and a type, as in "{lr:.0e}" or "{seed:03d}"; nothing nested.
FORMAT_SPEC = re.compile(
    r"(.?[<>^=])?[+\- ]?#?0?(?P<width>\d+)?[,_]?(\.(?P<precision>\d+))?[a-zA-Z%]?"
)
MAX_WIDTH = 64  # characters a field of a cell's name may be padded to


def check_name_template(template: str, fields: dict[str, Any], where: str) -> None:
    """A cell-name template holds ``{field}`` and ``{field:format}`` of the axes' fields
    alone: no attribute or index access, no conversion, no nested field, widths of at
    most :data:`MAX_WIDTH` (``{seed:>1000000000}`` asked for a gigabyte)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise ValueError(f"{where}: name {template!r} is not a template ({err})") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in fields:
            raise ValueError(
                f"{where}: name {template!r} uses {{{field}}}, which is no axis's field (a "
                f"template names fields alone, without . or [ ]); the axes' fields: "
                f"{', '.join(fields)}"
            )
        match = FORMAT_SPEC.fullmatch(spec or "")
        if conversion is not None or match is None:
            raise ValueError(
                f"{where}: name {template!r}: {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} is not a field with a plain format; write "
                'e.g. "{seed}" or "{lr:.0e}"'
            )
        for part in ("width", "precision"):
            if match[part] and int(match[part]) > MAX_WIDTH:
                raise ValueError(
                    f"{where}: name {template!r}: the {part} {int(match[part]):,} of "
                    f"{{{field}:{spec}}} is over {MAX_WIDTH}"
                )


def cell_name(values: dict[str, Any], template: str | None = None) -> str:
    """``attention=hyla,seed=0`` (each axis's field and value), or ``template`` with each
    axis's ``{FIELD}`` replaced by its value (``"{attention}-s{seed}"``: ``hyla-s0``), as
    one safe folder name (characters other than letters, digits and ``._=,+-`` become
    ``_``; a name of dots alone cannot be one)."""
    if template is None:
        name = ",".join(f"{axis.partition('.')[2]}={value}" for axis, value in values.items())
    else:
        name = template.format_map({axis.partition(".")[2]: v for axis, v in values.items()})
    name = NAME_CHARACTERS.sub("_", name)
    return name if name.strip(".") else name.replace(".", "_")


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its name (``attention=hyla,seed=0``) and resolved config."""

    name: str
    values: dict[str, Any]
    config: dict[str, Any]


@dataclass(frozen=True)
class SweepSpec:
    task: str
    model: str
    base: dict[str, dict[str, Any]]
    axes: dict[str, list[Any]]
    where: str = "the sweep spec"  # its file, for the errors its cells raise
    name: str | None = None  # the cells' folder template: "{attention}-s{seed}"

    @classmethod
    def read(cls, path: str | Path) -> SweepSpec:
        """The spec in ``path`` (``.json``, ``.yaml`` or ``.yml``); a one-line error naming
        the file and what is wrong."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise ValueError(f"sweep spec {path} cannot be read ({err.strerror})") from None
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as err:  # noqa: BLE001 - JSON and YAML raise their own kinds
            raise ValueError(f"sweep spec {path} is not valid {path.suffix[1:]} ({err})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "the sweep spec") -> SweepSpec:
        if not isinstance(data, dict) or "task" not in data or "axes" not in data:
            raise ValueError(
                f"{where} needs at least 'task' and 'axes' (see `latentlens sweep -h`)"
            )
        unknown = sorted(set(data) - {"task", "model", "base", "axes", "name"})
        if unknown:
            raise ValueError(
                f"{where} has unknown keys {unknown}; allowed: task, model, base, axes, name"
            )
        for key in ("task", "model", "name"):
            if key in data and not isinstance(data[key], str):
                raise ValueError(f"{where}: {key!r} must be a name (a string), not {data[key]!r}")
        base = data.get("base") or {}
        if not isinstance(base, dict) or set(base) - set(SECTIONS):
            raise ValueError(f"{where}: 'base' holds the sections {SECTIONS} only")
        for section, fields in base.items():
            if fields is not None and not isinstance(fields, dict):
                raise ValueError(
                    f"{where}: base.{section} must map field names to values, not a "
                    f"{type(fields).__name__}"
                )
        axes = data["axes"]
        if not isinstance(axes, dict) or not axes:
            raise ValueError(f"{where}: 'axes' must map SECTION.FIELD to a list of values")
        for axis, values in axes.items():
            section, _, field = str(axis).partition(".")
            if section not in SECTIONS or not field:
                raise ValueError(
                    f"{where}: axis {axis!r} must be SECTION.FIELD with SECTION in {SECTIONS}"
                )
            if not isinstance(values, list) or not values:
                raise ValueError(f"{where}: axis {axis!r} needs a non-empty list of values")
        if "name" in data:
            fields = {str(axis).partition(".")[2]: values[0] for axis, values in axes.items()}
            check_name_template(data["name"], fields, where)
            try:
                data["name"].format_map(fields)
            except (KeyError, ValueError, IndexError, TypeError) as err:
                raise ValueError(
                    f"{where}: name {data['name']!r} does not format the axes' values ({err}); "
                    'write each axis\'s field in braces, as in "{attention}-s{seed}"'
                ) from None
        return cls(str(data["task"]), str(data.get("model", "transformer")),
                   {s: dict(base.get(s) or {}) for s in SECTIONS},
                   {str(k): list(v) for k, v in axes.items()}, where,
                   data.get("name"))  # fmt: skip

    def size(self) -> int:
        """The number of cells, counted without building them."""
        return math.prod(len(values) for values in self.axes.values())

    def cells(self, max_cells: int = MAX_CELLS) -> list[Cell]:
        """Every combination of the axes, in the order the axes are given, resolved (so a
        bad value fails here, before anything trains); more than ``max_cells`` is refused
        before any is built, and so are two cells whose names coincide once made safe."""
        if self.size() > max_cells:
            raise ValueError(
                f"the sweep's grid has {self.size():,} cells, more than {max_cells:,}: shorten "
                "its axes, or raise the limit with --max-cells"
            )
        from latentlens.tasks import TASK_ALIASES
        from latentlens.training import TrainConfig, Trainer, model_for_task

        task = TASK_ALIASES.get(self.task, self.task)
        cells = []
        for combination in itertools.product(*self.axes.values()):
            values = dict(zip(self.axes, combination, strict=True))
            sections = {s: dict(self.base[s]) for s in SECTIONS}
            for axis, value in values.items():
                section, _, field = axis.partition(".")
                sections[section][field] = value
            task_config = sections["task"] or None
            name = cell_name(values, self.name)
            try:
                config = Trainer.resolve_config(
                    task,
                    model_for_task(task, task_config, self.model, **sections["model"]),
                    # Ray gives each cell one core: its runs compute (and record) one thread
                    TrainConfig.for_task(task, self.model, **{"threads": 1, **sections["train"]}),
                    task_config,
                )
            except (ValueError, TypeError) as err:
                raise ValueError(f"{self.where}, cell {name}: {err}") from None
            if any(cell.name == name for cell in cells):
                raise ValueError(
                    f"two cells of the sweep would share the folder {name!r} (values that "
                    "differ only in characters a folder name cannot hold, or a name template "
                    "that leaves an axis out): rename the values or use every axis in the name"
                )
            cells.append(Cell(name, values, config))
        return cells

"""The run directory (DESIGN.md): config.json, metrics.jsonl, checkpoints/, tracking/."""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any

from latentlens.training.checkpoint import (
    atomic_write_bytes,
    list_checkpoints,
    recorded_train_seconds,
    with_filename,
)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (none when it does not exist). A torn last line
    (no newline: its writer died mid-append) is left out; a corrupt line elsewhere is a
    ``ValueError`` naming the file and line."""
    if not path.is_file():
        return []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(
            f"{path} is not text (not UTF-8): it is damaged; restore or delete it"
        ) from None
    lines = text.split("\n")
    lines.pop()  # "" after the last newline; else a line torn by a writer's death: left out
    records = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{path} line {number} is corrupt ({err}); it was not written by "
                    "latentlens: restore the file or delete that line"
                ) from None
    return records


def repair_torn_tail(path: Path) -> None:
    """Cut a torn last line (one without its newline) off ``path`` so that the next
    append starts on a line of its own."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
    data = path.read_bytes()
    atomic_write_bytes(path, data[: data.rfind(b"\n") + 1])


def refuse_link(path: Path) -> None:
    """A one-line error when ``path`` is a symbolic link: latentlens writes only the files of
    the run directory itself, never where a link placed there points."""
    if path.is_symlink():
        raise ValueError(
            f"{path} is a symbolic link (to {os.readlink(path)}); latentlens writes only files "
            "inside the run directory: remove the link, or copy its target in its place"
        )


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    repair_torn_tail(path)
    try:  # O_NOFOLLOW: a link placed after the check is refused all the same
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            refuse_link(path)
        raise
    try:
        with os.fdopen(fd, "a") as handle:
            for record in records:
                handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
    except OSError as err:  # a full disk: the write's error names no file
        raise with_filename(err, path) from None


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Drop the records of steps after ``last_step``, and a torn last line (atomically)."""
    kept = [r for r in read_jsonl(path) if r["step"] <= last_step]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
    atomic_write_bytes(path, text.encode())


class RunDirectory:
    """Paths and file formats of one training run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tracking(self) -> Path:
        return self.path / "tracking"

    def runs_inside(self) -> list[Path]:
        """The run directories directly inside this folder (a demo's, a sweep's), sorted."""
        if not self.path.is_dir():
            return []
        return sorted(p for p in self.path.iterdir() if (p / "config.json").is_file())

    def read_config(self, sections: tuple[str, ...] = ("model", "task", "train")) -> dict[str, Any]:
        """``config.json``; a one-line error naming it when it is missing, not JSON, or
        lacks one of ``sections`` (JSON objects; the figures need only ``task``)."""
        if not self.config_path.is_file():
            inside = self.runs_inside()
            if inside:
                shown = " ".join(str(run) for run in inside[:6])
                more = f" and {len(inside) - 6} more" if len(inside) > 6 else ""
                raise ValueError(
                    f"{self.path} is not a run directory but holds {len(inside)} runs: give "
                    f"them instead ({shown}{more})"
                )
            raise ValueError(f"{self.path} is not a run directory: it has no config.json")
        try:
            config = json.loads(self.config_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
            raise ValueError(
                f"{self.config_path} is corrupt ({reason}); restore it, or start a new run in "
                "another --run-dir"
            ) from None
        if not isinstance(config, dict) or not all(
            isinstance(config.get(section), dict) for section in sections
        ):
            raise ValueError(
                f"{self.config_path} is not a run's config (it needs the JSON objects "
                f"{', '.join(sections)}); restore it, or start a new run in another --run-dir"
            )
        for section, key in (("task", "name"), (None, "model_kind")):
            holder = config if section is None else config.get(section)
            if isinstance(holder, dict) and key in holder and not isinstance(holder[key], str):
                where = key if section is None else f"{section}.{key}"
                raise ValueError(
                    f"{self.config_path} is damaged: {where} is {holder[key]!r}, not a name; "
                    "restore it, or start a new run in another --run-dir"
                )
        return config

    def config_without_seed(self) -> dict[str, Any]:
        """The stored config less its training seed: equal for the seeds of one configuration
        (a seed sweep), different for different models, tasks or training settings."""
        config = self.read_config()
        train = config.get("train")
        if not isinstance(train, dict):
            raise ValueError(f"{self.config_path} has no 'train' section: it is not a run's config")
        return {**config, "train": {k: v for k, v in train.items() if k != "seed"}}

    def write_config(self, config: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        atomic_write_bytes(self.config_path, text.encode())

    def read_metrics(self) -> list[dict[str, Any]]:
        """The evaluation records; a value stored as ``null`` (not finite when measured:
        a diverged evaluation) reads as NaN, as it was."""
        records = read_jsonl(self.metrics_path)
        for number, record in enumerate(records, start=1):
            step, split = record.get("step"), record.get("split")
            if not (isinstance(step, int) and step >= 0 and isinstance(split, str)):
                raise ValueError(
                    f"{self.metrics_path} record {number} has no whole 'step' and 'split' "
                    f"(step={step!r}, split={split!r}): it was not written by latentlens; "
                    "restore the file or delete that line"
                )
        return [{k: math.nan if v is None else v for k, v in r.items()} for r in records]

    def train_seconds(self) -> float | None:
        """Wall seconds of training behind the newest checkpoint, from step 0, as it
        records them (a seed group's runs each record their share); None before the first
        checkpoint or where it records none (written by an older latentlens)."""
        found = list_checkpoints(self.checkpoints)
        return recorded_train_seconds(found[-1][1]) if found else None

    def last_evaluation(self) -> dict[str, dict[str, Any]]:
        """The records of the newest evaluation, by split (``{}`` before the first)."""
        records = self.read_metrics()
        if not records:
            return {}
        last = records[-1]["step"]
        return {r["split"]: r for r in records if r["step"] == last}

    def append_metrics(self, records: list[dict[str, Any]]) -> None:
        """Append evaluation records; a value that is not finite (NaN, inf: a diverged
        evaluation) is stored as ``null``, so that every line stays JSON."""
        finite = [
            {k: None if isinstance(v, float) and not math.isfinite(v) else v
             for k, v in record.items()}
            for record in records
        ]  # fmt: skip
        append_jsonl(self.metrics_path, finite)

    def truncate_metrics(self, last_step: int) -> None:
        """Drop records after ``last_step`` (written after the checkpoint a resume uses)."""
        self.read_metrics()  # a record without its step is named before anything is cut
        truncate_jsonl(self.metrics_path, last_step)


def group_by_config(runs: list[Path]) -> list[list[Path]]:
    """The runs grouped by their stored config less the seed (the seeds of one
    configuration together), in the order first met."""
    grouped: list[tuple[dict[str, Any], list[Path]]] = []
    for run in runs:
        config = RunDirectory(run).config_without_seed()
        match = next((paths for key, paths in grouped if key == config), None)
        if match is None:
            grouped.append((config, [run]))
        else:
            match.append(run)
    return [paths for _, paths in grouped]


def seeds_of_one_config(runs: list[Path]) -> bool:
    """Whether the runs' stored configs are equal apart from the training seed (a seed
    sweep, whose results may be averaged) rather than different models, tasks or settings."""
    return len(group_by_config(runs)) == 1


def require_distinct(runs: list[Path]) -> None:
    """Refuse a run named twice on one command line."""
    if len({run.resolve() for run in runs}) < len(runs):
        raise ValueError(f"a run is named twice in {[str(run) for run in runs]}; name each once")

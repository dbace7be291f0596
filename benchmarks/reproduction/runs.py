"""The runs an experiment needs, trained together in worker processes, with their timings.

An experiment plans :class:`RunSpec` s (a run directory and its resolved config);
:func:`train_all` brings every one to its last step with
:func:`latentlens.training.train_or_resume` (reuse a finished run, resume an interrupted
one), ``jobs`` at a time as Ray tasks (the engine of ``latentlens sweep``). Specs that name
the same ``group`` (runs that differ only in their seed) train as one vmapped seed group
(:func:`latentlens.training.train_group_or_resume`; on CUDA compiled and, but for modular
ICL, captured in a CUDA graph), each run's time recorded as its share of the group's. Small models
train faster as several one-thread processes than as one process with several threads, so
on a CPU the default is one job per core. Each
run's training time is kept in ``timings.json`` beside the runs, so that a report can say
what a size costs even when some runs were found finished.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from latentlens.devices import resolve_device
from latentlens.probes import tracking_callbacks
from latentlens.probes.run import probe_run
from latentlens.sweep.run import STATUS_FILE, ray_map, sweep_states
from latentlens.threads import available_cpus, run_threads
from latentlens.training import (
    RunDirectory,
    list_checkpoints,
    train_group_or_resume,
    train_or_resume,
)

TIMINGS = "timings.json"
# Where a section was trained, when not by the invocation that reports it (one line, in the
# section's folder): benchmarks/gpu/gpu_sections.py writes it.
TRAINED_ON = "TRAINED_ON.txt"


def trained_on(folder: Path) -> str:
    """The folder's TRAINED_ON.txt line, or "" where it has none."""
    path = folder / TRAINED_ON
    return path.read_text().strip() if path.is_file() else ""


@dataclass(frozen=True)
class RunSpec:
    """One training run: where it lives, its resolved config (``Trainer.resolve_config``),
    whether the task's probes (:func:`latentlens.probes.run.probe_run`) run on it after, and
    the run whose weights it starts from (fine-tuning; trained first), and its seed
    group: specs of one folder and one non-empty ``group`` train together as one
    :class:`SeedGroup`."""

    path: Path
    config: dict[str, Any]
    probe_examples: int = 0
    init_from: Path | None = None
    group: str = ""


@dataclass(frozen=True)
class Runtime:
    device: str
    threads: int
    deadline: float | None = None  # time.time() by which every worker has checkpointed


# A run's fate in one invocation: trained to its end, found finished, or left unfinished
# (stopped or not started) by the time budget.
TRAINED, FOUND, UNFINISHED = "trained", "found finished", "left for the next call"


def finished(spec: RunSpec) -> bool:
    """Trained to its last step: its last checkpoint is there, or, for a run that is not
    probed (its weights are not needed again), its last evaluation is recorded, as in the
    raw output committed under benchmarks/results/ (config.json and metrics.jsonl)."""
    steps = spec.config["train"]["steps"]
    directory = RunDirectory(spec.path)
    found = list_checkpoints(directory.checkpoints) if directory.checkpoints.is_dir() else []
    if found and found[-1][0] >= steps:
        return True
    if spec.probe_examples or not directory.metrics_path.is_file():
        return False
    return any(record.get("step", -1) >= steps for record in directory.read_metrics())


def _probed(spec: RunSpec) -> bool:
    return (spec.path / "probes" / "results.json").is_file()


def with_threads(spec: RunSpec, runtime: Runtime) -> RunSpec:
    """``spec`` computing with this invocation's threads per run, unless its run directory
    already records a count: a run resumes with the count it started with, whatever this
    invocation's share of the CPUs (another ``--jobs``, another machine), and a run that
    predates the record (None) resumes as before."""
    directory = RunDirectory(spec.path)
    if directory.config_path.is_file():
        threads = directory.read_config(("train",))["train"].get("threads")
    else:
        threads = runtime.threads
    train = {**spec.config["train"], "threads": threads}
    return replace(spec, config={**spec.config, "train": train})


def train_one(spec: RunSpec, runtime: Runtime) -> tuple[str, float | None]:
    """Train (and probe) ``spec`` within the time budget: its fate and the seconds it took."""
    spec = with_threads(spec, runtime)
    if fate := idle_fate([spec], runtime):
        return fate, None
    found = finished(spec)  # trained before (by this script or a sweep): only probed here
    budget = None if runtime.deadline is None else runtime.deadline - time.time()
    torch.set_num_threads(runtime.threads)
    start = time.perf_counter()
    cuda = resolve_device(runtime.device).type == "cuda"
    if not found:
        train_or_resume(
            spec.path,
            spec.config,
            tracking_callbacks(spec.config),
            init_from=spec.init_from,
            device=runtime.device,
            quiet=True,
            # the SVD of modular-icl's teacher norm syncs with the host: it cannot be captured
            cuda_graphs=cuda and spec.config["task"]["name"] != "modular-icl",
            time_budget=budget,
        )
    seconds = time.perf_counter() - start
    if not finished(spec):
        return UNFINISHED, seconds
    if spec.probe_examples:
        probe_run(spec.path, spec.probe_examples, device=runtime.device, quiet=True)
    return (FOUND, None) if found else (TRAINED, seconds)


def train_unit(specs: list[RunSpec], runtime: Runtime) -> list[tuple[str, float | None]]:
    """Train one run, or one seed group (specs of one ``group``) as a vmapped group:
    each spec's fate and its seconds (a group's wall time shared equally)."""
    if len(specs) == 1:
        return [train_one(specs[0], runtime)]
    specs = [with_threads(spec, runtime) for spec in specs]
    if fate := idle_fate(specs, runtime):
        return [(fate, None)] * len(specs)
    found = all(finished(s) for s in specs)  # trained before: only probed here
    budget = None if runtime.deadline is None else runtime.deadline - time.time()
    torch.set_num_threads(runtime.threads)
    start = time.perf_counter()
    cuda = resolve_device(runtime.device).type == "cuda"
    graphable = specs[0].config["task"]["name"] != "modular-icl"  # see train_one
    if not found:
        train_group_or_resume(
            [s.path for s in specs],
            [s.config for s in specs],
            [tracking_callbacks(s.config) for s in specs],
            compile=cuda,
            cuda_graphs=cuda and graphable,
            device=runtime.device,
            quiet=True,
            time_budget=budget,
        )
    share = (time.perf_counter() - start) / len(specs)
    if not all(finished(s) for s in specs):
        return [(UNFINISHED, share)] * len(specs)
    for spec in specs:
        if spec.probe_examples and not _probed(spec):
            probe_run(spec.path, spec.probe_examples, device=runtime.device, quiet=True)
    return [(FOUND, None) if found else (TRAINED, share)] * len(specs)


def idle_fate(specs: list[RunSpec], runtime: Runtime) -> str | None:
    """The fate of runs ``specs`` that need nothing done now: :data:`FOUND` when each is
    finished (and probed, if it is to be), :data:`UNFINISHED` when less than
    :data:`MINIMUM_SLICE` seconds are left; None when they are to be trained or probed."""
    if all(finished(s) and (not s.probe_examples or _probed(s)) for s in specs):
        return FOUND
    if runtime.deadline is not None and runtime.deadline - time.time() < MINIMUM_SLICE:
        return UNFINISHED
    return None


def has_work(specs: list[RunSpec], runtime: Runtime) -> bool:
    """Whether :func:`train_unit` of ``specs`` would train or probe (:func:`idle_fate` is
    None). Otherwise it only reads their run directories, which is no reason to start a
    worker process (its imports alone take seconds), a Ray instance or a CUDA context."""
    return idle_fate(specs, runtime) is None


def units_of(specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    """The specs as training units, in order: each seed group together, other runs alone."""
    units: dict[str, list[RunSpec]] = {}
    for spec in specs:
        # a group is named within its experiment's folder
        key = f"{spec.path.parent}:{spec.group}" if spec.group else str(spec.path)
        units.setdefault(key, []).append(spec)
    return list(units.values())


# Below this many seconds left a run is not started: start-up alone would take most of it.
MINIMUM_SLICE = 20.0


def default_jobs(device: str) -> int:
    """One job per CPU core on a CPU; one on a GPU (the step is already a CUDA graph)."""
    return 1 if resolve_device(device).type == "cuda" else max(os.cpu_count() or 1, 1)


def train_all(
    specs: Sequence[RunSpec], out: Path, device: str, jobs: int, deadline: float | None = None
) -> dict[str, float]:
    """Bring every spec to its last step, ``jobs`` processes at a time, or as far as
    ``deadline`` (a ``time.time()``) allows; returns (and keeps in ``out/timings.json``) the
    training seconds of every finished run, by path relative to ``out``, including those
    recorded when an earlier invocation trained them (an unfinished run's slices add up)."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs}: at least one job is needed")
    timings_file = out / TIMINGS
    timings = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
    # one core per job; recorded by each new run (run_threads: never from the load)
    threads = max(available_cpus() // jobs, 1) if jobs > 1 else run_threads()
    runtime = Runtime(device, threads, deadline)
    unique = list({spec.path: spec for spec in specs}.values())  # experiments share bases
    bases = {spec.init_from for spec in unique}
    # runs others start from, then the rest: a fine-tune needs its base finished
    first = [spec for spec in unique if spec.path in bases]
    for wave in (first, [spec for spec in unique if spec.path not in bases]):
        units = units_of(wave)
        busy = [unit for unit in units if has_work(unit, runtime)]
        if jobs == 1 or len(busy) < 2:
            results = (train_unit(unit, runtime) for unit in units)
        else:  # Ray's workers and resource accounting, as `latentlens sweep` uses them
            here = str(Path(__file__).resolve().parents[1])  # benchmarks/: this package
            calls = [(unit, runtime) for unit in busy]
            done = ray_map(train_unit, calls, jobs, runtime.device, python_path=[here])
            results = in_order(units, busy, done, runtime)
        for unit, fates in zip(units, results, strict=True):
            names = [str(spec.path.relative_to(out)) for spec in unit]
            record(timings, timings_file, names, fates)
    return timings


def in_order(
    units: list[list[RunSpec]], busy: list[list[RunSpec]], done: Iterator, runtime: Runtime
) -> Iterator[list[tuple[str, float | None]]]:
    """Each unit's fates in the order of ``units``: those of ``busy`` from ``done`` (the
    workers' results, in the order of ``busy``), the others from :func:`train_unit` here.
    ``done`` is run to its end after the last, so that its Ray instance stops then."""
    working = {id(unit) for unit in busy}
    for unit in units:
        yield next(done) if id(unit) in working else train_unit(unit, runtime)
    for _ in done:
        pass


def recorded_seconds(out: Path) -> dict[str, float]:
    """Every finished run's training seconds kept under ``out``, by path relative to it:
    ``out/timings.json``'s (runs this script trained) and, for runs a ``latentlens sweep``
    trained into a section's folder, its ``sweep.json``'s (``SECTION/CELL``)."""
    found: dict[str, float] = {}
    for status in sorted(out.glob(f"*/{STATUS_FILE}")):
        found |= {f"{status.parent.name}/{name}": float(cell["seconds"])
                  for name, cell in sweep_states(status.parent).items()
                  if cell["state"] == "done" and "seconds" in cell}  # fmt: skip
    timings = out / TIMINGS
    return found | (json.loads(timings.read_text()) if timings.is_file() else {})


def record(timings: dict[str, float], path: Path, names: list[str], results) -> None:
    """Store each run's seconds as it arrives (a killed invocation keeps them); the slices
    of a run trained over several calls add up."""
    for name, (fate, seconds) in zip(names, results, strict=True):
        if seconds is not None:
            timings[name] = round(timings.get(f"{name} (partial)", 0.0) + seconds, 1)
            timings.pop(f"{name} (partial)", None)
            if fate == UNFINISHED:
                timings[f"{name} (partial)"] = timings.pop(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
        shown = fate if seconds is None else f"{fate}, {seconds:.0f} s"
        print(f"  {name}: {shown}", flush=True)


def metrics_at_end(run: Path) -> dict[str, dict[str, float]]:
    """The last evaluation's metrics, by split."""
    return RunDirectory(run).last_evaluation()


# The source files whose changes change what a run computes: a section measured at a commit
# before a change to one of them is stale (tests/test_results_freshness.py).
NUMERIC_SOURCES = (
    "latentlens/models/attention.py",
    "latentlens/models/encoder_decoder.py",
    "latentlens/models/fusion.py",
    "latentlens/models/hypernetwork.py",
    "latentlens/models/init.py",
    "latentlens/models/layer_norm.py",
    "latentlens/models/position.py",
    "latentlens/models/softmax.py",
    "latentlens/models/transformer.py",
    "latentlens/tasks",
    "latentlens/training/objective.py",
)


def code_commit() -> str:
    """The commit of the code running now (12 hex digits), ``"+ uncommitted changes"``
    added where the numeric sources differ from it, ``"unknown"`` outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *NUMERIC_SOURCES],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + uncommitted changes" if dirty else head

"""The fastest way to compute a run's step on this machine, measured rather than assumed.

A step can run eagerly, compiled by inductor (``compile``), on latentlens's fused CPU
kernels (``fused``, ``fused-compile``) or, on CUDA, compiled and captured in a CUDA graph
(``compile-graphs``; ``graphs`` uncompiled, taken only by ``--cuda-graphs`` alone). Each
computes the same step to float rounding (the tests hold each to the eager step), but
which is fastest depends on the machine and the model's shapes: on a 2-core AVX-512 EPYC
the fused kernels with compile (oneDNN's matmuls) ran 1.6-2.8x eager, compile alone
0.9-1.3x; on a GPU eager PyTorch is 3x slower than the official code and compiled and
graphed 4-6x faster.

:func:`choose_path` times each path that can run here in turns (:func:`calibrate`),
adds what compiling costs, and picks the path that finishes the run's remaining steps
first; eager unless another is at least its :func:`margin` times as fast per step. Paths
are not timed where other work keeps busy the CPUs the run would use (they would rank as
the neighbours allow): such a run is eager and measures nothing. On the CPU the margin is
small (1.05x) for the paths that compute the same numbers on any thread count and so may
follow the machine's load as eager does (:data:`LOAD_FOLLOWING`: the fused kernels sum in
fixed slices; :mod:`latentlens.training.thread_choice` checks each run), and wide (1.5x) for
``compile``, whose inductor sums split by thread: such a run keeps the thread count it
started with, and beside one busy neighbour on 2 cores a run kept on 2 threads took 238 s
for 1,000 steps where one down to 1 thread took 42 s (docs/benchmarks.md). On CUDA the
CPU's load barely matters (1.05x). Runs shorter than :data:`CALIBRATE_FROM` steps do not
compile, which would not repay itself: from :data:`CALIBRATE_UNCOMPILED_FROM` steps they
time the paths that compile nothing (eager and the fused kernels, which are built once per
machine: the demo's 3,000-step HYLA run took 24 steps/s fused and 18 eager on a 2-core
AVX2 EPYC, for about 6 s of timing), and shorter ones run eagerly. The measurement is
cached per machine and model shape (``~/.cache/latentlens/fast_paths.json``, or
``$LATENTLENS_CACHE``), and the chosen path is recorded in the run's config
(``train.path``), so that a resume computes the same way.
``$LATENTLENS_PATH`` names a path to take instead of measuring (the test suite sets
``eager``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from latentlens.devices import cpu_model
from latentlens.threads import available_cpus, busy_elsewhere

PATHS = ("eager", "compile", "fused", "fused-compile", "graphs", "compile-graphs")
OPTIONS = {
    "eager": {"compile": False, "fused": False, "cuda_graphs": False},
    "compile": {"compile": True, "fused": False, "cuda_graphs": False},
    "fused": {"compile": False, "fused": True, "cuda_graphs": False},
    "fused-compile": {"compile": True, "fused": True, "cuda_graphs": False},
    "graphs": {"compile": False, "fused": False, "cuda_graphs": True},
    "compile-graphs": {"compile": True, "fused": False, "cuda_graphs": True},
}
# Below this many steps a run compiles nothing: no compilation to repay.
CALIBRATE_FROM = 5_000
# Below this many steps a run is not calibrated at all: eager (timing the paths that
# compile nothing takes about 70 steps of each).
CALIBRATE_UNCOMPILED_FROM = 1_000
# Another path must be this many times as fast as eager to be chosen over it: per device,
# and on the CPU per whether the path may follow the load (LOAD_FOLLOWING) or not.
MARGIN = {"cpu": 1.5, "cuda": 1.05}
FOLLOWING_MARGIN = 1.05
# The CPU paths whose numbers are the same on any thread count (checked per run).
LOAD_FOLLOWING = frozenset({"eager", "fused", "fused-compile"})
# Steps per path before timing (compilation, the allocator's first sizes), then rounds
# of steps per path in turn (:func:`calibrate`).
WARM_UP_STEPS, ROUNDS, ROUND_STEPS = 3, 5, 10
# 2: paths timed in turns, each its fastest round; 3: the paths tried; 4: each path's
# time over eager's in the same round
CACHE_VERSION = 4
# A path to take instead of measuring (e.g. ``eager`` for scripts and test suites).
ENVIRONMENT = "LATENTLENS_PATH"
REQUESTED = f"named by ${ENVIRONMENT}"  # the reason of a path taken from it


def options_of(path: str) -> dict[str, bool]:
    """The Trainer's ``compile``, ``fused`` and ``cuda_graphs`` of ``path``."""
    if path not in OPTIONS:
        raise ValueError(f"path={path!r} is unknown; choose one of {list(PATHS)}")
    return dict(OPTIONS[path])


def requested_path() -> str | None:
    """``$LATENTLENS_PATH``, the path new runs take without measuring; None if unset."""
    value = os.environ.get(ENVIRONMENT)
    if not value:
        return None
    if value not in OPTIONS:
        raise ValueError(f"{ENVIRONMENT}={value!r} is invalid: choose one of {list(PATHS)}")
    return value


def path_of(compile: bool, fused: bool, cuda_graphs: bool) -> str:
    """The path of the Trainer's options (the fused CPU kernels and CUDA graphs exclude
    each other: refused)."""
    wanted = {"compile": bool(compile), "fused": bool(fused), "cuda_graphs": bool(cuda_graphs)}
    found = next((path for path, options in OPTIONS.items() if options == wanted), None)
    if found is None:
        raise ValueError("--fused runs CPU kernels and --cuda-graphs captures a CUDA step: "
                         "drop one of them")  # fmt: skip
    return found


@dataclass(frozen=True)
class Calibration:
    """Steps per second of each path timed (``rates``) and the seconds its first steps
    took beyond a timed step's (``start_seconds``: compiling, building kernels); ``tried``:
    the paths it tried, those that do not apply to the model (no rate) included."""

    rates: dict[str, float]
    start_seconds: dict[str, float]
    tried: tuple[str, ...] = ()

    def finish_seconds(self, path: str, steps: int) -> float:
        """Seconds ``path`` takes for ``steps`` steps, its start included."""
        return self.start_seconds[path] + steps / self.rates[path]


@dataclass(frozen=True)
class Choice:
    """A path and why: ``reason`` one line; ``calibration`` None where none was run."""

    path: str
    reason: str
    calibration: Calibration | None = None


def candidates(device: torch.device, graph_capturable: bool, compiler: bool) -> list[str]:
    """The paths that can run here: on the CPU the fused and compiled ones where a C++
    compiler is found; on CUDA compiled, and graphed where the task's batches can be
    captured."""
    if device.type == "cuda":
        return ["eager", "compile", *(["compile-graphs"] if graph_capturable else [])]
    if device.type != "cpu" or not compiler:
        return ["eager"]
    return ["eager", "compile", "fused", "fused-compile"]


PACKAGE = Path(__file__).resolve().parents[1]


@cache
def code_digest(package: Path = PACKAGE) -> str:
    """A digest of the code the paths run (``package``'s kernels and models, C and
    Python, and the traced step): faster kernels make their calibrations stale."""
    files = sorted(
        path
        for folder in ("kernels", "models")
        for path in (package / folder).iterdir()
        if path.suffix in (".py", ".c", ".h")
    )
    files += [package / "training" / "traced_step.py"]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def machine_key(device: torch.device) -> dict[str, Any]:
    """What a calibration depends on besides the model: processor, CPUs, torch, the code."""
    key: dict[str, Any] = {"processor": cpu_model() or platform.machine(), "cpus": available_cpus(),
                           "torch": torch.__version__, "device": device.type,
                           "code": code_digest()}  # fmt: skip
    if device.type == "cuda":
        key["gpu"] = torch.cuda.get_device_name(device)
    return key


def shape_key(config: dict[str, Any]) -> dict[str, Any]:
    """What a calibration depends on in a run's config: the model, the task, the batch,
    the precision and thread count (not the seed, steps or schedule)."""
    train = config["train"]
    return {"model_kind": config.get("model_kind"), "model": config["model"],
            "task": config["task"], "batch_size": train["batch_size"],
            "precision": train.get("precision"), "threads": train.get("threads"),
            "grad_clip": train.get("grad_clip")}  # fmt: skip


def cache_path() -> Path:
    root = os.environ.get("LATENTLENS_CACHE") or Path.home() / ".cache" / "latentlens"
    return Path(root) / "fast_paths.json"


def _cache_id(device: torch.device, config: dict[str, Any]) -> str:
    text = json.dumps([CACHE_VERSION, machine_key(device), shape_key(config)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def read_cached(device: torch.device, config: dict[str, Any]) -> Calibration | None:
    """This machine's cached calibration of ``config``'s shapes; None if there is none (or
    the cache is unreadable or lacks eager's rate: it is only a cache)."""
    try:
        entry = json.loads(cache_path().read_text())[_cache_id(device, config)]
        found = Calibration(dict(entry["rates"]), dict(entry["start_seconds"]),
                            tuple(entry["tried"]))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if "eager" in found.rates else None


def write_cached(device: torch.device, config: dict[str, Any], found: Calibration) -> None:
    """Add ``found`` to the cache (:func:`add_to_cache`)."""
    add_to_cache(cache_path(), _cache_id(device, config), {"rates": found.rates,
                 "tried": list(found.tried), "start_seconds": found.start_seconds})  # fmt: skip


def add_to_cache(path: Path, key: str, entry: object) -> None:
    """Set ``key`` of the JSON object in ``path`` to ``entry``, atomically: a cache that
    cannot be read starts again, and one that cannot be written is left (it is only a
    cache)."""
    try:
        try:
            entries = json.loads(path.read_text())
            entries = entries if isinstance(entries, dict) else {}
        except (OSError, ValueError):
            entries = {}
        entries[key] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
            json.dump(entries, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError:
        pass


StepFactory = Callable[[str], Callable[[], object]]


def calibrate(paths: list[str], make_step: StepFactory, sync: Callable[[], None]) -> Calibration:
    """Time each path: ``make_step(path)`` builds its step function (a ValueError: the
    path does not apply to this model, e.g. no fused kernel covers it, and is left out);
    its first :data:`WARM_UP_STEPS` steps give its start cost. Then the paths take turns,
    :data:`ROUND_STEPS` steps each for :data:`ROUNDS` rounds, each round starting one path
    further along. A path's seconds a step are the first path's (eager's) fastest round
    times the median over rounds of the path's time over the first path's in the same
    round. The machine's pace moves within seconds (a 2-core EPYC's step by a third), so
    a change of pace that slows whole rounds cancels in each round's ratio, and one that
    falls on a few turns is a round the median leaves out; each path's fastest round would
    rank a path below a slower one where a slowdown began after the slower one's first
    turn and lasted to the end."""
    steps: dict[str, Callable[[], object]] = {}
    built_seconds: dict[str, float] = {}
    for path in paths:
        began = time.perf_counter()
        try:
            step = make_step(path)
        except ValueError:
            if path == "eager":  # the run itself cannot start: say why
                raise
            continue
        for _ in range(WARM_UP_STEPS):
            step()
        sync()
        steps[path], built_seconds[path] = step, time.perf_counter() - began
    names = list(steps)
    seconds: dict[str, list[float]] = {path: [] for path in names}  # a step's, per round
    for turn in range(ROUNDS):
        start = turn % len(names)
        for path in names[start:] + names[:start]:
            began = time.perf_counter()
            for _ in range(ROUND_STEPS):
                steps[path]()
            sync()
            seconds[path].append((time.perf_counter() - began) / ROUND_STEPS)
    first = seconds[names[0]]
    per_step = {
        path: min(first) * statistics.median(a / b for a, b in zip(rounds, first, strict=True))
        for path, rounds in seconds.items()
    }
    return Calibration(
        {path: 1.0 / per_step[path] for path in names},
        {path: max(0.0, built_seconds[path] - WARM_UP_STEPS * per_step[path]) for path in names},
        tuple(paths),
    )


def margin(path: str, device: torch.device) -> float:
    """How many times as fast as eager ``path`` must step on ``device`` to be chosen."""
    if device.type == "cpu" and path in LOAD_FOLLOWING:
        return FOLLOWING_MARGIN
    return MARGIN.get(device.type, MARGIN["cpu"])


def pick(found: Calibration, steps: int, device: torch.device) -> Choice:
    """The path of ``found`` that finishes ``steps`` steps first, eager unless another
    is its :func:`margin` times as fast per step on ``device``."""
    eager = found.rates["eager"]
    fit = [p for p in found.rates if p == "eager" or found.rates[p] >= margin(p, device) * eager]
    best = min(fit, key=lambda p: found.finish_seconds(p, steps))
    rates = ", ".join(f"{p} {found.rates[p]:.0f}" for p in found.rates)
    started = ", ".join(f"{p} {found.start_seconds[p]:.0f} s"
                        for p in found.rates if found.start_seconds[p] >= 1)  # fmt: skip
    reason = f"steps/s {rates}" + (f"; start-up {started}" if started else "")
    return Choice(best, reason, found)


def choose_path(
    config: dict[str, Any],
    device: torch.device,
    paths: list[str],
    make_step: StepFactory,
    sync: Callable[[], None] = lambda: None,
) -> Choice:
    """The path for a new run of ``config`` with ``paths`` possible (see the module's
    docstring); ``make_step(path)`` builds a throwaway trainer's step for calibrating."""
    steps = int(config["train"]["steps"])
    if paths == ["eager"]:
        return Choice("eager", "no other path runs here")
    if steps < CALIBRATE_UNCOMPILED_FROM:
        return Choice("eager", f"a run of {steps:,} steps (under "
                               f"{CALIBRATE_UNCOMPILED_FROM:,}) would not repay timing the "
                               "paths")  # fmt: skip
    if steps < CALIBRATE_FROM:
        paths = [path for path in paths if not OPTIONS[path]["compile"]]
        if paths == ["eager"]:
            return Choice("eager", f"a run of {steps:,} steps (under {CALIBRATE_FROM:,}) "
                                   "would not repay compiling")  # fmt: skip
    found = read_cached(device, config)
    if found is not None and not set(paths) <= set(found.tried):
        found = None  # timed for a shorter run, without the compiled paths: time them all
    cpus = available_cpus()
    wanted = min(config["train"].get("threads") or cpus, cpus)  # a run of fewer threads
    if found is None and device.type == "cpu" and busy_elsewhere(cpus) > cpus - wanted:
        # timed beside other work on its CPUs, the paths rank as that work allows, not as
        # they run (a one-thread run, as a sweep's, is timed where one CPU is free)
        return Choice("eager", "other work keeps a CPU busy, so timing the paths now would "
                               "mislead; eager follows the load")  # fmt: skip
    if found is None:
        found = calibrate(paths, make_step, sync)
        write_cached(device, config, found)
    kept = [p for p in paths if p in found.rates]
    return pick(Calibration({p: found.rates[p] for p in kept},
                            {p: found.start_seconds[p] for p in kept}, tuple(paths)),
                steps, device)  # fmt: skip

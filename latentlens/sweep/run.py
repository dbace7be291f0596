"""Run a sweep's cells on Ray: a local instance started in-process by default, or a
cluster by address. One CPU core (or one GPU) per run, by Ray's resource accounting. Each
cell is an ordinary run directory ``OUT/<cell>``: finished cells are skipped, interrupted
ones resumed from their checkpoints, a crashed cell is reported without stopping the
others, and a worker that dies is retried once (resuming from its checkpoint).
With a time budget every cell checkpoints and stops by the same deadline (the driver's
clock at the start plus the budget), and is left ``paused`` for the next call.
Cells with the most steps left go to Ray first, so that a resumed sweep's workers end
together.
``OUT/sweep.json`` holds every cell's state and its training seconds (the slices of
several calls added up), which ``latentlens sweep --status`` reads, beside the locks: the
driver holds the sweep folder's while it runs, each cell's trainer its run's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from latentlens.sweep.address import check_reachable
from latentlens.sweep.reaper import ray_instance
from latentlens.sweep.spec import MAX_CELLS, Cell, SweepSpec
from latentlens.training.checkpoint import atomic_write_bytes
from latentlens.training.run_lock import RunLock, RunLocked, being_written

STATUS_FILE = "sweep.json"
PROGRESS_EVERY = 30.0  # seconds between lines about the running cells
# Below this many seconds before the deadline a cell is not started: its start-up (the
# worker's imports, the task's split) would take most of it.
MINIMUM_SLICE = 20.0


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(
            'latentlens sweep runs on Ray, which is not installed: pip install "latentlens[sweep]"'
        ) from None
    return ray


# ray.init's options for every instance latentlens starts or joins: no dashboard, the
# workers' output kept out of the driver's, and the driver's logging left alone
QUIET_INIT = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}


def task_resources(device: str) -> dict[str, int]:
    """What one Ray task holds: a GPU on CUDA, else a CPU (one run per core)."""
    return {"num_gpus": 1} if device.startswith("cuda") else {"num_cpus": 1}


def ray_map(
    function: Callable[..., Any],
    calls: Sequence[tuple],
    num_cpus: int,
    device: str = "cpu",
    python_path: Sequence[str] = (),
) -> Iterator[Any]:
    """``function(*call)`` for every call, as Ray tasks on a local instance of ``num_cpus``
    CPUs, or on the instance already running in this process (one core, or one GPU, per
    task; a task whose worker dies is retried once); the results in the order of
    ``calls``. ``python_path``: folders the workers import from (the driver's ``sys.path``
    additions do not reach them; set on the tasks, so an instance started elsewhere gets
    them too)."""
    ray = require_ray()
    paths = [*python_path, os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with ray_instance(ray, num_cpus=num_cpus, **QUIET_INIT):
        options = {"max_retries": 1, "runtime_env": {"env_vars": env}, **task_resources(device)}
        remote = ray.remote(**options)(function)
        refs = [remote.remote(*call) for call in calls]
        for ref in refs:
            yield ray.get(ref)


def train_cell(
    path: str,
    config: dict[str, Any],
    device: str,
    deadline: float | None = None,
    fused: bool = False,
) -> dict[str, Any]:
    """Bring one cell's run to its last step, or as far as ``deadline`` (a ``time.time()``)
    allows (in a Ray worker; ``fused``: train ``--fused``): ``{"metrics": its last
    evaluation's, "finished": bool, "seconds": this slice's time, "run_seconds": the
    training time its newest checkpoint records, from step 0}``."""
    return train_group([path], [config], device, deadline, fused)[0]


def train_group(
    paths: list[str],
    configs: list[dict[str, Any]],
    device: str,
    deadline: float | None = None,
    fused: bool = False,
) -> list[dict[str, Any]]:
    """Bring cells to their last step, or as far as ``deadline`` allows (a Ray worker): one
    cell as a run, several that differ only in their seed as one vmapped seed group
    (:func:`~latentlens.training.train_group_or_resume`; cells started apart are finished
    apart); each cell's result as :func:`train_cell` gives it, the group's seconds shared
    equally. ``fused``: a lone cell trains with the fused CPU kernels (``--fused``)."""
    import torch

    from latentlens.probes import tracking_callbacks
    from latentlens.training import train_group_or_resume, train_or_resume

    budget = None if deadline is None else deadline - time.time()
    start = time.perf_counter()
    if budget is None or budget >= MINIMUM_SLICE:
        torch.set_num_threads(1)  # Ray gave this task one core
        callbacks = [tracking_callbacks(config) for config in configs]
        if len(paths) == 1:
            train_or_resume(paths[0], configs[0], callbacks[0], device=device, quiet=True,
                            time_budget=budget, fused=fused)  # fmt: skip
        else:
            train_group_or_resume(paths, configs, callbacks, device=device, quiet=True,
                                  time_budget=budget)  # fmt: skip
    from latentlens.training import RunDirectory

    share = (time.perf_counter() - start) / len(paths)
    return [{"metrics": final_metrics(path), "finished": cell_finished(Path(path), config),
             "seconds": share, "run_seconds": RunDirectory(path).train_seconds()}
            for path, config in zip(paths, configs, strict=True)]  # fmt: skip


def final_metrics(path: str) -> dict[str, Any]:
    """The last evaluation's metrics of a run, by split."""
    from latentlens.training import RunDirectory

    return {split: {k: v for k, v in record.items() if k not in ("step", "split")}
            for split, record in RunDirectory(path).last_evaluation().items()}  # fmt: skip


def seed_groups(cells: Sequence[Cell]) -> list[list[Cell]]:
    """Cells grouped by their config less the training seed, in the grid's order."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        config = {**cell.config, "train": {k: v for k, v in cell.config["train"].items()
                                           if k != "seed"}}  # fmt: skip
        groups.setdefault(json.dumps(config, sort_keys=True), []).append(cell)
    return list(groups.values())


def steps_left(path: Path, config: dict[str, Any]) -> int:
    """The training steps a cell has left past its newest checkpoint (all where none)."""
    from latentlens.training import RunDirectory, list_checkpoints

    found = list_checkpoints(RunDirectory(path).checkpoints)
    return config["train"]["steps"] - (found[-1][0] if found else 0)


def cell_finished(path: Path, config: dict[str, Any]) -> bool:
    return steps_left(path, config) <= 0


def most_steps_left_first(units: list[list[Cell]], out: Path) -> list[list[Cell]]:
    """Ray's tasks (a cell, or a seed group) with the most training steps left first, the
    grid's order among equals: a sweep resumed after a time budget starts its unstarted
    cells before it finishes the nearly done ones, so that its workers end together rather
    than one long cell running alone at the end (longest job first)."""
    return sorted(units, key=lambda unit: -max(steps_left(out / c.name, c.config) for c in unit))


def write_status(out: Path, states: dict[str, dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"cells": states}, indent=1, sort_keys=True) + "\n"
    atomic_write_bytes(out / STATUS_FILE, text.encode())


def live_step(out: Path, name: str) -> int | None:
    """How far a cell's run directory has come: its newest checkpoint's or evaluation's
    step, whichever is later (None before either)."""
    from latentlens.training import RunDirectory, list_checkpoints
    from latentlens.training.run_dir import read_jsonl

    records = read_jsonl(out / name / "metrics.jsonl")
    checkpoints = list_checkpoints(RunDirectory(out / name).checkpoints)
    steps = [records[-1]["step"]] if records else []
    steps += [checkpoints[-1][0]] if checkpoints else []
    return max(steps) if steps else None


def _read_states(path: Path) -> dict[str, dict[str, Any]]:
    """The cells' states in a sweep's ``sweep.json``, checked: ``{"cells": {name: {"state":
    ..., ...}}}`` with each name a folder of the sweep; a one-line error naming the file."""

    def damaged(why: str) -> ValueError:
        return ValueError(f"{path} is damaged ({why}); run the sweep again to rewrite it")

    try:
        states = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise damaged(str(err) or type(err).__name__) from None
    if not isinstance(states, dict) or not isinstance(states.get("cells"), dict):
        raise damaged("no 'cells' object")
    for name, state in states["cells"].items():
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise damaged(f"cell name {name!r} is not a folder of the sweep")
        if not isinstance(state, dict) or not isinstance(state.get("state"), str):
            raise damaged(f"cell {name!r} has no 'state'")
    return states["cells"]


def status_lines(out: Path) -> list[str]:
    """The sweep in ``out`` as a table, a row per cell: its state, step (the newest
    checkpoint's or evaluation's), training seconds and its task's headline metric
    (:attr:`latentlens.tasks.Task.headline`), then the counts."""
    path = out / STATUS_FILE
    if not path.is_file():
        raise ValueError(f"{out} holds no sweep ({STATUS_FILE}); start one with latentlens sweep")
    states = _read_states(path)
    sweeping = being_written(out)
    rows = [("cell", "state", "step", "train s", "headline")]
    for name, state in states.items():
        state = {**state, "state": live_state(out, name, state["state"], sweeping)}
        states[name] = state
        step = live_step(out, name)
        shown = state.get("error") or state.get("metric") or ""
        seconds = state.get("seconds")
        rows.append((name, state["state"], "-" if step is None else str(step),
                     "-" if seconds is None else f"{seconds:.1f}", shown))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=False))
             + "  " + row[4] for row in rows]  # fmt: skip
    counts = {s: sum(v["state"] == s for v in states.values()) for s in ("done", "failed")}
    lines.append(f"{len(states)} cells: {counts['done']} done, {counts['failed']} failed, "
                 f"{len(states) - sum(counts.values())} not finished")  # fmt: skip
    if any(state["state"] == STOPPED for state in states.values()):
        lines.append(f"no sweep is running in {out}: the command that started it continues "
                     "the stopped cells from their checkpoints")  # fmt: skip
    return lines


# a cell recorded running or queued by a sweep that is no longer running (killed, or its
# machine restarted): what the driver wrote last is not what is happening
STOPPED = "stopped"


def live_state(out: Path, name: str, recorded: str, sweeping: bool | None) -> str:
    """A cell's state as it is now: ``running`` while a process holds its run's lock,
    ``queued`` while the sweep's driver holds the sweep's lock, ``stopped`` where neither
    does; ``recorded`` (sweep.json's) for the cells a sweep ended, and where the kernel's
    table of locks cannot be read (``sweeping`` None)."""
    if recorded not in ("running", "queued") or sweeping is None:
        return recorded
    if being_written(out / name):
        return "running"
    return "queued" if sweeping else STOPPED


def headline(metrics: dict[str, dict[str, float]], task: str) -> str:
    """``split metric value ± standard error`` of ``task``'s headline
    (:attr:`latentlens.tasks.Task.headline`) in a run's final ``metrics`` by split, or of
    the last split's first metric where the run did not evaluate it."""
    from latentlens.tasks import TASKS

    split, key = TASKS[task][0].headline
    if key not in metrics.get(split, {}):
        split, values = list(metrics.items())[-1]
        key = next((k for k in values if not k.endswith("_se")), "loss")
    value = metrics[split][key]
    error = metrics[split].get(f"{key}_se")
    return f"{split} {key} {value:.3f}" + (f" ± {error:.3f}" if error is not None else "")


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    address: str | None = None,
    device: str = "cpu",
    num_cpus: int | None = None,
    group_seeds: bool = False,
    max_cells: int = MAX_CELLS,
    time_budget: float | None = None,
    fused: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run every cell of ``spec`` into ``out``; returns the cells' final states (``done``,
    ``failed``, or ``paused`` by ``time_budget``, seconds from now by which every cell has
    checkpointed and stopped). With ``group_seeds``, cells that differ only in
    ``train.seed`` train as one vmapped seed group (one task), which pays on a GPU. With
    ``fused``, every cell trains with the fused CPU kernels (``train --fused``). A grid
    over ``max_cells`` is refused."""
    if fused and (group_seeds or device != "cpu"):
        raise ValueError(
            "--fused trains each cell alone on a CPU core: drop --seeds and use --device cpu"
        )
    if num_cpus is not None and (isinstance(num_cpus, bool) or num_cpus < 1):
        raise ValueError(f"num_cpus={num_cpus} is invalid: Ray needs at least 1 CPU to run a cell")
    if time_budget is not None and not time_budget > 0:
        raise ValueError(
            f"time_budget={time_budget} is invalid: give the seconds the sweep may take"
        )
    deadline = None if time_budget is None else time.time() + time_budget
    out = Path(out)
    cells = spec.cells(max_cells)  # every config resolved before anything starts
    if address is None:  # a local sweep: every cell fits this machine, checked before Ray
        for cell in cells:
            check_cell_fits(cell, device)
    ray = require_ray()
    if address is not None:
        check_reachable(address)
    with sweep_lock(out):
        return _sweep_cells(
            cells, out, ray, address, device, num_cpus, group_seeds, deadline, fused
        )


def check_cell_fits(cell: Cell, device: str) -> None:
    """The memory check ``latentlens train`` makes (:func:`check_fits`), for one cell on
    this machine's ``device``, naming the cell."""
    import torch

    from latentlens.models import model_config, resolve_model_kind
    from latentlens.training.memory import check_fits

    config = cell.config
    kind = resolve_model_kind(config.get("model_kind", "transformer"))
    target = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                          "cpu" if device == "auto" else device)  # fmt: skip
    try:
        check_fits(kind, model_config(kind, config["model"]), config["train"]["batch_size"],
                   target)  # fmt: skip
    except ValueError as err:
        raise ValueError(f"cell {cell.name}: {err}") from None


@contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Hold the sweep folder's lock (a run directory's: the kernel drops it when the driver
    dies, however it dies) while the sweep runs: a second sweep into ``out`` is refused in
    one line, and ``--status`` tells a running sweep from an interrupted one by it."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; choose a folder for the sweep")
    lock = RunLock(out)
    try:
        lock.acquire()
    except RunLocked:
        raise RunLocked(
            f"{out} is being swept by {lock.holder()}; wait for that sweep, or follow it with "
            f"`latentlens sweep --status {out}`"
        ) from None
    try:
        yield
    finally:
        lock.release()


def _sweep_cells(
    cells: list[Cell],
    out: Path,
    ray: Any,
    address: str | None,
    device: str,
    num_cpus: int | None,
    group_seeds: bool,
    deadline: float | None,
    fused: bool,
) -> dict[str, dict[str, Any]]:
    """Train the unfinished ``cells`` on Ray (``run_sweep``'s work, under the sweep's lock)."""
    seconds = {name: state["seconds"] for name, state in sweep_states(out).items()
               if isinstance(state.get("seconds"), (int, float))}  # fmt: skip
    states: dict[str, dict[str, Any]] = {}
    pending: list[Cell] = []
    for cell in cells:
        if cell_finished(out / cell.name, cell.config):
            metric = headline(final_metrics(str(out / cell.name)), cell.config["task"]["name"])
            states[cell.name] = {"state": "done", "metric": f"{metric} (found finished)"}
        else:
            states[cell.name] = {"state": "queued"}
            pending.append(cell)
        if cell.name in seconds:
            states[cell.name]["seconds"] = seconds[cell.name]
    write_status(out, states)
    if found := len(cells) - len(pending):
        print(f"{found} of {len(cells)} cells found finished", flush=True)
    if not pending:
        return states
    with ray_instance(ray, address=address, num_cpus=num_cpus, **QUIET_INIT):
        group = ray.remote(max_retries=1, **task_resources(device))(train_group)
        refs: dict[Any, list[Cell]] = {}
        units = seed_groups(pending) if group_seeds else [[c] for c in pending]
        for cells_of in most_steps_left_first(units, out):
            paths = [str((out / c.name).resolve()) for c in cells_of]
            configs = [c.config for c in cells_of]
            refs[group.remote(paths, configs, device, deadline, fused)] = cells_of
        print(f"{len(pending)} cells to train as {len(refs)} Ray tasks", flush=True)
        last_progress = time.monotonic()
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=5.0)
                for ref in ready:
                    cells_of = refs.pop(ref)
                    try:
                        results = ray.get(ref)
                        for cell, result in zip(cells_of, results, strict=True):
                            states[cell.name] = _state_of(cell, result, states[cell.name])
                    except Exception as err:  # noqa: BLE001 - a crashed cell must not stop the rest
                        cause = getattr(err, "cause", None) or err
                        error = f"{type(cause).__name__}: {cause}"
                        for cell in cells_of:
                            states[cell.name] = {**states[cell.name], "state": "failed",
                                                 "error": error}  # fmt: skip
                    ended = sum(s["state"] in ("done", "failed", "paused")
                                for s in states.values())  # fmt: skip
                    for cell in cells_of:  # progress; the metrics come in the closing table
                        state = states[cell.name]
                        error = f": {state['error']}" if "error" in state else ""
                        print(f"[{ended}/{len(cells)}] {cell.name}: {state['state']}{error}",
                              flush=True)  # fmt: skip
                    write_status(out, states)
                if refs and time.monotonic() - last_progress > PROGRESS_EVERY:
                    running = _mark_running(out, refs.values(), states)
                    print(f"running: {'; '.join(running)}", flush=True)
                    last_progress = time.monotonic()
        except KeyboardInterrupt:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise KeyboardInterrupt(
                f"the sweep stopped; `latentlens sweep` with the same spec and --out {out} "
                "continues it (finished cells are skipped, the others resume)"
            ) from None
    return states


def _mark_running(
    out: Path, waiting: Iterable[list[Cell]], states: dict[str, dict[str, Any]]
) -> list[str]:
    """Mark each of the ``waiting`` cells running while a process holds its run's lock,
    queued otherwise (Ray runs as many as it has cores), in ``states`` and ``sweep.json``;
    ``"cell step N"`` of each running one. Where the kernel's table of locks cannot be read
    (not Linux), a cell whose run has begun counts as running."""
    running = []
    for cell in (cell for cells_of in waiting for cell in cells_of):
        writing = being_written(out / cell.name)
        if writing is None:
            writing = (out / cell.name / "config.json").is_file()
        states[cell.name] = {**states[cell.name], "state": "running" if writing else "queued"}
        if writing:
            running.append(f"{cell.name} step {live_step(out, cell.name) or 0}")
    write_status(out, states)
    return running


def _state_of(cell: Cell, result: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """A cell's state from its task's result: ``done`` with its headline metric, or
    ``paused`` by the time budget; its training seconds as its run's newest checkpoint
    records them (every slice's, a killed one's up to its last checkpoint), else this
    call's added to those of earlier calls."""
    if result.get("run_seconds") is not None:
        seconds = round(result["run_seconds"], 1)
    elif "seconds" in before or result["metrics"]:
        seconds = round(before.get("seconds", 0.0) + result["seconds"], 1)
    else:  # not started yet: no time to tell
        return {"state": "paused"}
    if not result["finished"]:
        return {"state": "paused", "seconds": seconds}
    metric = headline(result["metrics"], cell.config["task"]["name"])
    return {"state": "done", "metric": metric, "seconds": seconds}


def sweep_states(out: Path) -> dict[str, dict[str, Any]]:
    """The cells' states a sweep left in ``out``'s ``sweep.json``, checked (none where it
    left no file)."""
    path = out / STATUS_FILE
    return _read_states(path) if path.is_file() else {}

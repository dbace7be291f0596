"""`latentlens sweep`: the grid and the checks of a spec, the status read back, and, in a
subprocess, a sweep on its own local Ray instance: a killed worker retried, Ctrl-C, and
every Ray process gone with the sweep however it ends. Sweeps that train cells in this
process are in ``test_sweep_cells.py``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from latentlens.cli import main
from latentlens.sweep import SweepSpec
from latentlens.sweep.reaper import PROC, follow, process_table
from latentlens.training import (
    RunDirectory,
    TrainConfig,
    Trainer,
    list_checkpoints,
    model_for_task,
)

BASE = {
    "model": {"d_model": 16, "n_heads": 2, "qk_dim": 8, "v_dim": 8, "d_mlp": 32},
    "train": {"steps": 20, "eval_every": 10, "batch_size": 16, "eval_examples": 32,
              "tracking_examples": 256, "warmup_steps": 2},
}  # fmt: skip


def write_spec(path: Path, axes: dict) -> Path:
    path.write_text(json.dumps({"task": "fuzzy-logic", "base": BASE, "axes": axes}))
    return path


def train_alone(run: Path, config: dict) -> None:
    """Train ``config`` in this process on one thread, as a Ray worker does (the same
    summation order, so the same floats)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        Trainer.create(run, config, quiet=True).train()
    finally:
        torch.set_num_threads(threads)


def start_one_cell_sweep(tmp_path: Path, steps: int) -> tuple[subprocess.Popen, Path]:
    """``latentlens sweep`` of one cell (``seed=0``) on one Ray CPU, in a subprocess,
    returned once the cell has written its first checkpoint; and the cell's directory."""
    base = {**BASE, "train": {**BASE["train"], "steps": steps, "eval_every": 50}}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "fuzzy-logic", "base": base,
                                "axes": {"train.seed": [0]}}))  # fmt: skip
    out = tmp_path / "sweep"
    # Ctrl-C reaches it as at a terminal even when the tests run where SIGINT is ignored
    # (a background job of a script inherits SIG_IGN, and Python then never raises
    # KeyboardInterrupt): the child starts with SIGINT's default action.
    sweep = subprocess.Popen(
        [sys.executable, "-m", "latentlens", "sweep", str(spec), "--out", str(out),
         "--num-cpus", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    cell = out / "seed=0"
    deadline = time.time() + 300  # Ray's start on a loaded 2-core machine took over 120 s
    while not list_checkpoints(cell / "checkpoints") and time.time() < deadline:
        time.sleep(0.05)
    assert list_checkpoints(cell / "checkpoints"), "the cell wrote no checkpoint in 300 s"
    return sweep, cell


def test_the_grid_is_every_combination_resolved_before_anything_runs(tmp_path) -> None:
    axes = {"model.attention": ["softmax", "hyla"], "train.seed": [0, 1]}
    spec = SweepSpec.read(write_spec(tmp_path / "s.json", axes))
    cells = spec.cells()
    names = ["attention=softmax,seed=0", "attention=softmax,seed=1", "attention=hyla,seed=0",
             "attention=hyla,seed=1"]  # fmt: skip
    assert [c.name for c in cells] == names
    expected = Trainer.resolve_config(
        "fuzzy-logic",
        model_for_task("fuzzy-logic", None, "transformer", attention="hyla", **BASE["model"]),
        # one thread: Ray gives each cell one core, and the cell records it
        TrainConfig.for_task("fuzzy-logic", seed=1, threads=1, **BASE["train"]),
    )
    assert cells[3].config == expected
    bad = write_spec(tmp_path / "b.json", {"model.attention": ["nope"]})
    with pytest.raises(ValueError, match="nope"):
        SweepSpec.read(bad).cells()
    with pytest.raises(ValueError, match="axis 'seed' must be SECTION.FIELD"):
        SweepSpec.from_dict({"task": "fuzzy-logic", "axes": {"seed": [0]}})


def test_bad_sweep_input_is_one_line(tmp_path, capsys) -> None:
    assert main(["sweep", "--status", str(tmp_path)]) == 2
    assert "holds no sweep" in capsys.readouterr().err
    broken = tmp_path / "s.yaml"
    broken.write_text("task: [unclosed")
    spec = write_spec(tmp_path / "one.json", {"train.seed": [0]})
    assert main(["sweep", str(spec), "--out", str(broken)]) == 2
    assert f"--out {broken} is a file; choose a folder for the sweep" in capsys.readouterr().err
    assert main(["sweep", str(broken)]) == 2
    assert "is not valid yaml" in capsys.readouterr().err
    # spec shapes that once ended in "unexpected error": each names the file and the key
    shapes = {
        '{"task": "fuzzy-logic", "base": {"train": [1]}, "axes": {"train.seed": [0]}}':
            "base.train must map field names to values, not a list",
        '{"task": "fuzzy-logic", "model": [1], "axes": {"train.seed": [0]}}':
            "'model' must be a name (a string), not [1]",
        '{"task": "fuzzy-logic", "axes": {"train.stpes": [1]}}':
            "cell stpes=1: TrainConfig got unknown field(s) ['stpes']",
    }  # fmt: skip
    for text, message in shapes.items():
        spec = tmp_path / "shape.json"
        spec.write_text(text)
        assert main(["sweep", str(spec), "--out", str(tmp_path / "never")]) == 2
        err = capsys.readouterr().err
        assert f"{spec}" in err and message in err and "unexpected" not in err, err
        assert not (tmp_path / "never").exists()
    # a damaged sweep.json: named, never read outside the sweep's folder
    status = tmp_path / "sweep.json"
    damaged = {
        '{"cells": {"a": 5}}': "cell 'a' has no 'state'",
        "[1]": "no 'cells' object",
        '{"cells": {"../x": {"state": "done"}}}': "cell name '../x' is not a folder of the sweep",
    }
    for text, message in damaged.items():
        status.write_text(text)
        assert main(["sweep", "--status", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"{status} is damaged ({message})" in err and "unexpected" not in err, err


def test_a_killed_worker_is_retried_and_its_cell_resumes_bit_equal(tmp_path) -> None:
    sweep, cell = start_one_cell_sweep(tmp_path, steps=600)
    # this sweep's own workers: a pattern alone (pgrep -f ray::train_group) killed the
    # workers of every other Ray sweep on the machine, a long sweep's among them
    worker = b"ray::train_group"
    pids = [pid for pid in descendants(sweep.pid)
            if (PROC / str(pid) / "cmdline").read_bytes().startswith(worker)]  # fmt: skip
    assert pids, "no Ray worker found running the cell"
    killed_at = list_checkpoints(cell / "checkpoints")[-1][0]
    writer = json.loads((cell / ".lock").read_text())["pid"]
    assert writer in pids  # the worker training the cell holds its run's lock
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert sweep.wait(timeout=300) == 0, sweep.stderr.read()[-2000:]
    sweep.stderr.close()
    assert killed_at < 600
    # Ray retried the cell in a new worker, which took over the lock and resumed
    assert json.loads((cell / ".lock").read_text())["pid"] != writer
    whole = tmp_path / "whole"
    train_alone(whole, RunDirectory(cell).read_config())
    assert RunDirectory(cell).read_metrics() == RunDirectory(whole).read_metrics()
    ours = load_file(str(list_checkpoints(cell / "checkpoints")[-1][1]))
    theirs = load_file(str(list_checkpoints(whole / "checkpoints")[-1][1]))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def descendants(pid: int) -> dict[int, int]:
    """``{pid: start time}`` of every living descendant of ``pid``."""
    known = {pid: process_table()[pid][1]}
    follow(known)
    del known[pid]
    return known


def alive(processes: dict[int, int]) -> list[int]:
    table = process_table()
    return [pid for pid, start in processes.items() if table.get(pid, (0, -1))[1] == start]


@pytest.mark.parametrize("ending", ["SIGKILL", "Ctrl-C"])
def test_the_local_ray_instance_dies_with_the_sweep(tmp_path, ending) -> None:
    """A SIGKILL of ``latentlens sweep`` left Ray's dashboard and runtime-env agents running
    under PID 1 (#42): every process the sweep started, Ray's agents and workers among them,
    is gone soon after the sweep, however it ends; Ctrl-C also says how to continue."""
    sweep, cell = start_one_cell_sweep(tmp_path, steps=100_000)
    started = descendants(sweep.pid)
    names = {(PROC / str(pid) / "cmdline").read_bytes() for pid in started}
    assert any(b"DashboardAgent" in n for n in names) and any(b"raylet" in n for n in names)
    sweep.send_signal(signal.SIGKILL if ending == "SIGKILL" else signal.SIGINT)
    code = sweep.wait(timeout=120)
    if ending == "Ctrl-C":
        assert code == 130
        message = sweep.stderr.read()
        assert "the sweep stopped" in message and f"--out {cell.parent} continues it" in message
    sweep.stderr.close()
    deadline = time.time() + 30
    while alive(started) and time.time() < deadline:
        time.sleep(0.2)
    left = {pid: (PROC / str(pid) / "cmdline").read_bytes()[:60] for pid in alive(started)}
    assert not left, f"Ray processes outlived the sweep: {left}"


def test_a_huge_grid_is_refused_at_once_with_its_size(tmp_path, capsys) -> None:
    """A 10^6-cell grid filled 4 GB before printing anything; now it is refused before a
    single cell is built, and --max-cells raises the limit."""
    axes = {"train.seed": list(range(100)), "train.lr": [1e-3] * 100, "model.d_model": [8] * 100}
    spec = write_spec(tmp_path / "spec.json", axes)
    start = time.perf_counter()
    assert main(["sweep", str(spec), "--out", str(tmp_path / "s")]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    assert "grid has 1,000,000 cells, more than 10,000" in err and "--max-cells" in err
    assert not (tmp_path / "s").exists()
    assert main(["sweep", str(spec), "--num-cpus", "0", "--max-cells", "2000000"]) == 2
    assert "num_cpus=0 is invalid" in capsys.readouterr().err


def test_cell_names_stay_inside_the_sweep_folder() -> None:
    from latentlens.sweep.spec import cell_name

    escaped = cell_name({"train.track": ["blocks.0/../../../etc/hook_pattern"]})
    assert "/" not in escaped and escaped != ".."
    assert cell_name({"model.attention": "hyla", "train.seed": 0}) == "attention=hyla,seed=0"
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "axes": {"train.track": [["a/b"], ["a_b"]]}})
    with pytest.raises(ValueError, match="would share the folder"):
        spec.cells()


def test_a_cell_stops_by_the_deadline_checkpointed_and_resumes_bit_equal(
    tmp_path, monkeypatch
) -> None:
    import latentlens.probes  # noqa: F401 - imported before the clock starts, as in a worker
    from latentlens.sweep import run as sweep_run

    base = {**BASE, "train": {**BASE["train"], "steps": 1000, "eval_every": 100}}
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "base": base, "axes": {"train.seed": [0]}})
    config = spec.cells()[0].config
    cell = tmp_path / "cell"
    monkeypatch.setattr(sweep_run, "MINIMUM_SLICE", 0.0)  # a slice of seconds, here
    threads = torch.get_num_threads()
    step = Trainer.train_step

    def slowed(trainer: Trainer) -> torch.Tensor:  # 1,000 steps take 5 s on any machine
        time.sleep(0.005)
        return step(trainer)

    try:
        monkeypatch.setattr(Trainer, "train_step", slowed)
        [paused] = sweep_run.train_group([str(cell)], [config], "cpu", time.time() + 2.0)
        monkeypatch.setattr(Trainer, "train_step", step)
        assert not paused["finished"] and 0 < paused["seconds"] < 30
        stopped_at = list_checkpoints(cell / "checkpoints")[-1][0]
        assert 0 < stopped_at < 1000
        [done] = sweep_run.train_group([str(cell)], [config], "cpu", None)
    finally:
        torch.set_num_threads(threads)
    assert done["finished"] and set(done["metrics"]) == {"train", "test", "ood"}
    whole = tmp_path / "whole"
    train_alone(whole, config)
    assert RunDirectory(cell).read_metrics() == RunDirectory(whole).read_metrics()


def test_the_cells_with_most_steps_left_are_handed_to_ray_first(tmp_path) -> None:
    # a sweep resumed after its time budget: seed 0 half trained, seed 3 nearly done
    from latentlens.sweep.run import most_steps_left_first, seed_groups

    axes = {"model.attention": ["softmax", "hyla"], "train.seed": [0, 1, 2, 3]}
    cells = SweepSpec.read(write_spec(tmp_path / "s.json", axes)).cells()
    out = tmp_path / "sweep"

    def checkpoint(name: str, step: int) -> None:  # its name is all the order reads
        (out / name / "checkpoints").mkdir(parents=True, exist_ok=True)
        (out / name / "checkpoints" / f"step_{step:08d}.safetensors").touch()

    for name, step in (("attention=softmax,seed=0", 10), ("attention=softmax,seed=3", 18),
                       ("attention=softmax,seed=3", 10)):  # fmt: skip
        checkpoint(name, step)
    order = [unit[0].name for unit in most_steps_left_first([[c] for c in cells], out)]
    assert order == [  # 20 steps left each in the grid's order, then 10, then 2
        "attention=softmax,seed=1", "attention=softmax,seed=2", "attention=hyla,seed=0",
        "attention=hyla,seed=1", "attention=hyla,seed=2", "attention=hyla,seed=3",
        "attention=softmax,seed=0", "attention=softmax,seed=3",
    ]  # fmt: skip
    # a seed group counts its member with the most left: softmax's 20 (seeds 1, 2) ties
    # hyla's, then 10 after seeds 1 and 2 are trained that far
    groups = [group[0].name for group in most_steps_left_first(seed_groups(cells), out)]
    assert groups == ["attention=softmax,seed=0", "attention=hyla,seed=0"]
    for seed in (1, 2):
        checkpoint(f"attention=softmax,seed={seed}", 10)
    groups = [group[0].name for group in most_steps_left_first(seed_groups(cells), out)]
    assert groups == ["attention=hyla,seed=0", "attention=softmax,seed=0"]


def test_a_name_template_names_the_cells_folders(tmp_path) -> None:
    axes = {"model.attention": ["softmax", "hyla"], "train.seed": [0, 1]}
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "axes": axes,
                                "name": "{attention}-s{seed}"})  # fmt: skip
    assert [c.name for c in spec.cells()] == ["softmax-s0", "softmax-s1", "hyla-s0", "hyla-s1"]
    wrong = {
        "{attention}-s{sed}": "uses {sed}, which is no axis's field (a template names fields "
        "alone, without . or [ ]); the axes' fields: attention, seed",
        "{attention": "is not a template",
    }
    for name, message in wrong.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            SweepSpec.from_dict({"task": "fuzzy-logic", "axes": axes, "name": name})
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "axes": axes,
                                "name": "{attention}"})  # fmt: skip
    with pytest.raises(ValueError, match="use every axis in the name"):
        spec.cells()


def test_without_an_address_the_instance_is_a_new_local_one(monkeypatch) -> None:
    """Ray's default (address None) joins a cluster that `ray start` left running on the
    machine, and then refuses the sweep's num_cpus: a sweep without --address (nor
    RAY_ADDRESS) asks for a new local instance."""
    from latentlens.sweep.reaper import ray_instance

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def is_initialized(self) -> bool:
            return False

        def init(self, **init) -> None:
            self.calls.append(init)

        def shutdown(self) -> None:
            pass

    ray = Recorder()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with ray_instance(ray, num_cpus=2):
        pass
    with ray_instance(ray, address="10.0.0.1:6379"):
        pass
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")  # Ray reads it itself
    with ray_instance(ray, num_cpus=2):
        pass
    assert [call.get("address") for call in ray.calls] == ["local", "10.0.0.1:6379", None]
    assert ray.calls[0]["num_cpus"] == 2


def test_status_tells_a_running_sweep_from_an_interrupted_one(tmp_path, capsys) -> None:
    """A driver killed with its machine leaves sweep.json saying "running": --status
    reads the kernel's locks instead, the sweep folder's (held by the driver) and each
    cell's run's (held by its trainer)."""
    from latentlens.training.run_lock import RunLock

    out = tmp_path / "sweep"
    recorded = {"a": "running", "b": "queued", "c": "done", "d": "paused"}
    for name in recorded:
        (out / name).mkdir(parents=True)
    (out / "sweep.json").write_text(
        json.dumps({"cells": {name: {"state": state} for name, state in recorded.items()}})
    )

    def shown() -> tuple[list[str], str]:
        assert main(["sweep", "--status", str(out)]) == 0
        lines = capsys.readouterr().out.splitlines()
        return [line.split()[1] for line in lines[1:5]], lines[-1]

    states, last = shown()  # nobody holds a lock: the driver is gone
    assert states == ["stopped", "stopped", "done", "paused"]
    assert last == (f"no sweep is running in {out}: the command that started it continues "
                    "the stopped cells from their checkpoints")  # fmt: skip
    with RunLock(out):  # the driver is alive; no trainer holds a's run (between slices)
        assert shown() == (["queued", "queued", "done", "paused"],
                           "4 cells: 1 done, 0 failed, 3 not finished")  # fmt: skip
        with RunLock(out / "a"):
            assert shown()[0] == ["running", "queued", "done", "paused"]
        # a second sweep into the same folder is refused in one line, naming the first
        spec = write_spec(tmp_path / "spec.json", {"train.seed": [0]})
        assert main(["sweep", str(spec), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out} is being swept by " in err and f"PID {os.getpid()}" in err, err
        assert len(err.strip().splitlines()) == 1
    assert json.loads((out / "sweep.json").read_text())["cells"]["a"] == {"state": "running"}


def test_a_cell_counts_as_running_while_its_run_is_locked(tmp_path) -> None:
    """--status said "running" for every cell Ray had not yet started; now a cell is
    running while a process holds its run's lock (the kernel's table of locks), queued
    otherwise, a paused run with its config and checkpoints among them."""
    from latentlens.sweep.run import Cell, _mark_running
    from latentlens.training.run_lock import RunLock, being_written

    cells = [Cell(name, {}, {}) for name in ("writing", "paused", "new")]
    for name in ("writing", "paused"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    states = {cell.name: {"state": "queued"} for cell in cells}
    with RunLock(tmp_path / "writing"):
        assert being_written(tmp_path / "writing") is True
        assert being_written(tmp_path / "paused") is False
        assert _mark_running(tmp_path, [cells], states) == ["writing step 0"]
    assert [state["state"] for state in states.values()] == ["running", "queued", "queued"]
    assert json.loads((tmp_path / "sweep.json").read_text())["cells"] == states
    assert being_written(tmp_path / "writing") is False  # released
    assert being_written(tmp_path / "gone") is None


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_dead_address_is_a_named_error_within_15_seconds(tmp_path, capsys, address) -> None:
    """Round three (#71): --address 127.0.0.1:1 hung for over 150 s in Ray's retries and
    ray://127.0.0.1:1 took 40 s. Only loopback ports where nothing listens are targets."""
    spec = write_spec(tmp_path / "spec.json", {"train.seed": [0]})
    start = time.monotonic()
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--address", address]) == 2
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--address {address}: nothing answers there" in err


def test_addresses_that_are_not_rays_are_named() -> None:
    from latentlens.sweep.address import host_and_port

    assert host_and_port("ray://10.0.0.2:10001") == ("10.0.0.2", 10001)
    assert host_and_port("head:6379") == ("head", 6379) and host_and_port("auto") is None
    with pytest.raises(ValueError, match="has no port"):
        host_and_port("head")
    with pytest.raises(ValueError, match="is not a Ray address"):
        host_and_port("http://head:80")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{seed:>1000000000}", "width 1,000,000,000 .* is over 64"),
        ("{seed.__class__.__mro__}", r"uses \{seed.__class__.__mro__\}, which is no axis's"),
        ("{seed[0]}", "which is no axis's field"),
        ("{seed!r}", "is not a field with a plain format"),
        ("{seed:{seed}}", "is not a field with a plain format"),
        ("{seed:.99f}", "precision 99"),
    ],
)
def test_name_templates_take_fields_and_bounded_formats_alone(template, message) -> None:
    """Round three (#71): a width of a billion grew to 3.1 GB, attribute access was
    accepted; both are refused when the spec is read."""
    with pytest.raises(ValueError, match=message):
        SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "name": template,
                             "axes": {"train.seed": [0]}})  # fmt: skip
    named = SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "name": "{seed:03d}-{lr:.0e}",
                                 "axes": {"train.seed": [7], "train.lr": [1e-3]}})  # fmt: skip
    assert [cell.name for cell in named.cells()] == ["007-1e-03"]


def test_every_number_of_a_spec_is_checked_before_ray_starts(tmp_path, capsys, monkeypatch) -> None:
    """Sizes beyond 2^31 - 1 are refused as the configs resolve, and a local sweep's cells
    must fit this machine's memory, as `latentlens train` checks (d_model 1e18 failed inside
    a Ray worker; steps 10^12 trained): all before Ray is imported."""
    from latentlens.sweep import run as sweep_run

    monkeypatch.setattr(sweep_run, "require_ray", lambda: pytest.fail("Ray was started"))
    for axis, value, message in (
        ("train.steps", 10**12, "TrainConfig.steps=1,000,000,000,000 is invalid: at most"),
        ("model.d_model", 2**63, "d_model=9,223,372,036,854,775,808 is invalid: at most"),
        ("model.d_mlp", 2**30, "cell d_mlp=1073741824: the model does not fit"),
    ):
        spec = write_spec(tmp_path / "spec.json", {axis: [value]})
        assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_a_model_far_larger_than_its_task_needs_is_named(tmp_path, capsys) -> None:
    """--n-layers 20000 started a 60M-parameter run on a tiny task without a word (#71): a
    model over 100 times its task's reference is named before it is built (here one that
    then does not fit, refused at once)."""
    from latentlens.training import TrainConfig, Trainer, model_for_task
    from latentlens.training.notes import size_notes

    assert main(["train", "--d-mlp", str(2**27), "--device", "cpu", "--quiet",
                 "--run-dir", str(tmp_path / "run")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "times the reference's 151,009 for fuzzy-logic: check --n-layers" in err
    assert "the model does not fit" in err
    config = Trainer.resolve_config("fuzzy-logic", model_for_task("fuzzy-logic", n_layers=300),
                                    TrainConfig.for_task("fuzzy-logic"))  # fmt: skip
    assert "149 times the reference's" in size_notes(config)[0]
    reference = Trainer.resolve_config("fuzzy-logic", model_for_task("fuzzy-logic"),
                                       TrainConfig.for_task("fuzzy-logic"))  # fmt: skip
    assert size_notes(reference) == []

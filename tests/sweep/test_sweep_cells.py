"""`latentlens sweep` training cells, in this process, on one local Ray instance of 2 CPUs
that these tests share (``one_ray_instance``): a sweep joins the instance running in its
process instead of starting its own. Starting and stopping a sweep's own instance, however
the sweep ends, is tested in ``test_sweep.py``, each in a subprocess."""

from __future__ import annotations

import json
import re

import pytest

from latentlens.cli import main
from latentlens.training import RunDirectory

from .test_sweep import BASE, train_alone, write_spec

pytestmark = pytest.mark.usefixtures("one_ray_instance")


def test_a_sweep_on_local_ray_runs_skips_and_reports(tmp_path, capsys) -> None:
    spec = write_spec(tmp_path / "spec.json",
                      {"model.attention": ["softmax", "hyla"], "train.seed": [0, 1]})  # fmt: skip
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2"]) == 0
    printed = capsys.readouterr().out
    assert "4 cells: 4 done, 0 failed, 0 not finished" in printed
    # progress while it runs, the metrics once, in the closing table under its headline:
    # fuzzy logic's held-out combinations (the paper's OOD), not the never-seen terms
    row = next(line for line in printed.splitlines() if line.startswith("attention=hyla,seed=1 "))
    assert re.search(r"done\s+20\s+\d+\.\d\s+test r2 -?\d+\.\d{3}$", row), row
    lines = printed.splitlines()
    assert sum("attention=hyla,seed=1" in line and "r2" in line for line in lines) == 1
    assert "[" in next(line for line in lines if line.endswith("attention=hyla,seed=1: done"))
    for name in ("attention=softmax,seed=0", "attention=hyla,seed=1"):
        records = RunDirectory(out / name).read_metrics()
        assert records[-1]["step"] == 20
    # the same cell trained alone gives the same metrics (one core each, as Ray ran it)
    alone = tmp_path / "alone"
    train_alone(alone, RunDirectory(out / "attention=hyla,seed=1").read_config())
    assert (
        RunDirectory(alone).read_metrics()
        == RunDirectory(out / "attention=hyla,seed=1").read_metrics()
    )
    before = (out / "attention=softmax,seed=0" / "metrics.jsonl").read_text()
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2"]) == 0
    assert "4 of 4 cells found finished" in capsys.readouterr().out
    assert (out / "attention=softmax,seed=0" / "metrics.jsonl").read_text() == before
    assert main(["sweep", "--status", str(out)]) == 0
    status = capsys.readouterr().out.splitlines()
    assert status[0].split() == ["cell", "state", "step", "train", "s", "headline"]
    row = next(line for line in status if line.startswith("attention=hyla,seed=0 "))
    assert row.split()[1:3] == ["done", "20"] and row.split()[4] == "test"
    seconds = json.loads((out / "sweep.json").read_text())["cells"]["attention=hyla,seed=0"]
    assert row.split()[3] == f"{seconds['seconds']:.1f}" and row.endswith("(found finished)")


def test_a_crashed_cell_does_not_stop_the_others(tmp_path, capsys) -> None:
    spec = write_spec(tmp_path / "spec.json", {"train.seed": [0, 1]})
    out = tmp_path / "sweep"
    (out / "seed=1").mkdir(parents=True)
    (out / "seed=1" / "config.json").write_text("[1, 2]")  # a damaged run directory
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2"]) == 1
    printed = capsys.readouterr().out
    assert "seed=0: done" in printed
    assert "seed=1: failed: ValueError:" in printed and "is not a run's config" in printed


def test_seeds_of_a_cell_train_as_one_seed_group(tmp_path, capsys) -> None:
    """--seeds: the seeds of each configuration train as one vmapped group; with dropout
    off each seed's run equals the one the ungrouped sweep trains (up to float order)."""
    base = {**BASE, "model": {**BASE["model"], "attention_dropout": 0.0}}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "fuzzy-logic", "base": base,
                                "axes": {"model.attention": ["softmax", "hyla"],
                                         "train.seed": [0, 1]}}))  # fmt: skip
    grouped, apart = tmp_path / "grouped", tmp_path / "apart"
    assert main(["sweep", str(spec), "--out", str(grouped), "--num-cpus", "2", "--seeds"]) == 0
    assert "4 cells to train as 2 Ray tasks" in capsys.readouterr().out
    assert main(["sweep", str(spec), "--out", str(apart), "--num-cpus", "2"]) == 0
    printed = capsys.readouterr().out
    assert "4 cells to train as 4 Ray tasks" in printed and "4 cells: 4 done" in printed
    # Softmax differs by float summation order alone (measured <= 5e-7 relative). HYLA's
    # ReLU value network amplifies such differences (benchmarks/parity/parity.py's lockstep
    # control: one float32 step in one weight matrix moves its loss by ~1e-4 relative within
    # tens of steps; measured here up to 1.0e-4 over 20 steps), so its tolerance is 2e-3: a
    # grouping bug (another seed's data or weights) would move them by far more.
    for name, rel in (("attention=softmax,seed=0", 1e-5), ("attention=hyla,seed=1", 2e-3)):
        ours = RunDirectory(grouped / name).read_metrics()
        theirs = RunDirectory(apart / name).read_metrics()
        assert [r["step"] for r in ours] == [r["step"] for r in theirs]
        for mine, other in zip(ours, theirs, strict=True):
            assert mine["loss"] == pytest.approx(other["loss"], rel=rel, abs=1e-7)


def test_a_time_budget_pauses_the_cells_and_the_same_command_finishes_them(
    tmp_path, capsys
) -> None:
    spec = write_spec(tmp_path / "spec.json", {"train.seed": [0, 1]})
    out = tmp_path / "sweep"
    # 15 s is below a cell's smallest slice (20 s): no cell starts, each is left for later
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2",
                 "--time-budget", "15"]) == 3  # fmt: skip
    printed = capsys.readouterr().out
    assert "2 cells paused for --time-budget" in printed and "run the same command" in printed
    states = json.loads((out / "sweep.json").read_text())["cells"]
    assert list(states.values()) == [{"state": "paused"}] * 2  # not started: no time
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2"]) == 0
    assert "2 cells: 2 done" in capsys.readouterr().out
    states = json.loads((out / "sweep.json").read_text())["cells"]
    assert all(s["state"] == "done" and s["seconds"] > 0 for s in states.values())
    # each cell's time is its run's own record (every slice's, from step 0)
    for name, state in states.items():
        assert state["seconds"] == round(RunDirectory(out / name).train_seconds(), 1)
    assert main(["sweep", str(spec), "--out", str(out), "--num-cpus", "2", "--time-budget",
                 "0"]) == 2  # fmt: skip
    assert "time_budget=0.0 is invalid" in capsys.readouterr().err

"""Experiment tracking beside metrics.jsonl, offline: TensorBoard event files and an
offline W&B run hold every evaluation's metrics, also across a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from latentlens.cli import main
from latentlens.training import RunDirectory
from latentlens.training.loggers import experiment_loggers, scalars
from tests.training.test_trainer import TINY_FLAGS


def flags(run: Path, steps: int) -> list[str]:
    return ["train", "--task", "fuzzy-logic", "--steps", str(steps), "--eval-every", "10",
            "--quiet", "--device", "cpu", *TINY_FLAGS, "--run-dir", str(run)]  # fmt: skip


def expected(run: Path) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    records = RunDirectory(run).read_metrics()
    for step in sorted({r["step"] for r in records}):
        for name, value in scalars([r for r in records if r["step"] == step]).items():
            series.setdefault(name, []).append((step, value))
    return series


def test_tensorboard_events_hold_every_evaluation_across_a_resume(tmp_path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert main([*flags(run, 20), "--log", "tensorboard"]) == 0
    config = RunDirectory(run).read_config()
    config["train"]["steps"] = 30  # continue the finished run by 10 steps
    RunDirectory(run).write_config(config)
    assert main(["train", "--resume", str(run), "--quiet", "--log", "tensorboard"]) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    for name, points in expected(run).items():
        logged = [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars(name)]
        assert logged == points, name
    assert "config/text_summary" in events.Tags()["tensors"]


class FakeRun:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def log(self, values, step):
        self.calls.append(("log", step, values))

    def finish(self):
        self.calls.append(("finish",))


def test_wandb_gets_the_config_every_evaluation_and_one_id_across_a_resume(
    tmp_path, monkeypatch, capsys
) -> None:
    """The W&B calls, recorded by a stand-in module (wandb itself writes a binary log)."""
    import sys
    import types

    calls: list = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: calls.append(("init", kwargs)) or FakeRun(calls)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: offline
    run = tmp_path / "run"
    assert main([*flags(run, 20), "--log", "wandb"]) == 0
    config = RunDirectory(run).read_config()
    config["train"]["steps"] = 30
    RunDirectory(run).write_config(config)
    assert main(["train", "--resume", str(run), "--quiet", "--log", "wandb"]) == 0
    inits = [c[1] for c in calls if c[0] == "init"]
    assert len(inits) == 2 and inits[0]["id"] == inits[1]["id"]
    assert inits[0]["mode"] == "offline" and inits[0]["resume"] == "allow"
    assert inits[0]["config"]["train"]["steps"] == 20 and inits[1]["config"]["train"]["steps"] == 30
    logged = {(step, name): value for _, step, values in (c for c in calls if c[0] == "log")
              for name, value in values.items()}  # fmt: skip
    wanted = {(step, name): value for name, points in expected(run).items()
              for step, value in points}  # fmt: skip
    assert logged == pytest.approx(wanted)
    assert calls.count(("finish",)) == 2


def test_a_real_offline_wandb_run_is_written(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert main([*flags(run, 10), "--log", "wandb"]) == 0
    (log,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert log.stat().st_size > 0  # `wandb sync` uploads it


def test_an_unknown_tracker_is_named() -> None:
    with pytest.raises(ValueError, match=r"--log mlflow is unknown"):
        experiment_loggers(["mlflow"])

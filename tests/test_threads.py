"""The thread choice: an explicit request wins, then LATENTLENS_THREADS; otherwise the CPUs
the process may use less those busy elsewhere (throughput-only work), and one thread for
tiny work. A training run records its count, chosen without looking at the load, so the
same command gives the same numbers on an idle machine and a busy one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from latentlens import threads
from latentlens.cli import main


@pytest.fixture(autouse=True)
def _restore_threads():
    """Each test starts without LATENTLENS_THREADS (conftest pins it) and leaves torch's
    threads and the variable as it found them (``--threads`` sets the variable)."""
    pinned = os.environ.pop(threads.ENVIRONMENT, None)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
    os.environ.pop(threads.ENVIRONMENT, None)
    if pinned is not None:
        os.environ[threads.ENVIRONMENT] = pinned


def test_a_request_then_the_environment_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "available_cpus", lambda: 8)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cpus: 0)
    assert threads.choose_threads(3) == 3
    monkeypatch.setenv(threads.ENVIRONMENT, "2")
    assert threads.choose_threads() == 2
    assert threads.choose_threads(5) == 5  # the flag beats the environment
    monkeypatch.setenv(threads.ENVIRONMENT, "two")
    with pytest.raises(ValueError, match="LATENTLENS_THREADS='two' is invalid"):
        threads.choose_threads()
    with pytest.raises(ValueError, match="threads=0 is invalid"):
        threads.choose_threads(0)


def test_busy_cpus_and_tiny_work_get_fewer_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cpus: 0)
    assert threads.choose_threads() == 2
    assert threads.choose_threads(work=128 * 16 * 128) == 2  # the demo's model
    assert threads.choose_threads(work=32 * 16 * 16) == 1  # a tiny test model
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cpus: 1)  # a busy neighbour
    assert threads.choose_threads() == 1
    monkeypatch.setattr(threads, "available_cpus", lambda: 16)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cpus: 5)
    assert threads.choose_threads() == 11


def test_busy_elsewhere_is_at_most_all_cpus_but_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "runnable_now", lambda: 9)
    assert threads.busy_elsewhere(4) == 3
    monkeypatch.setattr(threads, "runnable_now", lambda: 1)  # only this process
    assert threads.busy_elsewhere(4) == 0
    assert 0 <= threads.busy_elsewhere(threads.available_cpus()) < threads.available_cpus()


def test_the_work_of_a_config() -> None:
    config = {"model": {"n_ctx": 16, "d_model": 128}, "train": {"batch_size": 128}}
    assert threads.work_of(config) == 128 * 16 * 128
    seq2seq = {"model": {"n_ctx_source": 40, "d_model": 64}, "train": {"batch_size": 64}}
    assert threads.work_of(seq2seq) == 64 * 40 * 64
    assert threads.work_of({"model": {}, "train": {}}) is None


def test_the_threads_flag_sets_torchs_threads(capsys) -> None:
    assert main(["--threads", "1", "inspect", "--attention", "softmax", "--device", "cpu"]) == 0
    assert torch.get_num_threads() == 1
    assert main(["--threads", "0", "inspect"]) == 2
    assert "--threads 0 is invalid" in capsys.readouterr().err
    assert main(["--threads", "100000", "inspect"]) == 2  # OpenMP would crash
    assert "--threads 100000 is invalid: give an integer from 1 to 1024" in capsys.readouterr().err


def test_a_runs_thread_count_ignores_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "available_cpus", lambda: 8)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cpus: 7)  # a busy machine
    assert threads.choose_threads() == 1  # throughput-only work steps aside
    assert threads.run_threads() == 8  # a run's numbers do not
    assert threads.run_threads(work=threads.SMALL_WORK - 1) == 1
    monkeypatch.setenv(threads.ENVIRONMENT, "3")
    assert threads.run_threads() == 3


def train_command(run: Path) -> list[str]:
    # batch 32 x 16 positions x width 128 = SMALL_WORK: a run that takes every CPU
    return [sys.executable, "-m", "latentlens", "train", "--task", "fuzzy-logic",
            "--attention", "hyla", "--batch-size", "32", "--steps", "10", "--eval-every", "5",
            "--eval-examples", "64", "--device", "cpu", "--quiet", "--seed", "5",
            "--run-dir", str(run)]  # fmt: skip


@pytest.mark.skipif(threads.available_cpus() < 2, reason="one CPU: every choice is 1 thread")
def test_the_same_command_gives_the_same_metrics_idle_and_beside_busy_neighbours(
    tmp_path: Path,
) -> None:
    """Before runs recorded their count, the busy run chose fewer threads than the idle one
    and its metrics differed in the 7th digit (float sums split another way)."""
    env = {k: v for k, v in os.environ.items() if k not in (threads.ENVIRONMENT, "OMP_NUM_THREADS")}
    subprocess.run(train_command(tmp_path / "idle"), env=env, check=True, timeout=300)
    spin = "import time\nend = time.time() + 300\nwhile time.time() < end: pass"
    # one CPU kept busy: enough for the old load-adaptive choice to take one thread fewer
    neighbours = [subprocess.Popen([sys.executable, "-c", spin])]
    try:
        time.sleep(0.5)  # the neighbours are running when the run chooses
        assert threads.busy_elsewhere(threads.available_cpus()) >= 1
        subprocess.run(train_command(tmp_path / "busy"), env=env, check=True, timeout=300)
    finally:
        for neighbour in neighbours:
            neighbour.kill()
            neighbour.wait()
    idle, busy = (json.loads((tmp_path / name / "config.json").read_text())
                  for name in ("idle", "busy"))  # fmt: skip
    assert idle["train"]["threads"] == busy["train"]["threads"] == threads.available_cpus()
    assert (tmp_path / "idle" / "metrics.jsonl").read_text() == (
        tmp_path / "busy" / "metrics.jsonl"
    ).read_text()


def test_a_resumed_run_computes_with_its_recorded_threads(tmp_path: Path, capsys) -> None:
    run = str(tmp_path / "r")
    flags = ["--task", "fuzzy-logic", "--attention", "linear", "--d-model", "16", "--steps",
             "2", "--eval-every", "2", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main(["--threads", "1", "train", *flags, "--run-dir", run]) == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["train"]["threads"] == 1
    assert main(["--threads", "2", "train", "--resume", run, "--quiet"]) == 0
    assert torch.get_num_threads() == 1  # the recorded count, not the flag
    assert "computes with the 1 thread(s) it was started with" in capsys.readouterr().err

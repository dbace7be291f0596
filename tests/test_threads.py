"""The thread choice: an explicit request wins, then LATENTLENS_THREADS; otherwise the CPUs
the process may use less those busy elsewhere, and one thread for tiny work."""

from __future__ import annotations

import os

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

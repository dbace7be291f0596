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
from latentlens.training.step_setup import cpp_compiler

pytestmark = pytest.mark.usefixtures("unpinned_threads")


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
    monkeypatch.setattr(threads, "runnable_elsewhere_now", lambda: 8)
    assert threads.busy_elsewhere(4) == 3
    monkeypatch.setattr(threads, "runnable_elsewhere_now", lambda: 0)  # only this process
    assert threads.busy_elsewhere(4) == 0
    assert 0 <= threads.busy_elsewhere(threads.available_cpus()) < threads.available_cpus()


def test_the_work_of_a_config() -> None:
    config = {"model": {"n_ctx": 16, "d_model": 128}, "train": {"batch_size": 128}}
    assert threads.work_of(config) == 128 * 16 * 128
    seq2seq = {"model": {"n_ctx_source": 40, "d_model": 64}, "train": {"batch_size": 64}}
    assert threads.work_of(seq2seq) == 64 * 40 * 64
    assert threads.work_of({"model": {}, "train": {}}) is None
    # narrow outputs leave the layers' width; a vocabulary's logits at every target
    # position count where wider (the fusion notebook's model: its training cell 1.3x as
    # fast on 2 threads as on 1, idle, on a 2-core Zen 3, and its counts agree)
    config["model"]["d_output"] = 8
    assert threads.work_of(config) == 128 * 16 * 128
    translation = {"model": {"n_ctx_source": 21, "n_ctx_target": 24, "d_model": 32,
                             "vocab_size": 343}, "train": {"batch_size": 64}}  # fmt: skip
    assert threads.work_of(translation) == 64 * 24 * 343 > threads.SMALL_WORK > 64 * 21 * 32


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
    # batch 128 x 16 positions x width 128 = 4 x SMALL_WORK: a run that takes every CPU
    return [sys.executable, "-m", "latentlens", "train", "--task", "fuzzy-logic",
            "--attention", "softmax", "--steps", "10", "--eval-every", "5",
            "--eval-examples", "64", "--tracking-examples", "256", "--device", "cpu", "--quiet",
            "--seed", "5",
            "--run-dir", str(run)]  # fmt: skip


@pytest.mark.skipif(threads.available_cpus() < 2, reason="one CPU: every choice is 1 thread")
def test_the_same_command_gives_the_same_metrics_idle_and_beside_busy_neighbours(
    tmp_path: Path,
) -> None:
    """The run finds that its step computes the same gradients on 1 and 2 threads, records
    both and follows the load; beside a busy neighbour it takes fewer threads than idle,
    and its metrics are the idle run's to the last digit. Each path that follows the load
    settles its counts and computes alike on each in the test below."""
    env = {k: v for k, v in os.environ.items() if k not in (threads.ENVIRONMENT, "OMP_NUM_THREADS")}
    env["LATENTLENS_PATH"] = "eager"
    subprocess.run(train_command(tmp_path / "idle"), env=env, check=True, timeout=300)
    spin = "import time\nend = time.time() + 300\nwhile time.time() < end: pass"
    # one CPU kept busy: enough for the load-adaptive choice to take one thread fewer
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
    assert idle["train"]["path"] == busy["train"]["path"] == "eager"
    assert idle["train"]["threads"] is None and busy["train"]["threads"] is None
    assert idle["train"]["thread_counts"] == busy["train"]["thread_counts"]
    assert idle["train"]["thread_counts"][:2] == [1, 2]
    assert (tmp_path / "idle" / "metrics.jsonl").read_text() == (
        tmp_path / "busy" / "metrics.jsonl"
    ).read_text()


@pytest.mark.parametrize(
    ("task", "attention", "path"),
    [
        ("fuzzy-logic", "softmax", "eager"),
        ("fuzzy-logic", "linear", "eager"),
        ("fuzzy-logic", "hyla", "eager"),
        ("sraven", "softmax", "eager"),
        ("sraven", "hyla", "eager"),
        ("fuzzy-logic", "hyla", "fused"),
        ("fuzzy-logic", "softmax", "fused-compile"),
        ("sraven", "linear", "fused-compile"),
    ],  # fmt: skip
)
def test_one_and_two_threads_train_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str, attention: str, path: str
) -> None:
    """The seeded command on 1 and on 2 threads: every evaluation equal to the last digit,
    eager and on the fused kernels, compiled or not (PyTorch's own layer-norm and softmax
    backward and the gather of relative positions once made eager differ in the 7th; the
    kernels' sums cut by thread, and inductor's bias sums, the fused paths). Without a
    count, a run on the fused kernels checks its step, records the counts that agree and
    computes the same numbers (the compiled fuzzy-logic model is the busy-neighbour test's:
    that test's compiled case, 123 s in CI, asked nothing more of it)."""
    if path != "eager" and cpp_compiler() is None:
        pytest.skip("the fused paths need a C compiler")
    monkeypatch.setenv("LATENTLENS_PATH", path)
    flags = ["train", "--task", task, "--attention", attention, "--steps", "8",
             "--eval-every", "4", "--eval-examples", "128", "--tracking-examples", "256",
             "--warmup-steps", "4",
             "--device", "cpu", "--quiet"]  # fmt: skip
    for count in (1, 2):
        assert main(["--threads", str(count), *flags, "--run-dir", str(tmp_path / str(count))]) == 0
    configs = [json.loads((tmp_path / str(c) / "config.json").read_text()) for c in (1, 2)]
    assert [c["train"]["path"] for c in configs] == [path, path]
    one, two = ((tmp_path / str(c) / "metrics.jsonl").read_text() for c in (1, 2))
    assert one == two and one.count("\n") >= 3 * 2  # evaluations at steps 0, 4 and 8
    if path != "eager" and threads.available_cpus() > 1:
        monkeypatch.delenv(threads.ENVIRONMENT)  # set by --threads: the run settles its own
        assert main([*flags, "--run-dir", str(tmp_path / "settled")]) == 0
        settled = json.loads((tmp_path / "settled" / "config.json").read_text())["train"]
        assert settled["path"] == path and settled["threads"] is None
        assert settled["thread_counts"][:2] == [1, 2]
        assert (tmp_path / "settled" / "metrics.jsonl").read_text() == one


def test_a_run_follows_the_load_within_its_agreeing_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    from latentlens.training import thread_choice

    monkeypatch.setattr(thread_choice, "available_cpus", lambda: 8)
    assert thread_choice.candidate_counts() == (1, 2, 4, 8)
    assert thread_choice.candidate_counts(6) == (1, 2, 4, 6)
    monkeypatch.setattr(thread_choice, "busy_elsewhere", lambda cpus: 5)  # 3 free
    assert thread_choice.start_threads((1, 2, 4, 8)) == 2
    monkeypatch.setattr(thread_choice, "busy_elsewhere", lambda cpus: 0)
    assert thread_choice.start_threads((1, 2, 4, 8)) == 8
    assert thread_choice.start_threads((1, 2)) == 2


def test_counts_whose_gradients_differ_are_left_out() -> None:
    """PyTorch's own layer norm sums its weight's gradient in one partial per thread: it
    agrees on one count only; latentlens's column sums agree on both."""
    from latentlens.models.layer_norm import LayerNorm
    from latentlens.training.thread_choice import agreeing_thread_counts

    class Objective(torch.nn.Module):
        def __init__(self, model: torch.nn.Module, task: object) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: torch.Tensor) -> torch.Tensor:
            return (self.model(batch) * batch.flip(0)).sum()

    torch.manual_seed(0)
    batch = torch.randn(2048, 128)
    theirs, ours = torch.nn.LayerNorm(128), LayerNorm(128)
    assert agreeing_thread_counts(theirs, Objective, None, batch, 0.0, (1, 2)) == (1,)
    assert agreeing_thread_counts(ours, Objective, None, batch, 0.0, (1, 2)) == (1, 2)


def test_a_resumed_run_computes_with_its_recorded_threads(tmp_path: Path, capsys) -> None:
    run = str(tmp_path / "r")
    flags = ["--task", "fuzzy-logic", "--attention", "linear", "--d-model", "16", "--steps",
             "2", "--eval-every", "2", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main(["--threads", "1", "train", *flags, "--run-dir", run]) == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["train"]["threads"] == 1
    assert main(["--threads", "2", "train", "--resume", run, "--quiet"]) == 0
    assert torch.get_num_threads() == 1  # the recorded count, not the flag
    assert "computes with the 1 thread(s) it was started with" in capsys.readouterr().err

"""The worker beside a command (latentlens.side_process): it runs jobs in another process,
hands back their results and errors, ignores Ctrl-C, and is stopped at once when the
command fails; and a demo model probed there gives the same numbers as here."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch

from latentlens.probes.run import probe_run
from latentlens.reports.demo_runs import SIZES, copy_zoo_run, leave_a_cpu, live_trainer
from latentlens.side_process import SideProcess, SideProcessDied
from latentlens.threads import ENVIRONMENT, available_cpus


def test_jobs_run_in_another_process_and_hand_back_results_and_errors() -> None:
    with SideProcess() as side:
        assert side.result(side.submit(os.getpid)) != os.getpid()
        # Ctrl-C reaches the whole process group; the command, not the worker, handles it
        assert side.result(side.submit(signal.getsignal, (signal.SIGINT,))) == signal.SIG_IGN
        failed = side.submit(int, ("seven",))
        with pytest.raises(ValueError, match="seven"):
            side.result(failed)
        called = []
        side.result(side.submit(abs, (-3,), callback=called.append))
    assert called == [3]  # the callback had the result


def test_a_worker_that_dies_mid_job_is_an_error_not_a_wait() -> None:
    started = time.perf_counter()
    died = pytest.raises(SideProcessDied, match="stopped before finishing its job")
    with died, SideProcess() as side:
        side.result(side.submit(os._exit, (9,)))  # as the OOM killer would
    assert time.perf_counter() - started < 20
    # also when the block never asks for the result
    with pytest.raises(SideProcessDied), SideProcess() as side:
        side.submit(os._exit, (9,))


def test_a_block_that_submits_nothing_starts_no_process() -> None:
    with SideProcess():
        assert multiprocessing.active_children() == []
    assert multiprocessing.active_children() == []


def test_a_failing_command_stops_the_worker_at_once() -> None:
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="the command failed"), SideProcess() as side:
        worker = side.result(side.submit(os.getpid))
        side.submit(time.sleep, (60,))  # a job nobody will read
        raise RuntimeError("the command failed")
    assert time.perf_counter() - started < 20  # not the job's 60 s
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)  # stopped and reaped


def test_a_zoo_model_probed_beside_gives_the_numbers_it_gives_here(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))  # here and in the worker
    here, beside = tmp_path / "here", tmp_path / "beside"
    for run in (here, beside):
        copy_zoo_run("fuzzy-logic-a1/hyla/s0", run)
    # probe_run(run, examples, embedding, checkpoint, device, quiet, evaluation_examples)
    args = (128, "pca", None, "cpu", True, 128)
    results = probe_run(here, *args)
    with SideProcess() as side:
        results_beside = side.result(side.submit(probe_run, (beside, *args)))
    assert json.dumps(results_beside) == json.dumps(results)
    assert (beside / "probes" / "results.json").read_bytes() == (
        here / "probes" / "results.json"
    ).read_bytes()


def test_the_live_run_leaves_a_cpu_to_the_side_process(tmp_path, monkeypatch) -> None:
    """Its recorded counts give the same numbers: it takes one below the free CPUs. A run
    whose numbers need a recorded count of every CPU keeps it, and gets no side process."""
    if available_cpus() < 2:
        pytest.skip("one CPU: nothing to leave")
    monkeypatch.delenv(ENVIRONMENT, raising=False)  # the run chooses, as the demo's does
    trainer = live_trainer(tmp_path / "hyla", "hyla", SIZES["small"], 2, "cpu", True, 2024)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(available_cpus())
        assert trainer.train_cfg.thread_counts[:2] == (1, 2)  # the demo's HYLA step agrees
        assert leave_a_cpu(trainer)
        assert torch.get_num_threads() in trainer.train_cfg.thread_counts
        assert torch.get_num_threads() < available_cpus()
        trainer.train_cfg = replace(trainer.train_cfg, thread_counts=(), threads=available_cpus())
        assert not leave_a_cpu(trainer)
        trainer.train_cfg = replace(trainer.train_cfg, threads=1)
        assert leave_a_cpu(trainer)
        assert leave_a_cpu(None)  # a finished run trains nothing
    finally:
        torch.set_num_threads(before)


STOPPED_MID_JOB = """
import time
from latentlens.progress import progress_bar
from latentlens.side_process import SideProcess

def job():
    with progress_bar(total=1, disable=True):  # tqdm's lock: a semaphore in the worker
        time.sleep(60)

if __name__ == "__main__":
    try:
        with SideProcess() as side:
            side.submit(job)
            time.sleep(3)
            raise RuntimeError
    except RuntimeError:
        print("stopped")
"""


def test_a_stopped_worker_releases_what_it_holds(tmp_path) -> None:
    """Stopped mid-job, the worker unwinds: no 'leaked semaphore' warning after Ctrl-C."""
    script = tmp_path / "stop.py"
    script.write_text(STOPPED_MID_JOB)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr[-2000:]
    assert "leaked" not in done.stderr, done.stderr[-2000:]

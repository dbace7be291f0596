"""A run's thread count follows the machine's load while it runs: down when neighbours
arrive and stay, up when they leave, not for a blip; within the counts whose step computes
the same numbers, so a run that switches every step computes, to the last digit, what a
run on one thread computes."""

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
from latentlens.training import loop
from latentlens.training.load_following import LoadFollower
from latentlens.training.step_setup import cpp_compiler
from latentlens.training.thread_choice import fitting_count

pytestmark = pytest.mark.usefixtures("unpinned_threads")


class Scripted:
    """A clock that advances a second a call, and the other processes' runnable threads
    read from ``readings`` in turn (the last one repeated)."""

    def __init__(self, readings: list[int | None]) -> None:
        self.readings, self.now = readings, 0.0

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def read(self) -> int | None:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def follower(readings: list[int | None], counts=(1, 2), cpus=2, window=3) -> LoadFollower:
    script = Scripted(readings)
    return LoadFollower(counts, every=1.0, window=window, read=script.read,
                        clock=script.clock, cpus=cpus)  # fmt: skip


def test_the_largest_count_that_fits_beside_the_others() -> None:
    assert fitting_count((1, 2, 4, 8), cpus=8, busy=0) == 8
    assert fitting_count((1, 2, 4, 8), cpus=8, busy=5) == 2  # 3 free
    assert fitting_count((1, 2), cpus=2, busy=2) == 1  # none free: still one
    assert fitting_count((2, 4), cpus=8, busy=7) == 2  # none fits: the smallest


def test_neighbours_that_stay_move_the_count_and_a_blip_does_not() -> None:
    torch.set_num_threads(2)
    # idle, a one-reading blip, then two busy threads elsewhere for good; a reading a step
    run = follower([0, 2, 0, 0, 2, 2])
    for step in range(1, 6):  # windows (0, 2, 0), (2, 0, 0), (0, 0, 2): a median of 0
        run.after_step(step)
    assert torch.get_num_threads() == 2 and run.switches == []
    run.after_step(6)  # (0, 2, 2)
    assert torch.get_num_threads() == 1 and run.switches == [(6, 1)]
    # the neighbours leave: back up once a full window of new readings says so
    run.read = Scripted([0]).read
    for step in (7, 8):
        run.after_step(step)
    assert torch.get_num_threads() == 1
    run.after_step(9)
    assert torch.get_num_threads() == 2 and run.switches == [(6, 1), (9, 2)]


def test_no_reading_before_its_time_and_none_where_the_os_says_nothing() -> None:
    torch.set_num_threads(2)
    script = Scripted([2])
    run = LoadFollower((1, 2), every=5.0, window=1, read=script.read, clock=script.clock, cpus=2)
    for step in range(4):  # the clock at 2, 3, 4, 5 s: the first reading is due at 6
        run.after_step(step)
    assert torch.get_num_threads() == 2
    run.after_step(4)
    assert torch.get_num_threads() == 1
    silent = follower([None], window=1)
    for step in range(5):
        silent.after_step(step)
    assert torch.get_num_threads() == 1 and silent.switches == []
    with pytest.raises(ValueError, match="thread_counts is empty"):
        LoadFollower(())


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="Linux's /proc says the load")
def test_a_spinning_neighbour_is_read_and_this_process_is_not() -> None:
    assert threads.runnable_here() >= 1  # the thread asking
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    neighbour = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)
        assert threads.runnable_elsewhere_now() >= 1
    finally:
        neighbour.kill()
        neighbour.wait()


@pytest.mark.skipif(threads.available_cpus() < 2, reason="one CPU: every run keeps 1 thread")
@pytest.mark.parametrize(("path", "attention"), [("eager", "hyla"), ("fused-compile", "softmax")])
def test_a_run_switching_threads_every_step_computes_what_one_thread_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, attention: str
) -> None:
    """The run's follower reads, after every step, a load that asks for the count it is not
    computing with, so the run computes on 2 threads and 1 in turn: every evaluation equals
    the run's on one thread (``--threads 1``), the fused-compile one (the default on the
    CPU) too."""
    if path != "eager" and cpp_compiler() is None:
        pytest.skip("the fused paths need a C compiler")
    monkeypatch.setenv("LATENTLENS_PATH", path)
    made: list[LoadFollower] = []

    def flipping(counts):
        def read() -> int:  # one thread busy elsewhere while on two, none while on one
            return int(torch.get_num_threads() == 2)

        made.append(LoadFollower(counts, every=0.0, window=1, read=read, cpus=2))
        return made[-1]

    monkeypatch.setattr(loop, "LoadFollower", flipping)
    flags = ["train", "--task", "fuzzy-logic", "--attention", attention, "--steps", "8",
             "--eval-every", "4", "--eval-examples", "128", "--tracking-examples", "256",
             "--warmup-steps", "4", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main([*flags, "--run-dir", str(tmp_path / "following")]) == 0
    os.environ[threads.ENVIRONMENT] = "1"  # as --threads 1: a recorded count, kept
    assert main([*flags, "--run-dir", str(tmp_path / "one")]) == 0
    following, one = (json.loads((tmp_path / n / "config.json").read_text())["train"]
                      for n in ("following", "one"))  # fmt: skip
    assert following["path"] == one["path"] == path
    assert following["thread_counts"][:2] == [1, 2] and one["threads"] == 1
    assert len(made) == 1
    steps, counts = zip(*made[0].switches, strict=True)
    assert steps == tuple(range(1, 9))  # a switch after every step
    assert {counts[0], counts[1]} == {1, 2} and counts[::2] == (counts[0],) * 4
    metrics = [(tmp_path / n / "metrics.jsonl").read_text() for n in ("following", "one")]
    assert metrics[0] == metrics[1] and metrics[0].count("\n") >= 3 * 2  # steps 0, 4 and 8

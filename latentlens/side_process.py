"""One worker process beside this one, for work that need not wait its turn.

``latentlens demo`` probes and draws the zoo's converged models there while it trains its
live model, so that a machine with two CPUs works on both at once (and, beside busy
neighbours, holds a fair share of the CPUs with two processes, not one). Each job computes
exactly what it computes in this process: the same code, and the thread counts the runs
choose for themselves.

The worker is spawned, not forked (a fork copies PyTorch's thread pool and CUDA state,
which do not survive it), ignores Ctrl-C (this process stops it) and is stopped at once
when the caller fails or is interrupted, so that an error or Ctrl-C is not followed by
minutes of work nobody reads.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import signal
from collections.abc import Callable
from types import TracebackType
from typing import Any

from latentlens.threads import available_cpus


def worth_a_side_process() -> bool:
    """Whether this process may run on two CPUs or more (else a side process only waits
    for this one)."""
    return available_cpus() >= 2


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _prepare_worker() -> None:
    """Ctrl-C is for the command, which stops the worker; the stop (SIGTERM) unwinds the
    worker, so that it releases what it holds (tqdm's lock, a semaphore the resource
    tracker would otherwise report leaked)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


class SideProcessDied(RuntimeError):
    """The side process stopped before it finished a job (killed, out of memory)."""


class SideProcess:
    """One spawned worker, started by the first :meth:`submit` (a ``with`` block that
    submits nothing starts nothing). Leaving the block normally waits for the jobs
    submitted; an error or Ctrl-C stops the worker first. A worker that dies is an error
    (:class:`SideProcessDied`), not a wait for a job that will never finish."""

    def __init__(self) -> None:
        self._pool: multiprocessing.pool.Pool | None = None
        self._worker: int | None = None
        self._jobs: list[multiprocessing.pool.AsyncResult] = []

    def submit(
        self,
        function: Callable[..., Any],
        args: tuple = (),
        callback: Callable[[Any], None] | None = None,
    ) -> multiprocessing.pool.AsyncResult:
        """Run ``function(*args)`` in the worker; :meth:`result` of the answer returns its
        result or raises its error. ``callback`` runs here, on another thread, with the
        result."""
        if self._pool is None:
            spawn = multiprocessing.get_context("spawn")
            self._pool = spawn.Pool(1, initializer=_prepare_worker)
            self._worker = self._pool.apply(os.getpid)
        job = self._pool.apply_async(function, args, callback=callback)
        self._jobs.append(job)
        return job

    def result(self, job: multiprocessing.pool.AsyncResult) -> Any:
        """``job``'s result (its error raised here); :class:`SideProcessDied` if the
        worker stops first."""
        self._wait(job)
        return job.get()

    def _wait(self, job: multiprocessing.pool.AsyncResult) -> None:
        while not job.ready():
            job.wait(1.0)
            alive = {child.pid for child in multiprocessing.active_children()}
            if not job.ready() and self._worker not in alive:
                raise SideProcessDied(
                    f"the side process (pid {self._worker}) stopped before finishing its job: "
                    "killed, or out of memory; run the command again"
                )

    def __enter__(self) -> SideProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._pool is None:
            return
        stop = kind is not None
        try:
            if not stop:
                for job in self._jobs:
                    self._wait(job)
        except BaseException:
            stop = True
            raise
        finally:
            if stop:
                self._pool.terminate()
            else:
                self._pool.close()
            self._pool.join()

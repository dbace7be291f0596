"""Which CPU thread counts a training run may compute with, checked rather than assumed.

A float sum split over another number of threads rounds differently, and then a run's
numbers depend on its thread count. Where they do, a run records its count and keeps it
whatever the machine's load (``train.threads``); beside busy neighbours it then
oversubscribes the cores and slows down many times. Where they do not, it may follow the
load, and a busy machine and an idle one compute the same run.

Whether they do is a property of the step's kernels at the run's shapes (how PyTorch and
the BLAS split each reduction over threads), not of the data. So at a new run's start
:func:`agreeing_thread_counts` computes one training step's gradients (clipped as the run
clips them) on a copy of the model at each candidate count and keeps the counts whose
gradients equal one thread's bit for bit. The run records them (``train.thread_counts``),
every start (a resume too) computes with the largest of them that the machine's free CPUs
allow (:func:`start_threads`), and the run follows the load within them while it runs
(:mod:`latentlens.training.load_following`). The eager step and the fused kernels' step,
compiled or not, are checked (the kernels sum in fixed slices whatever the thread count,
:data:`latentlens.kernels.build.SLICES`); a step compiled without the kernels is not
(inductor's own sums split by thread).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch

from latentlens.tasks import Batch, Task
from latentlens.threads import available_cpus, busy_elsewhere


def candidate_counts(cpus: int | None = None) -> tuple[int, ...]:
    """1, 2, 4, ... up to the CPUs this process may run on, and that count itself."""
    cpus = cpus or available_cpus()
    counts = {cpus}
    count = 1
    while count < cpus:
        counts.add(count)
        count *= 2
    return tuple(sorted(counts))


def step_gradients(
    model: torch.nn.Module,
    objective_of: Callable[[torch.nn.Module, Task], torch.nn.Module],
    task: Task,
    batch: Batch,
    grad_clip: float,
    threads: int,
) -> list[torch.Tensor]:
    """The gradients one training step computes on ``threads`` threads, on a copy of
    ``model`` (``objective_of(model, task)`` its loss), with dropout seeded alike and
    clipped to ``grad_clip`` (0: not clipped). The process's RNG and thread count are left
    as they were."""
    before = torch.get_num_threads()
    twin = copy.deepcopy(model).train()
    try:
        torch.set_num_threads(threads)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            loss = objective_of(twin, task)(batch)
            if loss.requires_grad:  # else a traced step has written the gradients
                loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(twin.parameters(), grad_clip)
    finally:
        torch.set_num_threads(before)
    return [p.grad for p in twin.parameters() if p.grad is not None]


def agreeing_thread_counts(
    model: torch.nn.Module,
    objective_of: Callable[[torch.nn.Module, Task], torch.nn.Module],
    task: Task,
    batch: Batch,
    grad_clip: float,
    counts: Sequence[int],
) -> tuple[int, ...]:
    """The counts among ``counts`` (1 first) whose step gradients equal one thread's bit
    for bit (:func:`step_gradients`)."""
    reference = step_gradients(model, objective_of, task, batch, grad_clip, 1)
    agreeing = [1]
    for count in counts:
        if count == 1:
            continue
        found = step_gradients(model, objective_of, task, batch, grad_clip, count)
        if all(torch.equal(a, b) for a, b in zip(reference, found, strict=True)):
            agreeing.append(count)
    return tuple(agreeing)


def fitting_count(thread_counts: Sequence[int], cpus: int, busy: int) -> int:
    """The largest of ``thread_counts`` at most the ``cpus`` that ``busy`` others leave
    free (at least one), else the smallest of them."""
    free = max(1, cpus - busy)
    fitting = [count for count in thread_counts if count <= free]
    return max(fitting) if fitting else min(thread_counts)


def start_threads(thread_counts: Sequence[int], reserved: int = 0) -> int:
    """The largest of a run's agreeing ``thread_counts`` that the CPUs the rest of the
    machine leaves free allow (at least the smallest); ``reserved``: CPUs to leave free
    beside those, for work this command starts next to the run."""
    cpus = available_cpus()
    return fitting_count(thread_counts, cpus, busy_elsewhere(cpus) + reserved)

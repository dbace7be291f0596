"""How many CPU threads a run's PyTorch operations use.

PyTorch starts one intra-op thread per core it sees, whether or not other processes are
busy on them; on a shared machine its threads then wait on each other behind the
neighbours' work, and a run can slow down tens of times. latentlens chooses instead:

1. ``--threads N`` (or ``threads=`` in Python), else ``LATENTLENS_THREADS``, if given;
2. else the CPUs this process may run on (its affinity, not the machine's count), less
   those the rest of the machine keeps busy (:func:`busy_elsewhere`), at least one;
3. capped at one thread for work too small to split (``work`` under
   :data:`SMALL_WORK` elements in the step's widest activation, e.g. the tiny test
   models), where handing rows to other threads costs more than it saves.

Several runs on one machine (``reproduce --jobs``, sweeps) are given one thread each.

That load-adaptive choice is for work whose numbers do not depend on it (inspecting,
probing, the tests). A training run's numbers may (float sums split over another number of
threads round differently). A run whose step computes the same numbers on several counts
follows the load within them, when it starts (:mod:`latentlens.training.thread_choice`)
and while it runs (:mod:`latentlens.training.load_following`). Any other run uses
:func:`run_threads`: the request, else the CPUs this process may run on (1 for work too
small to split), never the load, recorded in the run's config and used again on resume.
Beside a neighbour that starts later, such a run's idle OpenMP threads spin and it slows as
if unchosen; ``OMP_WAIT_POLICY=PASSIVE`` (set before Python starts) keeps it near one
thread's speed then, at a cost when alone (``benchmarks/speed/busy_neighbour.py`` measures
all three).
"""

from __future__ import annotations

import os
import time

ENVIRONMENT = "LATENTLENS_THREADS"
# Below this many elements in a step's widest activation (:func:`work_of`), a second
# thread does not pay: the tiny test models (32 x 16 x 16) run faster on one.
SMALL_WORK = 64 * 1024
# More threads than this is a typo, not a machine: OpenMP crashes on 100,000.
MAX_THREADS = 1024


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def runnable_on_machine() -> int | None:
    """Threads running or ready to run on the machine this instant, this process's
    included (Linux's ``/proc/loadavg``); None elsewhere."""
    try:
        with open("/proc/loadavg") as handle:
            return int(handle.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def runnable_here() -> int | None:
    """This process's threads running or ready to run this instant (Linux's
    ``/proc/self/task``: the calling thread, and OpenMP's workers while they spin after
    a parallel region); None elsewhere."""
    try:
        tasks = list(os.scandir("/proc/self/task"))
    except OSError:
        return None
    running = 0
    for task in tasks:
        try:
            with open(f"{task.path}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # the thread has ended
            continue
        state = stat.rindex(b")") + 2  # the name may hold spaces and parentheses
        running += stat[state : state + 1] == b"R"
    return running


def runnable_elsewhere() -> int | None:
    """Threads of other processes running or ready to run this instant (one reading of
    :func:`runnable_on_machine` less :func:`runnable_here`); None where the OS does not
    say."""
    machine, here = runnable_on_machine(), runnable_here()
    if machine is None or here is None:
        return None
    return max(machine - here, 0)


def runnable_elsewhere_now() -> int | None:
    """:func:`runnable_elsewhere`, the median of a few readings 10 ms apart."""
    readings = []
    for _ in range(5):
        reading = runnable_elsewhere()
        if reading is None:
            return None
        readings.append(reading)
        time.sleep(0.01)
    return sorted(readings)[len(readings) // 2]


def busy_elsewhere(cpus: int) -> int:
    """CPUs the rest of the machine keeps busy now, at most ``cpus - 1``: the threads of
    other processes runnable this instant (:func:`runnable_elsewhere_now`; this process's
    own, OpenMP's spinning workers among them, are not counted), or, where the OS does
    not say, the 1-minute load average (which lags a neighbour that has just started by up
    to a minute)."""
    others = runnable_elsewhere_now()
    if others is None:
        try:
            others = round(os.getloadavg()[0])
        except (AttributeError, OSError):
            return 0
    return min(max(others, 0), cpus - 1)


def choose_threads(requested: int | None = None, work: int | None = None) -> int:
    """The number of intra-op threads (see the module's docstring); ``work``: elements of
    one layer's activations (None: not known, no cap)."""
    if requested is None:
        requested = requested_threads()
    if requested is not None:
        if (isinstance(requested, bool) or not isinstance(requested, int)
                or not 1 <= requested <= MAX_THREADS):  # fmt: skip
            raise ValueError(
                f"threads={requested!r} is invalid: give an integer from 1 to {MAX_THREADS}"
            )
        return requested
    cpus = available_cpus()
    threads = max(1, cpus - busy_elsewhere(cpus))
    if work is not None and work < SMALL_WORK:
        threads = 1
    return threads


def requested_threads() -> int | None:
    """``LATENTLENS_THREADS`` (the CLI's ``--threads`` sets it) as a count; None if unset."""
    value = os.environ.get(ENVIRONMENT)
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_THREADS:
        raise ValueError(
            f"{ENVIRONMENT}={value!r} is invalid: give an integer from 1 to {MAX_THREADS}"
        )
    return int(value)


def run_threads(work: int | None = None) -> int:
    """The thread count a new training run records (see the module's docstring): the
    request (:func:`requested_threads`), else the CPUs this process may run on, or 1 when
    ``work`` (elements of one layer's activations) is under :data:`SMALL_WORK`. The same
    on an idle machine and a busy one."""
    requested = requested_threads()
    if requested is not None:
        return requested
    if work is not None and work < SMALL_WORK:
        return 1
    return available_cpus()


def use_threads(requested: int | None = None, work: int | None = None) -> int:
    """Set torch's intra-op threads to :func:`choose_threads`'s answer; returns it."""
    import torch  # noqa: PLC0415

    threads = choose_threads(requested, work)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def compute_with_threads(threads: int | None) -> None:
    """Set torch's intra-op threads to a run's recorded count (None: a run from before the
    count was recorded, which keeps the process's current setting)."""
    import torch  # noqa: PLC0415

    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def work_of(config: dict) -> int | None:
    """Elements of the widest activation of a training step of a resolved run ``config``,
    for :func:`choose_threads`: a layer's (batch x positions x width) or, where wider, the
    outputs' (batch x output positions x outputs: an encoder-decoder's logits over its
    vocabulary at every target position); None if unknown."""
    model, train = config.get("model", {}), config.get("train", {})
    positions = model.get("n_ctx") or model.get("n_ctx_source")
    width, batch = model.get("d_model"), train.get("batch_size")
    if not all(isinstance(v, int) for v in (positions, width, batch)):
        return None
    outputs = model.get("d_output") or model.get("vocab_size") or 0
    output_positions = model.get("n_ctx_target") or positions
    return batch * max(positions * width, output_positions * outputs)

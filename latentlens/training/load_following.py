"""A run's thread count while it runs, following the machine's load.

A run whose step computes the same numbers on several thread counts records them
(``train.thread_counts``, :mod:`latentlens.training.thread_choice`) and starts on the
largest that the CPUs free at its start allow. Neighbours that arrive later would then
share the cores with all of its threads, which wait on each other behind the neighbours'
work: on a 2-core EPYC, two busy processes arriving beside a fuzzy-logic run slowed it
5.7-7.4x where it kept 2 threads, and 2.3-2.4x where it followed the load
(docs/benchmarks.md, "Neighbours that arrive mid-run"). Neighbours that leave would leave a
run started beside them on fewer threads than it could use.

:class:`LoadFollower` reads between steps, every :data:`EVERY` seconds, how many threads of
other processes are running or ready to run (:func:`latentlens.threads.runnable_elsewhere`:
the machine's runnable threads less this process's, so OpenMP's own spinning workers do not
count), and computes with the largest of the run's counts that fit beside the median of
the last :data:`WINDOW` readings (the smallest where none fits). A neighbour's blip of a
reading or two does not move it; a switch waits for a full window of new readings. The
numbers are those of any of the counts (the run checked that its step computes the same
bits on each), so a run that switches computes what one that never does computes
(``tests/training/test_load_following.py``).

The reading counts runnable threads machine-wide, as the start's does; a run confined to
some of a machine's CPUs (``taskset``) counts the neighbours on the others too.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence

import torch

from latentlens.threads import available_cpus, runnable_elsewhere
from latentlens.training.thread_choice import fitting_count

# Seconds between two readings of the load (one reading: 76-83 us on a 2-core EPYC, 0.03% of
# a run's time)
EVERY = 0.25
# Readings whose median decides the count: a switch follows a change that lasts this many
# readings (1.75 s at EVERY)
WINDOW = 7


class LoadFollower:
    """Sets torch's intra-op threads, between a run's steps, to the largest of the run's
    ``thread_counts`` that the other processes' runnable threads leave room for (module
    docstring). ``read``: the other processes' runnable threads now (None: not known, no
    reading); ``clock``: seconds, monotonic; ``cpus``: the CPUs the run may use."""

    def __init__(
        self,
        thread_counts: Sequence[int],
        every: float = EVERY,
        window: int = WINDOW,
        read: Callable[[], int | None] = runnable_elsewhere,
        clock: Callable[[], float] = time.monotonic,
        cpus: int | None = None,
    ) -> None:
        if not thread_counts:
            raise ValueError("thread_counts is empty: a run that follows the load needs its counts")
        self.thread_counts = tuple(thread_counts)
        self.every, self.read, self.clock = every, read, clock
        self.cpus = cpus or available_cpus()
        self.window = window
        self.readings: deque[int] = deque(maxlen=window)
        self.next_reading = clock() + every
        # (step, threads) at each switch, for whoever watches the run
        self.switches: list[tuple[int, int]] = []

    def after_step(self, step: int) -> None:
        """Read the load if :data:`EVERY` seconds have passed since the last reading, and
        switch where a full window of readings asks for another count (``step``: the
        steps done, recorded with a switch)."""
        now = self.clock()
        if now < self.next_reading:
            return
        self.next_reading = now + self.every
        reading = self.read()
        if reading is None:
            return
        self.readings.append(reading)
        if len(self.readings) < self.window:
            return
        busy = int(statistics.median_low(self.readings))
        wanted = fitting_count(self.thread_counts, self.cpus, busy)
        if wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)
            self.switches.append((step, wanted))
            self.readings.clear()  # the next switch waits for a window of new readings

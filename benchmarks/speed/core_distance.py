"""How far apart this machine's first two cores are right now, and what it does to a step.

    python benchmarks/speed/core_distance.py [--seconds 120] [--step TASK ATTENTION]
        [--steps 15] [--official PATH [--official-steps 5]] [--operators N] [--far-ns 200]
        [--out FILE.json]

A cache line bounced between a thread on each core (an atomic flag, set by one and cleared
by the other, 20,000 times) takes a round trip whose length says where the cores sit: on
one core complex (a shared L3) it is tens of nanoseconds; across dies or sockets hundreds.
On a virtual machine the hypervisor may move the two virtual CPUs between such places
while a run goes on: on the 2-core Zen 4 EPYC of docs/benchmarks.md the round trip went
between about 80 and 350–650 ns every half minute or so, and the fused-compile SRAVEN
step on two threads with it, about 67 against 81 ms.

Without ``--step`` it prints the round trip once a second. With it (``fuzzy-logic`` at T =
16 or ``sraven``), it times ``--steps`` fused-compile steps of the task's reference model on
two threads between two probes of the round trip, again and again, and at the end the step's
median where both probes found the cores near and where both found them far apart
(``--far-ns``); with ``--operators N`` those steps run under ``torch.profiler`` (slower)
and it lists the N operators whose own time grows most from near to far. With ``--official`` (the
official code's checkout, as for ``command_side_by_side.py``) the official jitted step on
two XLA threads takes its turn after each of latentlens's, between probes too: whether the
cores' distance slows one side more than the other. The probe is built with the system's C
compiler, once per process, into a temporary folder. It measures the distance only while the
two cores are otherwise idle: beside a busy step its threads wait for the cores, and the
round trip then reads microseconds (so it runs between timings, never beside them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAR_NS = 200.0  # the 2-core Zen 4's two places: about 80 and about 350 ns
OFFICIAL_SPECS = {"fuzzy-logic": "fuzzy-logic", "sraven": "sraven-default"}  # at our defaults
OFFICIAL_BATCHES = 1_000_000  # the official loader's length: more than any --seconds needs
PROBE_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static _Atomic int flag __attribute__((aligned(64)));
static int trips, cpus[2];
static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
static void *answer(void *unused) {
    pin(cpus[1]);
    for (int i = 0; i < trips; i++) {
        while (atomic_load(&flag) != 1) {}
        atomic_store(&flag, 0);
    }
    return unused;
}
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    cpus[0] = atoi(argv[1]), cpus[1] = atoi(argv[2]), trips = atoi(argv[3]);
    pthread_t other;
    pin(cpus[0]);
    pthread_create(&other, 0, answer, 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < trips; i++) {
        atomic_store(&flag, 1);
        while (atomic_load(&flag) != 0) {}
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(other, 0);
    printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / trips);
    return 0;
}
"""


@cache
def probe() -> Path:
    """The round-trip probe, built once per process with the system's C compiler."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SystemExit("core_distance.py builds a C probe: install gcc (apt install gcc)")
    folder = Path(tempfile.mkdtemp(prefix="core-distance-"))
    (folder / "probe.c").write_text(PROBE_C)
    binary = folder / "probe"
    source = str(folder / "probe.c")
    built = subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary), source],
                           capture_output=True, text=True)  # fmt: skip
    if built.returncode:
        lines = built.stderr.splitlines()
        first = next((line for line in lines if "error" in line), lines[-1] if lines else "")
        raise SystemExit(f"core_distance.py: {compiler} could not build the probe: {first}")
    return binary


def round_trip_ns(trips: int = 20_000) -> float:
    """Nanoseconds a cache line takes to go from this process's first core to its second
    and back (the mean of ``trips``)."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    done = subprocess.run([str(probe()), str(first), str(second), str(trips)],
                          check=True, capture_output=True, text=True)  # fmt: skip
    return float(done.stdout)


@contextlib.contextmanager
def profiled(table: dict[str, float]) -> Iterator[None]:
    """The block under ``torch.profiler``; ``table`` then holds each operator's own
    milliseconds in it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    table.clear()
    table.update({e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()})


def step_by_distance(
    task: str,
    attention: str,
    seconds: float,
    steps: int,
    official: Path | None = None,
    official_steps: int = 5,
    operators: bool = False,
) -> list[dict]:
    """Timings for ``seconds``, each between two probes of the round trip: ``steps``
    fused-compile steps of ``task``'s reference model on two threads (``{"side":
    "latentlens", "round_trip_ns": [before, after], "step_ms": …}``) and, with ``official``
    (the official code's checkout), ``official_steps`` of its jitted step on two XLA
    threads after them (``"side": "official"``). With ``operators``, latentlens's steps run
    under ``torch.profiler`` and each of its timings holds ``"operators_ms"``: every
    operator's own milliseconds a step."""
    import torch

    from latentlens.training import TrainConfig
    from speed.cpu_side_by_side import official_server, task_spec
    from speed.host_share import trainer_for
    from speed.traced_step import WARMUP_STEPS, milliseconds_a_step

    torch.set_num_threads(2)
    trainer = trainer_for(task, attention, TrainConfig.for_task(task).batch_size)
    milliseconds_a_step(trainer, WARMUP_STEPS)
    server = None
    if official is not None:
        spec = {**task_spec(OFFICIAL_SPECS[task], attention), "steps": OFFICIAL_BATCHES}
        server = official_server(official, spec, 2, Path(tempfile.mkdtemp(prefix="spec-")))
        server(official_steps)  # compiled and warm

    table: dict[str, float] = {}

    def ours() -> float:
        with profiled(table) if operators else contextlib.nullcontext():
            step_ms = milliseconds_a_step(trainer, steps)
        for name in table:
            table[name] /= steps
        return step_ms

    sides = {"latentlens": ours}
    if server is not None:
        sides["official"] = lambda: 1e3 / server(official_steps)
    timings = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            before = round_trip_ns()
            for side, timed in sides.items():
                step_ms = timed()
                after = round_trip_ns()
                timing = {"side": side, "round_trip_ns": [before, after], "step_ms": step_ms}
                if side == "latentlens" and operators:
                    timing["operators_ms"] = dict(table)
                timings.append(timing)
                trips = f"round trip {before:5.0f} {after:5.0f} ns"
                print(f"{trips}   {side:10s} step {step_ms:7.2f} ms", flush=True)
                before = after
    finally:
        if server is not None:
            server.close()
    return timings


def place_of(trips: list[float], far_ns: float) -> str | None:
    """``near`` or ``far`` where a timing's two probes (round trips, ns) agree; None where
    they straddle a move of the cores."""
    far = [ns > far_ns for ns in trips]
    return ("far" if all(far) else "near") if all(far) or not any(far) else None


def report(timings: list[dict], far_ns: float) -> None:
    """Each side's median step near and far apart, and latentlens's rate against the
    official step's in each place."""
    medians = {}
    for side in dict.fromkeys(t["side"] for t in timings):
        for place in ("near", "far"):
            times = [t["step_ms"] for t in timings if t["side"] == side
                     and place_of(t["round_trip_ns"], far_ns) == place]  # fmt: skip
            if times:
                medians[side, place] = statistics.median(times)
                print(f"{side}, {place} (round trip {'above' if place == 'far' else 'below'} "
                      f"{far_ns:.0f} ns): step {medians[side, place]:.2f} ms, median of "
                      f"{len(times)}")  # fmt: skip
        if (side, "near") in medians and (side, "far") in medians:
            slower = medians[side, "far"] / medians[side, "near"]
            print(f"{side}: far apart, the step takes {slower:.3f}x as long")
    for place in ("near", "far"):
        if ("official", place) in medians and ("latentlens", place) in medians:
            ratio = medians["official", place] / medians["latentlens", place]
            print(f"{place}: latentlens's step at {ratio:.2f}x the official step's rate")


def operator_growth(timings: list[dict], far_ns: float, rows: int) -> None:
    """The ``rows`` operators whose own time a step grows most from near to far apart
    (medians over each place's timings)."""
    by_place: dict[str, list[dict[str, float]]] = {"near": [], "far": []}
    for timing in timings:
        if "operators_ms" in timing and (place := place_of(timing["round_trip_ns"], far_ns)):
            by_place[place].append(timing["operators_ms"])
    if not (by_place["near"] and by_place["far"]):
        print("operators: no timing both near and far apart; run longer")
        return

    def median_ms(place: str, name: str) -> float:
        return statistics.median(table.get(name, 0.0) for table in by_place[place])

    names = {name for tables in by_place.values() for table in tables for name in table}
    growth = sorted(((median_ms("far", n) - median_ms("near", n), n) for n in names), reverse=True)
    print(f"{'operator (own ms a step, under the profiler)':60s}  near     far    grows")
    for grown, name in growth[:rows]:
        print(f"{name[:60]:60s} {median_ms('near', name):7.3f} {median_ms('far', name):7.3f} "
              f"{grown:+7.3f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--step", nargs=2, metavar=("TASK", "ATTENTION"))
    parser.add_argument("--steps", type=int, default=15, help="steps between two probes")
    parser.add_argument("--far-ns", type=float, default=FAR_NS)
    parser.add_argument("--official", type=Path, help="the official code: time its step too")
    parser.add_argument("--official-steps", type=int, default=5, help="its steps a timing")
    parser.add_argument("--operators", type=int, metavar="N",
                        help="profile latentlens's steps; list the N that grow most")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the samples here as JSON")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("core_distance.py needs two cores; this process may use one")
    if args.step is None:
        samples = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            samples.append(round_trip_ns())
            print(f"{time.strftime('%H:%M:%S')} round trip {samples[-1]:5.0f} ns", flush=True)
            time.sleep(1.0)
        result: dict = {"round_trip_ns": samples}
    else:
        timings = step_by_distance(*args.step, args.seconds, args.steps, args.official,
                                   args.official_steps, args.operators is not None)  # fmt: skip
        report(timings, args.far_ns)
        if args.operators:
            operator_growth(timings, args.far_ns, args.operators)
        result = {"task": args.step[0], "attention": args.step[1], "timings": timings,
                  "far_ns": args.far_ns}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

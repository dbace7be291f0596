"""Where a fused-compile CPU step's time goes on each of its threads, by `perf` sampling.

    python benchmarks/speed/thread_shares.py [--task fuzzy-logic] [--attention softmax]
        [--seconds 15] [--frequency 1000] [--out FILE.txt]

A child process trains the task's reference model on the fused-compile path (the path the
command takes on these CPUs) step after step; once it is warm, ``perf record`` samples it
for ``--seconds``, and each thread's samples are sorted by the code they fell in: oneDNN's
matmul kernels (code it writes at run time, which ``perf`` sees through PyTorch's map of
it), MKL's ``sgemm`` (the per-core engine's weight gradients, where the run chose it),
latentlens's C kernels, Python and PyTorch's bindings, oneDNN's C++ (its per-call set-up
and the drivers around its kernels), the rest of libtorch (the dispatcher, allocation,
copies), glibc, inductor's graph kernels, the Linux kernel, and OpenMP's waits. A
thread's share of its own samples is its share of the wall time.

What the main thread does outside the parallel regions (Python, dispatch, allocation) the
other threads wait through: their OpenMP share is the part of a single run's step that a
faster kernel cannot shorten, and one run per core does not pay. Needs Linux ``perf`` with
sampling allowed to this user (``kernel.perf_event_paranoid`` at 2 or less for a process
of one's own).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# latentlens's C kernels: one library per source in latentlens/kernels (found without
# importing the package's torch-heavy modules)
KERNEL_FOLDER = Path(importlib.util.find_spec("latentlens.kernels").submodule_search_locations[0])
KERNELS = frozenset(source.stem for source in KERNEL_FOLDER.glob("*.c"))
# Kinds of code, in the order the table prints them (:func:`kind_of` sorts a sample in)
KINDS = (
    "oneDNN's matmul kernels",
    "MKL's sgemm (per-core weight gradients)",
    "latentlens's C kernels",
    "Python and PyTorch's bindings",
    "oneDNN's set-up and drivers",
    "libtorch (dispatch, allocation, copies)",
    "glibc (malloc, memset)",
    "inductor's graph kernels",
    "Linux kernel",
    "other",
    "waiting in OpenMP",
)
JIT, MKL, C_KERNELS, PYTHON, ONEDNN, LIBTORCH, GLIBC, INDUCTOR, LINUX, OTHER, OPENMP = KINDS
WARM_STEPS = 30  # steps before sampling: compilation, the allocator's first sizes


def kind_of(library: str, symbol: str = "") -> str:
    """The kind of code (:data:`KINDS`) of a sample in shared object ``library`` (a path or
    a name as ``perf script`` prints it) and function ``symbol`` (libtorch holds MKL and
    oneDNN's C++ beside its own code; their functions tell them apart)."""
    name = Path(library.strip("()")).name
    stem = name.split(".so")[0]
    if name.startswith("perf-") and name.endswith(".map"):
        return JIT  # code written at run time: oneDNN's JIT kernels
    if stem in KERNELS:
        return C_KERNELS
    if stem.startswith(("libpython", "libtorch_python", "_ctypes", "libffi")):
        return PYTHON
    if stem in ("libtorch_cpu", "libtorch", "libc10", "libstdc++"):
        if symbol.startswith("mkl_"):
            return MKL
        if "dnnl::" in symbol or "ideep::" in symbol:
            return ONEDNN
        return LIBTORCH
    if stem in ("libc", "libm"):
        return GLIBC
    if name.endswith(".main.so") or "torchinductor" in library:
        return INDUCTOR
    if "kernel.kallsyms" in library:
        return LINUX
    if stem == "libgomp":
        return OPENMP
    return OTHER


def kind_of_frame(frame: str) -> str:
    """The kind of code of a frame as ``perf script`` prints it after the address:
    ``SYMBOL (LIBRARY)``, or ``(LIBRARY)`` alone."""
    symbol, found, library = frame.rpartition(" (")
    return kind_of(f"({library}" if found else library, symbol.strip())


def thread_shares(lines: Iterable[str]) -> dict[int, dict[str, float]]:
    """``{thread id: {kind: share of its samples}}`` from ``perf script -F tid,ip,sym,dso
    -G`` lines (``TID ADDRESS SYMBOL (LIBRARY)``, the symbol ``[unknown]`` where perf has
    none); lines of another form are passed over."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for line in lines:
        parts = line.split(maxsplit=2)
        if len(parts) < 3 or not parts[0].isdigit() or not parts[2].endswith(")"):
            continue
        counts[int(parts[0])][kind_of_frame(parts[2])] += 1
    return {tid: {kind: n / sum(c.values()) for kind, n in c.items()} for tid, c in counts.items()}


def table(shares: dict[int, dict[str, float]], main: int) -> str:
    """The shares as a table: the main thread (``main``) first, then the others by their
    samples' thread id; a kind no thread ran is left out."""
    tids = [main, *sorted(t for t in shares if t != main)] if main in shares else sorted(shares)
    names = ["main" if t == main else f"thread {t}" for t in tids]
    rows = [f"{'':50s}" + "".join(f"{n:>14s}" for n in names)]
    for kind in KINDS:
        if any(kind in shares[t] for t in tids):
            cells = "".join(f"{shares[t].get(kind, 0.0):14.1%}" for t in tids)
            rows.append(f"{kind:50s}{cells}")
    return "\n".join(rows)


def perf_binary() -> str:
    found = shutil.which("perf")
    if found is None:
        raise SystemExit("thread_shares.py: Linux perf was not found; install it (Debian: "
                         "apt install linux-perf) and run again")  # fmt: skip
    return found


def run_steps(task: str, attention: str, ready: Path) -> None:
    """The child: the fused-compile step, warmed, then step after step until killed."""
    from speed.host_share import trainer_for

    trainer = trainer_for(task, attention, batch_size=128)
    for _ in range(WARM_STEPS):
        trainer.train_step()
    ready.write_text(str(time.monotonic()))
    while True:
        trainer.train_step()


def sample(
    task: str,
    attention: str,
    seconds: float,
    frequency: int,
    call_graph: Sequence[str] = ("-g",),
    report: Callable[[list[str], int], str] | None = None,
) -> str:
    """The child's threads' table after ``seconds`` of sampling at ``frequency`` Hz; with
    ``report``, its text of ``perf script -F tid,ip,sym,dso`` (each sample's unwound
    chain, recorded with ``perf record``'s ``call_graph`` options) and the child's pid."""
    perf = perf_binary()
    with tempfile.TemporaryDirectory() as folder:
        ready, data = Path(folder) / "ready", Path(folder) / "perf.data"
        child = subprocess.Popen([sys.executable, __file__, "--child", str(ready), "--task",
                                  task, "--attention", attention])  # fmt: skip
        try:
            while not ready.exists():
                if child.poll() is not None:
                    raise SystemExit(f"thread_shares.py: the training child exited with "
                                     f"{child.returncode} before it was warm")  # fmt: skip
                time.sleep(0.5)
            record = [perf, "record", "-F", str(frequency), *call_graph, "-p", str(child.pid),
                      "-o", str(data), "--", "sleep", str(seconds)]  # fmt: skip
            done = subprocess.run(record, capture_output=True, text=True)
        finally:
            child.kill()
            child.wait()
        if done.returncode != 0 or not data.exists():
            first = next((line for line in done.stderr.splitlines() if line.strip()), "")
            raise SystemExit(f"thread_shares.py: perf record failed ({first}); sampling may "
                             "need kernel.perf_event_paranoid <= 2")  # fmt: skip
        fields = [perf, "script", "-i", str(data), "-F", "tid,ip,sym,dso"]
        script = subprocess.run(fields + (["-G"] if report is None else []),
                                capture_output=True, text=True, check=True)  # fmt: skip
        if report is not None:
            return report(script.stdout.splitlines(), child.pid)
        return table(thread_shares(script.stdout.splitlines()), child.pid)


def sampling_parser(
    description: str, attention: str, seconds: float, frequency: int
) -> argparse.ArgumentParser:
    """The flags of a script that samples the child: ``--task``, ``--attention``,
    ``--seconds``, ``--frequency`` and ``--out``, with these defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--task", default="fuzzy-logic", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--attention", default=attention)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--frequency", type=int, default=frequency)
    parser.add_argument("--out", type=Path)
    return parser


def main() -> None:
    parser = sampling_parser(__doc__.splitlines()[0], "softmax", 15.0, 1000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        run_steps(args.task, args.attention, args.child)
        return
    text = (f"{args.task} {args.attention}, fused-compile, batch 128, {os.cpu_count()} CPUs; "
            f"share of each thread's samples over {args.seconds:g} s at {args.frequency} Hz\n"
            + sample(args.task, args.attention, args.seconds, args.frequency))  # fmt: skip
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

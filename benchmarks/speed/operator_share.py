"""The share of a single run's main thread spent around the kernels' operator calls.

What the kernels' operators cost around their kernels, the Python a C++ body would remove
among it, by `perf` sampling with unwound call chains:

    python benchmarks/speed/operator_share.py [--task fuzzy-logic] [--attention linear]
        [--seconds 3] [--frequency 199] [--out FILE.txt]

The same child as ``thread_shares.py`` (the fused-compile step of the task's reference
model, warmed, step after step) is sampled with ``perf record --call-graph dwarf``, and
each of the main thread's samples is sorted by its unwound chain: inside a call of the
compiled graph into one of the kernels' operators (the chain reaches
``aoti_torch_call_dispatcher`` or the dispatcher's boxed call), and there inside the
kernel (a C kernel through ctypes' ``ffi_call``, oneDNN's linear, MKL, an OpenMP region)
or around it (Python: the boxed call into the operator's Python body and the body; C and
C++: allocation, the boxing); in the graph's own wrapper; or elsewhere. DWARF unwinding
stops in oneDNN's JIT code, so a chain cut short counts as elsewhere: the shares around
the kernels are lower bounds. Unwinding is slow (about a tenth of a second a sample), so
the defaults take some 1,200 samples. Needs Linux ``perf`` as ``thread_shares.py`` does.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speed import thread_shares  # noqa: E402

# What a main-thread sample was doing, in the order the table prints them
KINDS = (
    "operator calls: Python around the kernels (the boxed call, the bodies)",
    "operator calls: C and C++ around the kernels (allocation, boxing)",
    "operator calls: the kernels (C kernels, oneDNN, MKL, OpenMP)",
    "the compiled graph's wrapper and its own kernels",
    "elsewhere, or a chain cut short (oneDNN's JIT code)",
)
AROUND_PYTHON, AROUND_NATIVE, KERNELS, WRAPPER, ELSEWHERE = KINDS
# functions in a chain that mark a call into a kernel's operator, a kernel, the graph
OPERATOR_CALLS = ("aoti_torch_call_dispatcher", "c10::Dispatcher::callBoxed")
KERNEL_CALLS = ("ffi_call", "mkldnn_linear_pointwise", "GOMP_parallel", "mkl_blas", "brgemm")
GRAPH_CALLS = ("inductor_entry",)


def call_chains(lines: Iterable[str]) -> list[tuple[int, list[str]]]:
    """``[(thread id, frames leaf first)]`` from ``perf script -F tid,ip,sym,dso`` with
    call chains: a line holding the thread id (padded with spaces), then a line a frame
    (a tab, ``ADDRESS SYMBOL (LIBRARY)``), a blank line after each sample."""
    samples: list[tuple[int, list[str]]] = []
    for line in lines:
        if line.startswith("\t"):
            if samples and line.strip():
                samples[-1][1].append(line.strip())
        elif line.strip().isdigit():
            samples.append((int(line), []))
    return samples


def kind_of_chain(frames: list[str]) -> str:
    """The kind (:data:`KINDS`) of a sample whose chain is ``frames``, leaf first."""
    chain = " | ".join(frames)
    if any(call in chain for call in OPERATOR_CALLS):
        if any(call in chain for call in KERNEL_CALLS):
            return KERNELS
        leaf = thread_shares.kind_of_frame(frames[0].partition(" ")[2])  # past the address
        return AROUND_PYTHON if leaf == thread_shares.PYTHON else AROUND_NATIVE
    if any(call in chain for call in GRAPH_CALLS):
        return WRAPPER
    return ELSEWHERE


def main_chains(samples: list[tuple[int, list[str]]], main: int) -> list[list[str]]:
    """The chains of thread ``main``'s samples (those perf unwound at all)."""
    chains = [frames for tid, frames in samples if tid == main and frames]
    if not chains:
        raise SystemExit("operator_share.py: perf recorded no call chain of the main thread")
    return chains


def operator_shares(samples: list[tuple[int, list[str]]], main: int) -> dict[str, float]:
    """Each kind's share of thread ``main``'s samples."""
    chains = main_chains(samples, main)
    kinds = Counter(map(kind_of_chain, chains))
    return {kind: kinds[kind] / len(chains) for kind in KINDS}


def report(lines: list[str], main: int) -> str:
    """The main thread's table of :func:`operator_shares` from ``perf script`` lines."""
    samples = call_chains(lines)
    rows = [f"{kind:75s}{share:7.1%}" for kind, share in operator_shares(samples, main).items()]
    return f"main thread, {len(main_chains(samples, main))} samples\n" + "\n".join(rows)


def main() -> None:
    parser = thread_shares.sampling_parser(__doc__.splitlines()[0], "linear", 3.0, 199)
    args = parser.parse_args()
    chains = ("--call-graph", "dwarf,16384")
    text = thread_shares.sample(args.task, args.attention, args.seconds, args.frequency,
                                call_graph=chains, report=report)  # fmt: skip
    text = (f"{args.task} {args.attention}, fused-compile, batch 128, {os.cpu_count()} CPUs; "
            f"{args.seconds:g} s at {args.frequency} Hz, DWARF call chains\n{text}")  # fmt: skip
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

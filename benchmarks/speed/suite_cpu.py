"""Where the test suite's CPU goes, by kind of process, from a py-spy profile of every one.

    py-spy record --subprocesses --rate 20 --format raw -o suite.txt -- python -m pytest
    python benchmarks/speed/suite_cpu.py suite.txt [--rate 20]

py-spy (``pip install py-spy``; not a latentlens dependency) samples every Python process
the suite starts; ``--format raw`` writes one line per distinct stack, the chain of
processes first, then the frames, then its sample count. Each stack is counted for the
innermost process's kind, read from its command line: the xdist workers (the in-process
tests), `latentlens` commands, spawned workers (the demo's prober, pools), notebook
kernels, Ray's workers and daemons. Per kind: its seconds (samples / rate), those inside
an import, and how many processes; for the xdist workers also the seconds spent compiling
(dynamo, AOT autograd and inductor's Python; the C++ compiler is not a Python process and
is not sampled). py-spy falls behind on a busy machine: the seconds are shares of what it
sampled, not the suite's CPU time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

PROCESS = re.compile(r'process (\d+):"(.*?)"(?=;|$)', re.DOTALL)
IMPORT = "_find_and_load (<frozen importlib._bootstrap>"
COMPILING = ("torch/_dynamo/", "torch/_functorch/", "torch/_inductor/")
XDIST_WORKER = "xdist workers (in-process tests)"
KINDS = (  # (a part of the command line, its kind), the first that matches
    ("sys.stdin.readline", XDIST_WORKER),
    ("ipykernel", "notebook kernels"),
    ("default_worker.py", "Ray's workers"),
    ("spawn_main", "spawned workers"),
    ("/ray/", "Ray's daemons"),
    ("raylet", "Ray's daemons"),
    ("ray start", "Ray's daemons"),
    ("mkdocs", "mkdocs"),
)
COMMAND = re.compile(r"-m latentlens(?:\.cli)?((?: --\S+ \S+)*) (\w+)")


def kind_of(command_line: str) -> str:
    """The kind of process ``command_line`` starts."""
    if found := COMMAND.search(command_line):
        return f"`latentlens {found.group(2)}` commands"
    for part, kind in KINDS:
        if part in command_line:
            return kind
    return "pytest and the rest"


def read_profile(path: Path) -> tuple[Counter, Counter, Counter, dict[str, set[str]]]:
    """Samples per kind, those inside an import, those compiling, and each kind's process
    ids, from py-spy's raw profile ``path``."""
    samples, imports, compiling = Counter(), Counter(), Counter()
    processes: dict[str, set[str]] = defaultdict(set)
    for record in records(path):
        stack, _, count = record.rpartition(" ")
        chain = PROCESS.findall(stack)
        if not count.isdigit() or not chain:
            continue
        pid, command_line = chain[-1]
        kind = kind_of(command_line)
        samples[kind] += int(count)
        processes[kind].add(pid)
        if IMPORT in stack:
            imports[kind] += int(count)
        elif any(part in stack for part in COMPILING):
            compiling[kind] += int(count)
    return samples, imports, compiling, processes


def records(path: Path) -> Iterator[str]:
    """The profile's stacks, one a record: a command line holding a newline (``python -c``
    with a script) continues its record on the next line, which starts otherwise than a
    record does (``process``)."""
    record = ""
    with path.open() as lines:
        for line in lines:
            if line.startswith("process ") and record:
                yield record
                record = ""
            record += line.rstrip("\n") if not record else "\n" + line.rstrip("\n")
    if record:
        yield record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy's --format raw output")
    parser.add_argument("--rate", type=float, default=20.0, help="py-spy's --rate (Hz)")
    args = parser.parse_args(argv)
    if not args.profile.is_file():
        parser.error(f"{args.profile} is not a file: record one with the command above")
    samples, imports, compiling, processes = read_profile(args.profile)
    if not samples:
        parser.error(f"{args.profile} holds no stack of py-spy's --subprocesses --format raw")
    seconds = 1.0 / args.rate
    print(f"{sum(samples.values()) * seconds:,.0f} s of samples at {args.rate:g} Hz")
    print("| processes | count | seconds | of which imports | of which compiling |")
    print("|---|---|---|---|---|")
    for kind, count in samples.most_common():
        compiled = f"{compiling[kind] * seconds:,.0f}" if kind == XDIST_WORKER else ""
        print(f"| {kind} | {len(processes[kind])} | {count * seconds:,.0f} | "
              f"{imports[kind] * seconds:,.0f} | {compiled} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

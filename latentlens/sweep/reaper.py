"""A local Ray instance that dies with the sweep that started it, however the sweep dies.

``ray.shutdown()`` stops the processes of a local instance when the driver exits cleanly
or by Ctrl-C; a SIGKILL of ``latentlens sweep`` skipped it and left Ray's dashboard and
runtime-env agents running under PID 1, ignoring SIGTERM (issue #42). So the driver starts
a reaper beside it: a small process in its own session that holds the read end of a pipe
from the driver. It learns the instance's processes (the driver's children that
``ray.init`` started) and follows their descendants as they appear (the raylet starts the
agents and workers); when the pipe closes, because the driver ended its sweep or died, it
SIGKILLs every one still alive. Processes are known by PID and start time, so a reused PID
is never hit. Linux only (``/proc``); elsewhere nothing is reaped.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROC = Path("/proc")
POLL_SECONDS = 0.5  # how often the reaper looks for new descendants


def process_table() -> dict[int, tuple[int, int]]:
    """``{pid: (parent pid, start time in clock ticks)}`` of every process, from /proc."""
    table = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while we looked
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def children_of(pid: int) -> list[tuple[int, int]]:
    """``[(pid, start time)]`` of ``pid``'s children."""
    return [(child, start) for child, (parent, start) in process_table().items() if parent == pid]


def reap(known: dict[int, int]) -> list[int]:
    """SIGKILL every process of ``known`` (``{pid: start time}``) still alive as itself."""
    table = process_table()
    killed = []
    for pid, start in known.items():
        if table.get(pid, (None, None))[1] == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def follow(known: dict[int, int]) -> None:
    """Add to ``known`` every living descendant of a process in it."""
    table = process_table()
    grew = True
    while grew:
        grew = False
        for pid, (parent, start) in table.items():
            if parent in known and pid not in known:
                known[pid] = start
                grew = True


def main() -> int:
    """The reaper: ``PID START`` lines on stdin name the processes to follow; end of input
    (the driver closed the pipe or died) kills them and their descendants."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle
    known: dict[int, int] = {}
    buffered = b""
    while True:
        readable, _, _ = select.select([sys.stdin.buffer], [], [], POLL_SECONDS)
        if readable:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                follow(known)
                reap(known)
                return 0
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                pid, start = map(int, line.split())
                known[pid] = start
        follow(known)


class Reaper:
    """The reaper process, told the processes to follow; :meth:`close` ends the watch
    (killing what is left of them)."""

    def __init__(self) -> None:
        # run as a script (its imports are the standard library's): not through the package,
        # whose imports (torch, Ray) would cost the reaper seconds and hundreds of MB
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def follow(self, processes: list[tuple[int, int]]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"".join(f"{pid} {start}\n".encode() for pid, start in processes))
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@contextlib.contextmanager
def ray_instance(ray: Any, **init: Any) -> Iterator[bool]:
    """``ray.init(**init)`` unless Ray is running already (yields whether it started one
    here), then ``ray.shutdown()`` on the way out; a local instance started here is reaped
    when the driver dies, however it dies. Without an address (nor ``RAY_ADDRESS``) the
    instance is a new local one: Ray's own default would join a cluster that ``ray start``
    left running on this machine, whose resources are not this call's to set."""
    if ray.is_initialized():
        yield False
        return
    if init.get("address") is None and not os.environ.get("RAY_ADDRESS"):
        init = {**init, "address": "local"}
    local = init.get("address") == "local" and PROC.is_dir()
    reaper = Reaper() if local else None
    before = {pid for pid, _ in children_of(os.getpid())}
    try:
        ray.init(**init)
        if reaper is not None:
            reaper.follow(
                [
                    (p, s)
                    for p, s in children_of(os.getpid())
                    if p not in before and p != reaper.process.pid
                ]  # fmt: skip
            )
        yield True
    finally:
        try:
            ray.shutdown()
        finally:
            if reaper is not None:
                reaper.close()


if __name__ == "__main__":
    sys.exit(main())

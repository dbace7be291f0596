"""One writer per run directory: an exclusive ``flock`` on the directory itself.

The lock belongs to the open directory, so the operating system drops it when its process
dies, however it dies: a stale lock of a killed process is taken over by the next writer
without any clean-up; and no file inside can be deleted to break it. ``RUN/.lock`` records
the holder (PID, host, start time) for the message a second writer gets; it is never
followed where it is a symbolic link. Readers (eval, probes, figures) take no lock. The
writer that takes the lock removes the temporary files a killed writer left behind.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path

from latentlens.training.run_dir import refuse_link

LOCK_FILE = ".lock"


class RunLocked(ValueError):
    """Another process is writing this run directory."""


def prepare_directory(path: Path) -> None:
    """Create the run directory, or a one-line error naming what stands in the way (a
    run directory that is a symbolic link is refused, not followed: writes land where the
    link says, possibly another run or outside the place given)."""
    if path.is_symlink():
        raise ValueError(
            f"--run-dir {path} is a symbolic link (to {os.readlink(path)}); give the folder "
            "itself: latentlens writes only inside the run directory it is given"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"--run-dir {path} is a file; choose a directory path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(
            f"--run-dir {path} lies under a file ({_first_file(path)}); choose a directory path"
        ) from None
    except OSError as err:
        raise ValueError(
            f"--run-dir {path} cannot be created ({err.strerror}); choose a writable place"
        ) from None


def _first_file(path: Path) -> Path:
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return path


class RunLock:
    """``acquire()`` or refuse with :class:`RunLocked`; ``release()`` (idempotent)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        prepare_directory(self.directory)
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise ValueError(
                f"{self.directory} cannot be opened ({err.strerror}); the run directory must be "
                "readable"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLocked(
                f"{self.directory} is being written by {self.holder()}; wait for it to finish, "
                "or choose another --run-dir"
            ) from None
        try:
            self.record()
            remove_stale_temporaries(self.directory)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def record(self) -> None:
        """Write the holder into ``RUN/.lock`` (a link there is refused, not followed)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:
                refuse_link(self.path)
            raise ValueError(
                f"{self.path} cannot be opened ({err.strerror}); the run directory must be writable"
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(holder))

    def holder(self) -> str:
        """Who holds the lock, as ``RUN/.lock`` records it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return "another process"
        try:
            return _holder(fd)
        finally:
            os.close(fd)

    def release(self) -> None:
        if self.fd is None:
            return
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __del__(self) -> None:  # a lock dropped without release (an aborted start-up)
        self.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def being_written(directory: str | Path) -> bool | None:
    """Whether a process on this machine holds ``directory``'s lock now, as the kernel's
    table of locks (``/proc/locks``) says, without touching the lock (a probe that took it
    even for an instant could turn a starting writer away); None where that table cannot
    be read (not Linux) or the directory is gone."""
    try:
        found = os.stat(directory)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 24289 fe:00:16452534 0 EOF": the device (major:minor, hex)
    # and inode; a lock that a process waits for is listed with "->" before it
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    return any(
        fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and fields[5] == device
        for fields in (line.split() for line in table.splitlines())
        if len(fields) > 5 and "->" not in fields
    )


# atomic_write_bytes's temporary file: ".NAME.tmp-PID"
TEMPORARY = re.compile(r"\..+\.tmp-\d+")
# the folders whose files only the run's writer writes
WRITER_FOLDERS = (".", "checkpoints", "tracking")


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete the temporary files that writers killed mid-write (SIGKILL, power loss) left
    in the run directory, its checkpoints and its tracking: the caller holds the run's lock,
    so no writer of them is alive. Links and folders are left alone. Returns what went."""
    removed = []
    for folder in WRITER_FOLDERS:
        place = directory / folder
        if place.is_symlink() or not place.is_dir():
            continue
        for path in place.iterdir():
            if TEMPORARY.fullmatch(path.name) and path.is_file() and not path.is_symlink():
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def _holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"PID {record['pid']} on {record['host']} (since {record['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"

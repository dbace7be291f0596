"""Builds the package's C kernels into shared libraries the first time they are used.

A kernel is one C file beside this module, compiled with the system's C compiler for the
machine it runs on (``-march=native``) and loaded with :mod:`ctypes`. The library is
cached under ``$LATENTLENS_CACHE`` (default ``~/.cache/latentlens``) in a folder named by
the hash of the source, the flags, the compiler (its path and version) and the CPU, so an
edited kernel, another compiler or another machine sharing the home directory builds its
own; it is written to a temporary name and renamed, so concurrent first uses never load a
half-written file.

Loading a library runs its code, so a library is loaded only if this user built it: every
folder of the cache from ``$LATENTLENS_CACHE`` down and the library itself must belong to
this user and be writable by no one else (else a one-line error names the path), and the
library's SHA-256, recorded when it was built, must match (a library without a record is
built again; one that differs from its record is refused). A failed build is remembered
for :data:`RETRY_FAILED_AFTER` seconds, then tried again.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
# Contracted multiply-adds and vectorised loops; OpenMP's parallel regions (linked against
# libgomp.so.1, which in a torch process resolves to the copy torch has loaded: one pool of
# threads); no -ffast-math (it reorders reductions and, linked into a library by gcc
# before 13, flushes denormals for the whole process).
FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
)
OPENMP = "-fopenmp"
# Where the compiler cannot build OpenMP (clang without libomp), the kernels are built
# without it and run every call on one thread: slower, the same numbers.
WITHOUT_OPENMP = "-fopenmp-simd"
# A build that failed is tried again after a day (at once where its inputs, the compiler or
# its version change: they make another cache folder).
RETRY_FAILED_AFTER = 24 * 3600.0
DIGEST = ".sha256"  # beside a library: its SHA-256, written when it was built


def c_compiler() -> str | None:
    """The C compiler the kernels are built with ($CC, else gcc, cc or clang)."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["gcc", "cc", "clang"]
    return next((found for name in names if (found := shutil.which(name))), None)


def cache_folder() -> Path:
    return Path(os.environ.get("LATENTLENS_CACHE", Path.home() / ".cache" / "latentlens"))


@cache
def compiler_version(compiler: str) -> str:
    """The first line of ``compiler --version`` ("" where it prints none)."""
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return next(iter(done.stdout.splitlines()), "")


def check_own(path: Path) -> None:
    """Refuse ``path`` unless it is this user's, no symbolic link, and writable by no one
    else: a library loaded from a place another user can write runs their code."""
    info = path.lstat()
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif info.st_uid != os.getuid():
        problem = f"belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is writable by others (mode {stat.filemode(info.st_mode)})"
    if problem:
        raise RuntimeError(
            f"{path} {problem}: latentlens loads its compiled kernels only from a cache that "
            "is yours alone; remove it, or set LATENTLENS_CACHE to a folder of your own"
        )


def own_folder(folder: Path) -> None:
    """Make ``folder`` (this user's alone, mode 700) where missing, and check it and every
    folder above it up to the cache folder with :func:`check_own`."""
    root = cache_folder()
    chain = [folder, *folder.relative_to(root).parents]  # folder, ..., "." (the root)
    for relative in reversed(chain[1:]):
        part = root / relative
        if not part.exists():
            part.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_own(part)
    folder.mkdir(mode=0o700, exist_ok=True)
    check_own(folder)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def trusted(library: Path) -> bool:
    """Whether ``library`` is one this user built (checked before it is loaded): False
    where it has no recorded digest (a cache from before digests: built again); an error
    where it is not this user's or differs from its digest."""
    check_own(library)
    record = library.with_suffix(DIGEST)
    if not record.exists():
        return False
    check_own(record)
    if record.read_text().strip() != sha256_of(library):
        raise RuntimeError(
            f"{library} differs from the SHA-256 recorded when it was built ({record}): "
            "something replaced it; remove its folder to build it again"
        )
    return True


def failed_before(marker: Path) -> str | None:
    """The compiler's errors of a build of this setting that failed less than
    :data:`RETRY_FAILED_AFTER` ago, else None (an older failure is forgotten)."""
    if not marker.exists():
        return None
    check_own(marker)
    if time.time() - marker.stat().st_mtime > RETRY_FAILED_AFTER:
        marker.unlink(missing_ok=True)
        return None
    return marker.read_text()


def cpu_identity() -> str:
    """What ``-march=native`` compiles for: the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags")
    return "\n".join(sorted({line for line in lines if line.startswith(wanted)}))


def threads() -> int:
    """The threads a kernel call runs on: PyTorch's intra-op count."""
    return torch.get_num_threads()


# A kernel's sum over rows (or batch elements, or blocks of rows) is cut into this many
# slices whatever the thread count: each slice is summed in order, the threads share the
# slices and the slices' sums are added in slice order, so one thread and sixteen compute
# the same bits and a fused run may follow the machine's load.
SLICES = 16


def slices(units: int, most: int = SLICES) -> int:
    """How many slices a sum over ``units`` rows is cut into: ``most``, or fewer rows."""
    return max(1, min(units, most))


# The library the kernels' operators are defined in (``torch.ops.latentlens``); it must
# live as long as the process: a dropped Library takes its operators with it.
OPERATORS = torch.library.Library("latentlens", "FRAGMENT")
# Each operator's Python body, and the library that registers it as the CPU kernel (apart
# from the definitions, so that native.py can hand the kernel to a C++ body and back).
PYTHON_BODIES: dict[str, Callable] = {}
_body_registrations: dict[str, torch.library.Library] = {}
# The operators whose CPU kernel is their Python body now, to that body (see body()).
_python_kernels: dict[torch._ops.OpOverload, Callable] = {}


def operator(name: str) -> Callable[[Callable], torch._ops.OpOverload]:
    """A decorator: the typed Python ``function`` (its schema inferred from its
    annotations, nothing mutated) as the CPU operator ``latentlens::{name}``, which a
    compiled step calls. Its fake and autograd functions are registered on what it
    returns (:func:`torch.library.register_fake`, :func:`torch.library.register_autograd`).
    :mod:`latentlens.kernels.native` may replace the Python body by a C++ one.

    A plain library operator rather than :func:`torch.library.custom_op`, whose Python
    wrappers (an autograd kernel on every operator, checks of each call's outputs) cost
    about 7 us a call over the function's own time, where this costs 2 without an
    autograd formula and 5 with one; a fused-compile step makes some 30 calls
    (benchmarks/speed/operator_overhead.py)."""

    def define(function: Callable) -> torch._ops.OpOverload:
        schema = torch.library.infer_schema(function, mutates_args=())
        OPERATORS.define(name + schema)
        PYTHON_BODIES[name] = function
        use_python_bodies([name])
        return getattr(torch.ops.latentlens, name).default

    return define


def use_python_bodies(names: list[str]) -> None:
    """Register the Python bodies of the operators ``names`` as their CPU kernels."""
    for name in names:
        registration = torch.library.Library("latentlens", "IMPL")
        registration.impl(name, PYTHON_BODIES[name], "CPU")
        _body_registrations[name] = registration
        _python_kernels[getattr(torch.ops.latentlens, name).default] = PYTHON_BODIES[name]


def drop_python_bodies(names: list[str]) -> None:
    """Take the Python bodies of the operators ``names`` off their CPU kernels (for C++
    ones: a CPU kernel registered over another is a warning)."""
    for name in names:
        _body_registrations.pop(name)._destroy()
        del _python_kernels[getattr(torch.ops.latentlens, name).default]


# An operator called with this key set runs its CPU kernel, its body (C++ where
# :mod:`latentlens.kernels.native` gave it one), and no autograd wrapper.
BODY_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def body(op: torch._ops.OpOverload, *args):
    """``op``'s registered body on ``args``, below autograd: what the kernels' eager
    autograd functions call, which record their own gradients (the operator's autograd
    wrapper, Python, would cost a call some 5 us more). A Python body is called directly,
    which costs less than through the dispatcher."""
    python = _python_kernels.get(op)
    return op.redispatch(BODY_KEYS, *args) if python is None else python(*args)


def operators(
    name: str, forward: Callable, backward: Callable
) -> tuple[torch._ops.OpOverload, torch._ops.OpOverload]:
    """A kernel's forward and backward Python functions (typed) as the operators
    ``latentlens::{name}`` and ``latentlens::{name}_backward`` (:func:`operator`)."""
    return operator(name)(forward), operator(f"{name}_backward")(backward)


def local_includes(source: Path) -> list[Path]:
    """The headers beside ``source`` that it includes (``#include "name.h"``), and theirs
    in turn, which a library's cache key covers with the source."""
    found: list[Path] = []
    pending = [source]
    while pending:
        text = pending.pop().read_text()
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.MULTILINE):
            header = source.parent / name
            if header not in found:
                found.append(header)
                pending.append(header)
    return found


@cache
def load(name: str, defines: tuple[tuple[str, int], ...] = ()) -> ctypes.CDLL:
    """The shared library of kernel ``name`` (``name.c`` beside this module), built on
    first use (each set of preprocessor ``defines`` ``(macro, value)`` its own library),
    with OpenMP where the compiler builds it (else without, once, with a warning). Raises
    RuntimeError naming the fix when no C compiler is found or the build fails."""
    compiler = c_compiler()
    if compiler is None:
        raise RuntimeError(
            "latentlens's fused CPU kernels are built with a C compiler and none was found "
            "(gcc, cc or clang, or $CC); install one (e.g. apt install gcc) or train "
            "without --fused"
        )
    source = HERE / f"{name}.c"
    result = openmp_error = None
    for parallel in (OPENMP, WITHOUT_OPENMP):
        flags = [*FLAGS, *(f"-D{macro}={value}" for macro, value in defines), parallel]
        library, result = cached_build(compiler, flags, source, remember=parallel == OPENMP)
        if result is None:
            if parallel == WITHOUT_OPENMP:
                warnings.warn(
                    f"the fused CPU kernel {name}.c was built without OpenMP ({compiler} "
                    f"could not build {OPENMP}: {first_line(openmp_error or '')}), so it "
                    "runs on one thread; install OpenMP (e.g. libomp-dev for clang) for "
                    "parallel kernels",
                    stacklevel=2,
                )
            return ctypes.CDLL(str(library))
        openmp_error = result
    raise RuntimeError(
        f"building the fused CPU kernel {name}.c with {compiler} failed; train "
        f"without --fused, or report this output:\n{result}"
    )


def cached_build(
    compiler: str, flags: list[str], source: Path, remember: bool = True, key: tuple[str, ...] = ()
) -> tuple[Path, str | None]:
    """``(library, errors)``: where the cache holds ``source`` built with ``compiler`` and
    ``flags`` (built now where it is missing or untrusted; ``key``: more that the build
    depends on, such as PyTorch's version for its headers), and the compiler's errors
    where that build failed (None: it is there to load). A failure is remembered for
    :data:`RETRY_FAILED_AFTER` seconds where ``remember``."""
    setting = [" ".join(flags), compiler, compiler_version(compiler), cpu_identity(), *key]
    texts = [path.read_bytes() for path in (source, *local_includes(source))]
    digest = hashlib.sha256(b"\0".join([*texts, *map(str.encode, setting)]))
    library = cache_folder() / "kernels" / digest.hexdigest()[:16] / f"{source.stem}.so"
    own_folder(library.parent)
    failed = library.with_suffix(".failed")  # this setting's errors, for a day
    if (result := failed_before(failed)) is None:
        if not (library.exists() and trusted(library)):
            result = build(compiler, flags, source, library)
        if result is not None and remember:
            partial = failed.with_name(f"{failed.name}.{os.getpid()}")
            partial.write_text(result)
            os.replace(partial, failed)
    return library, result


def first_line(text: str) -> str:
    """The first line of a compiler's errors that says something (not "In function")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")


def build(compiler: str, flags: list[str], source: Path, library: Path) -> str | None:
    """Compile ``source`` into ``library`` (written whole or not at all, with its SHA-256
    beside it, the digest first); the compiler's errors where it fails, else None."""
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        result = subprocess.run(
            [compiler, str(source), *flags, "-o", str(built)], capture_output=True, text=True
        )
        if result.returncode:
            return result.stderr.strip() or f"{compiler} exited with {result.returncode}"
        built.chmod(0o700)
        record = Path(scratch) / library.with_suffix(DIGEST).name
        record.write_text(sha256_of(built) + "\n")
        record.chmod(0o600)
        os.replace(record, library.with_suffix(DIGEST))
        os.replace(built, library)
    return None

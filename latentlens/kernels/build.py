"""Builds the package's C kernels into shared libraries the first time they are used.

A kernel is one C file beside this module, compiled with the system's C compiler for the
machine it runs on (``-march=native``) and loaded with :mod:`ctypes`. The library is
cached under ``$LATENTLENS_CACHE`` (default ``~/.cache/latentlens``) in a folder named by
the hash of the source, the flags, the compiler and the CPU, so an edited kernel or another
machine sharing the home directory builds its own; it is written to a temporary name and
renamed, so concurrent first uses never load a half-written file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
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


def c_compiler() -> str | None:
    """The C compiler the kernels are built with ($CC, else gcc, cc or clang)."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["gcc", "cc", "clang"]
    return next((found for name in names if (found := shutil.which(name))), None)


def cache_folder() -> Path:
    return Path(os.environ.get("LATENTLENS_CACHE", Path.home() / ".cache" / "latentlens"))


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


def operators(name: str, forward: Callable, backward: Callable) -> tuple[Callable, Callable]:
    """A kernel's forward and backward Python functions (typed: the schema is inferred
    from their annotations) as the operators ``latentlens::{name}`` and
    ``latentlens::{name}_backward``, which a compiled step calls."""
    return (
        torch.library.custom_op(f"latentlens::{name}", forward, mutates_args=()),
        torch.library.custom_op(f"latentlens::{name}_backward", backward, mutates_args=()),
    )


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
    result = None
    for parallel in (OPENMP, WITHOUT_OPENMP):
        flags = [*FLAGS, *(f"-D{macro}={value}" for macro, value in defines), parallel]
        setting = [" ".join(flags), compiler, cpu_identity()]
        texts = [path.read_bytes() for path in (source, *local_includes(source))]
        key = hashlib.sha256(b"\0".join([*texts, *map(str.encode, setting)]))
        library = cache_folder() / "kernels" / key.hexdigest()[:16] / f"{name}.so"
        failed = library.with_suffix(".failed")  # this setting's errors, not retried
        if failed.exists():
            result = failed.read_text()
            continue
        if library.exists() or (result := build(compiler, flags, source, library)) is None:
            if parallel == WITHOUT_OPENMP:
                warnings.warn(
                    f"the fused CPU kernel {name}.c was built without OpenMP ({compiler} "
                    f"could not build {OPENMP}), so it runs on one thread; install OpenMP "
                    "(e.g. libomp-dev for clang) for parallel kernels",
                    stacklevel=2,
                )
            return ctypes.CDLL(str(library))
        if parallel == OPENMP:
            partial = failed.with_name(f"{failed.name}.{os.getpid()}")
            partial.write_text(result)
            os.replace(partial, failed)
    raise RuntimeError(
        f"building the fused CPU kernel {name}.c with {compiler} failed; train "
        f"without --fused, or report this output:\n{result}"
    )


def build(compiler: str, flags: list[str], source: Path, library: Path) -> str | None:
    """Compile ``source`` into ``library`` (written whole or not at all); the compiler's
    errors where it fails, else None."""
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        result = subprocess.run(
            [compiler, *flags, "-o", str(built), str(source)], capture_output=True, text=True
        )
        if result.returncode:
            return result.stderr.strip()
        os.replace(built, library)
    return None

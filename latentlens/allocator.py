"""glibc's malloc set to keep the memory a training step frees, for the next step.

A CPU training step allocates and frees the same large buffers (activations, gradients)
every step. glibc's defaults hand such memory back to the kernel (buffers over its mmap
threshold are unmapped when freed, and a free top of the heap over 128 KiB is trimmed),
and the next step faults every page back in, zeroed: a Table A1 fuzzy-logic step on one
thread took 2,300-6,800 page faults and spent 8-17% of its CPU time in the kernel, and ran
1.17-1.32x slower than with the memory kept (``benchmarks/speed/allocator.py``).
:func:`keep_freed_memory` raises the three thresholds with ``mallopt``, which glibc honours
at any time; it changes where memory comes from, never a number a run computes.

A process that set any of glibc's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``
or ``MALLOC_TOP_PAD_`` keeps its settings; other C libraries (musl, macOS, Windows) are
left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = {
    # glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): buffers below
    # it come from the heap, where a freed one is reused
    M_MMAP_THRESHOLD: 32 * 2**20,
    # the free top of the heap kept rather than returned to the kernel, and the extra
    # asked for when the heap grows
    M_TRIM_THRESHOLD: 2**30,
    M_TOP_PAD: 256 * 2**20,
}
OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_kept = False


def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory for reuse (once per process); whether it is
    set: False on another C library or where the process chose its own settings."""
    global _kept
    if _kept:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in OWN_SETTINGS):
        return False
    libc = ctypes.CDLL(None)
    _kept = all(libc.mallopt(option, value) == 1 for option, value in SETTINGS.items())
    return _kept

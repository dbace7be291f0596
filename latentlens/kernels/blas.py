"""PyTorch's own BLAS ``sgemm``, which the C kernels call where they run their matmuls on
one thread each (:mod:`latentlens.kernels.mlp`'s sgemm engine, the per-core weight
gradients of :mod:`latentlens.kernels.linear`)."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch


@cache
def sgemm_address() -> int | None:
    """Where PyTorch's CPU library has ``sgemm_`` (the BLAS interface), if it exports it."""
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        return ctypes.cast(ctypes.CDLL(str(library)).sgemm_, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None

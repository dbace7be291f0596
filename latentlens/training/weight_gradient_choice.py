"""Which engine sums a fused run's weight gradients on this machine, measured once.

oneDNN splits a weight's gradient over its outputs, so each core reads every row; the
``per-core`` engine sums each core's own rows with MKL's ``sgemm`` on one thread
(:mod:`latentlens.kernels.linear`). It pays where the cores sit far apart (a 2-core Zen 4
EPYC's SRAVEN step 1.10x as fast) but only where MKL computes as fast as oneDNN on one
core: MKL runs its AVX2 code on AMD processors, which on a Zen 4 (AVX-512 in two 256-bit
halves) matches oneDNN's AVX-512, and on a Zen 5 (full-width AVX-512) would not. So
:func:`choose_weight_gradients` times both engines on one thread at a weight gradient's
shape and takes ``per-core`` unless it is more than :data:`MARGIN` times as slow, it
cannot run here, or the run may use more threads than its :data:`PARTS`. On the Zen 4 it
took 1.06x oneDNN's time on one core, and its whole steps on two ran 0.99x as fast as
oneDNN's with the cores near and 1.10x far apart (it copies no operand transposed, and
reads its own rows); a sum twice as slow (AVX2 beside full-width AVX-512) is left out.
The timing is cached per machine beside the paths' (``weight_gradients.json``); the
choice is recorded in the run's config (``train.weight_gradients``), so that a resume sums
the same way.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from latentlens.kernels.linear import (
    PARTS,
    has_onednn,
    has_per_core,
    onednn_row_products,
    per_core_row_products,
)
from latentlens.training.fast_path import add_to_cache, cache_path, machine_key

# per-core unless its one-thread time is more than this many times oneDNN's (the Zen 4's:
# 1.06, the steps 0.99x near and 1.10x far)
MARGIN = 1.15
# the shape timed: rows, outputs, inputs (a T = 16 fuzzy-logic MLP's, 128 x 16 rows)
SHAPE = (2048, 256, 128)
WARM_UP, ROUNDS, CALLS = 3, 9, 10
ENGINES = {"onednn": onednn_row_products, "per-core": per_core_row_products}


def time_engines() -> dict[str, float]:
    """Seconds a call of each engine at :data:`SHAPE` on one thread. The engines take
    turns, :data:`CALLS` calls each, for :data:`ROUNDS` rounds after :data:`WARM_UP`
    unrecorded ones; oneDNN's is its fastest round, the per-core engine's that times the
    median over rounds of its time over oneDNN's in the same round (as the paths are
    ranked, :func:`~latentlens.training.fast_path.calibrate`: a neighbour that slows
    some rounds slows both engines' turns in them alike)."""
    rows, outputs, inputs = SHAPE
    gen = torch.Generator().manual_seed(0)
    dy, x = torch.randn(rows, outputs, generator=gen), torch.randn(rows, inputs, generator=gen)
    before = torch.get_num_threads()
    seconds: dict[str, list[float]] = {name: [] for name in ENGINES}
    try:
        torch.set_num_threads(1)
        for turn in range(WARM_UP + ROUNDS):
            for name in list(ENGINES)[turn % 2 :] + list(ENGINES)[: turn % 2]:
                began = time.perf_counter()
                for _ in range(CALLS):
                    ENGINES[name](dy, x)
                if turn >= WARM_UP:
                    seconds[name].append((time.perf_counter() - began) / CALLS)
    finally:
        torch.set_num_threads(before)
    onednn, per_core = seconds["onednn"], seconds["per-core"]
    ratio = statistics.median(p / o for p, o in zip(per_core, onednn, strict=True))
    return {"onednn": min(onednn), "per-core": min(onednn) * ratio}


def timings_path() -> Path:
    """The cache of :func:`machine_timings`, beside the paths' calibrations."""
    return cache_path().with_name("weight_gradients.json")


def machine_timings() -> dict[str, float]:
    """This machine's :func:`time_engines`, from the cache or timed now and cached (a
    cache that cannot be read is timed again)."""
    key = json.dumps(machine_key(torch.device("cpu")), sort_keys=True)
    path = timings_path()
    try:
        found = json.loads(path.read_text())[key]
        return {name: float(found[name]) for name in ENGINES}
    except (OSError, ValueError, KeyError, TypeError):
        timed = time_engines()
    add_to_cache(path, key, timed)
    return timed


def choose_weight_gradients(threads: int) -> tuple[str, str]:
    """``(engine, why)`` for a fused run on up to ``threads`` threads here."""
    if not has_per_core():
        return "onednn", "PyTorch's library exports no sgemm_ for the per-core engine"
    if not has_onednn():
        return "per-core", "PyTorch has no oneDNN matmul"
    if threads > PARTS:
        return "onednn", f"the run may use {threads} threads; the per-core engine uses {PARTS}"
    timed = machine_timings()
    ratio = timed["per-core"] / timed["onednn"]
    engine = "per-core" if ratio <= MARGIN else "onednn"
    return engine, f"one core's per-core sum at {ratio:.2f}x oneDNN's time (at most {MARGIN})"

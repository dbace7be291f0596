"""Sweeps: a grid of runs from a small spec, run on Ray (``latentlens sweep``)."""

from latentlens.sweep.run import run_sweep, status_lines
from latentlens.sweep.spec import Cell, SweepSpec

__all__ = ["Cell", "SweepSpec", "run_sweep", "status_lines"]

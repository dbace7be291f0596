"""Device selection shared by the CLI, the trainer and the benchmarks."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

# What ``resolve_device`` takes besides "cuda:N" (latentlens.cli.choices keeps a copy)
DEVICE_CHOICES = ("auto", "cpu", "cuda")

__all__ = ["DEVICE_CHOICES", "cpu_model", "resolve_device"]


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device={name!r} was requested but no CUDA device is available; "
            "use --device cpu or --device auto"
        )
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device={name!r} is not a valid torch device ({err})") from None


def cpu_model() -> str:
    """The processor's name (``/proc/cpuinfo``'s model name), else the platform's guess
    (empty where it has none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()

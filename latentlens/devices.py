"""Device selection shared by the CLI, the trainer and the benchmarks."""

from __future__ import annotations

import torch

# What ``resolve_device`` takes besides "cuda:N" (latentlens.cli.choices keeps a copy)
DEVICE_CHOICES = ("auto", "cpu", "cuda")

__all__ = ["DEVICE_CHOICES", "resolve_device"]


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

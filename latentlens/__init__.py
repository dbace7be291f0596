"""latentlens: mechanistic interpretability of attention latent codes."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("latentlens")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "latent_codes"]


def __getattr__(name: str) -> Any:
    """``latentlens.latent_codes``, imported on first use: ``import latentlens`` (and the
    command line's ``--help``) then costs no torch import."""
    if name == "latent_codes":
        from latentlens.models.latent import latent_codes  # noqa: PLC0415

        return latent_codes
    raise AttributeError(f"module 'latentlens' has no attribute {name!r}")

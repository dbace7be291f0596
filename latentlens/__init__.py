"""latentlens: mechanistic interpretability of attention latent codes."""

import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# In a Jupyter kernel without ipywidgets, importing tqdm.auto (TransformerLens and Hugging
# Face do) warns "IProgress not found" into the first cell's output. latentlens's own bars
# step aside there (latentlens.progress), so the warning tells a reader nothing.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

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

"""latentlens: mechanistic interpretability of attention latent codes."""

from importlib.metadata import PackageNotFoundError, version

from latentlens.models.latent import latent_codes

try:
    __version__ = version("latentlens")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "latent_codes"]

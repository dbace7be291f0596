"""Where latentlens keeps what it builds or fetches outside a run directory: the zoo's run
directories and the real pretrained models (``$LATENTLENS_CACHE``, else
``~/.cache/latentlens``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENVIRONMENT = "LATENTLENS_CACHE"


def cache_base() -> Path:
    """``$LATENTLENS_CACHE``, else ``~/.cache/latentlens``."""
    base = os.environ.get(CACHE_ENVIRONMENT)
    return Path(base) if base else Path.home() / ".cache" / "latentlens"

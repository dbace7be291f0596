"""Where latentlens keeps what it builds or fetches outside a run directory: the zoo's run
directories and the real pretrained models (``$LATENTLENS_CACHE``, else
``~/.cache/latentlens``)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CACHE_ENVIRONMENT = "LATENTLENS_CACHE"


def cache_base() -> Path:
    """``$LATENTLENS_CACHE``, else ``~/.cache/latentlens``."""
    base = os.environ.get(CACHE_ENVIRONMENT)
    return Path(base) if base else Path.home() / ".cache" / "latentlens"


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file ``path`` (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

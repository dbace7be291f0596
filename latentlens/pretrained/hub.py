"""The Hugging Face hub, reached only when it answers: a machine without internet gets the
hub's cache-only mode at once, instead of its five retries (half a minute and more) before
the same "not found"."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

# Seconds a connection to the hub may take before the hub counts as out of reach.
CONNECT_TIMEOUT = 3.0


def hub_reachable(timeout: float = CONNECT_TIMEOUT) -> bool:
    """Whether a TCP connection to the hub's endpoint (``HF_ENDPOINT``, else
    huggingface.co) opens within ``timeout`` seconds."""
    from huggingface_hub import constants

    endpoint = urlsplit(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def offline_unless_reachable(name: str | Path) -> Iterator[None]:
    """Load ``name`` from the hub's cache alone (offline mode) while inside, when it is a
    hub name, offline mode is not already on, and the hub does not answer; otherwise as
    configured."""
    from huggingface_hub import constants

    if Path(name).expanduser().exists() or constants.HF_HUB_OFFLINE or hub_reachable():
        yield
        return
    previous = os.environ.get("HF_HUB_OFFLINE")
    constants.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = False
        if previous is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = previous

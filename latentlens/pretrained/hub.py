"""The Hugging Face hub, reached only when it answers: a machine without internet gets the
hub's cache-only mode at once, instead of its five retries (half a minute and more) before
the same "not found"."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

# Seconds a name lookup and a connection to the hub may take together before the hub
# counts as out of reach.
CONNECT_TIMEOUT = 2.0


def resolved(host: str, port: int, timeout: float) -> list[tuple] | None:
    """``socket.getaddrinfo`` of ``host`` within ``timeout`` seconds, else None: a lookup
    has no timeout of its own (offline, one took 5 s), so it runs in a daemon thread that
    is left behind when it is late."""
    found: list[list[tuple] | None] = [None]

    def lookup() -> None:
        with contextlib.suppress(OSError):
            found[0] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)

    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(timeout)
    return found[0]


def hub_reachable(timeout: float = CONNECT_TIMEOUT) -> bool:
    """Whether a TCP connection to the hub's endpoint (``HF_ENDPOINT``, else
    huggingface.co) opens within ``timeout`` seconds, its name lookup included."""
    from huggingface_hub import constants

    endpoint = urlsplit(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    start = time.monotonic()
    addresses = resolved(endpoint.hostname or "", port, timeout / 2)
    for family, kind, proto, _, address in addresses or []:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            break
        with contextlib.suppress(OSError), socket.socket(family, kind, proto) as connection:
            connection.settimeout(left)
            connection.connect(address)
            return True
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

"""A Ray cluster address checked before Ray is asked to join it: Ray retries a dead
endpoint for minutes (``127.0.0.1:1``: over 150 s of "Failed to connect to GCS"; a dead
``ray://`` endpoint: 40 s), so latentlens first opens a TCP connection to it itself and
names the address in a one-line error when nothing answers."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

# Seconds to keep trying to reach an address before giving up (a head node that is
# starting may take a few seconds to listen).
REACH_SECONDS = 6.0


def host_and_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for the
    addresses Ray resolves itself (``auto``, ``local``); a one-line error otherwise."""
    if address in ("auto", "local"):
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if parts.scheme not in ("ray", "gcs") or not parts.hostname:
        raise ValueError(
            f"--address {address!r} is not a Ray address: give HOST:PORT (a cluster's GCS), "
            "ray://HOST:PORT (Ray client) or auto"
        )
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        raise ValueError(f"--address {address!r} has no port: give HOST:PORT")
    return parts.hostname, port


def check_reachable(address: str, seconds: float = REACH_SECONDS) -> None:
    """Refuse ``address`` when no TCP connection to it opens within ``seconds``."""
    target = host_and_port(address)
    if target is None:
        return
    deadline = time.monotonic() + seconds
    error: OSError | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(target, timeout=max(0.1, deadline - time.monotonic())):
                return
        except OSError as err:  # refused, unreachable, unknown host, timed out
            error = err
            time.sleep(0.5)
    reason = error.strerror or str(error) if error else "timed out"
    raise ValueError(
        f"--address {address}: nothing answers there ({reason}, {seconds:.0f} s); start the "
        "cluster (ray start --head) or give its address, or drop --address for a local Ray"
    )

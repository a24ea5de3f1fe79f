"""Whether a model endpoint can be reached now: a cheap probe, answered from memory for a few seconds.

`/healthz` is asked often (a load balancer, a dashboard, `daifu serve` at start); a health that says
"available" while the model server is down sends every crash to the rules engine's fallback without
anyone knowing why. Opening a TCP connection to the endpoint's host and port tells the common cases
apart (nothing listening, a host that does not resolve, a network that drops the packets) within
`PROBE_S`, without a request the endpoint would bill or log; what it answered is kept `KEEP_S`.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

PROBE_S = 1.0
"""Seconds the connection may take before the endpoint counts as unreachable."""

KEEP_S = 10.0
"""Seconds a probe's answer is reused."""

_seen: dict[str, tuple[float, str | None]] = {}
_lock = threading.Lock()


def unreachable(url: str) -> str | None:
    """Why the endpoint at `url` cannot be reached now (`None`: a connection opened), probed at most
    once every `KEEP_S` seconds per URL."""
    now = time.monotonic()
    with _lock:
        seen = _seen.get(url)
    if seen is not None and now - seen[0] < KEEP_S:
        return seen[1]
    found = _probe(url)
    with _lock:
        _seen[url] = (time.monotonic(), found)
    return found


def forget() -> None:
    """Drop every remembered answer (tests; an endpoint known to have come up)."""
    with _lock:
        _seen.clear()


def _probe(url: str) -> str | None:
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return f"{url} names no host"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{url} has no valid port"
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return None
    except OSError as error:
        why = error.strerror or str(error) or type(error).__name__
        return f"cannot connect to {host}:{port} ({why}, within {PROBE_S:g} s)"

"""Reconnecting to the headset: the settings check, back-off schedule and connect attempt, shared.

The pose client (:mod:`.client`, a blocking thread) and the panel video sender (:mod:`.video`, non-blocking,
polled) both wait ``first_s`` after a failed attempt, double the wait up to ``max_s`` on each further
failure and go back to ``first_s`` once the connection carried data. Plain Python, no ROS.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field
from typing import Protocol


def _check_positive(name: str, v: object) -> None:
    if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


def validate_backoff(first_s: float, max_s: float) -> None:
    """Raise ValueError unless ``0 < first_s <= max_s`` (both finite); names match the configs."""
    _check_positive("reconnect_s", first_s)
    _check_positive("reconnect_max_s", max_s)
    if max_s < first_s:
        raise ValueError("reconnect_max_s must be >= reconnect_s")


def validate_link(port: int, reconnect_s: float, reconnect_max_s: float, **timeouts_s: float) -> None:
    """A headset link's settings: the port, the back-off and each named timeout (finite, > 0)."""
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    validate_backoff(reconnect_s, reconnect_max_s)
    for name, v in timeouts_s.items():
        _check_positive(name, v)


@dataclass
class Backoff:
    """Exponential back-off between connection attempts.

    ``failed()`` gives the wait before the next attempt and doubles the one after it; ``reset()`` after a
    connection that delivered goes back to the short wait.
    """

    first_s: float
    max_s: float
    delay_s: float = field(init=False)

    def __post_init__(self) -> None:
        validate_backoff(self.first_s, self.max_s)
        self.delay_s = self.first_s

    def failed(self) -> float:
        """The wait before the next attempt; doubles the one after it."""
        wait, self.delay_s = self.delay_s, min(self.delay_s * 2, self.max_s)
        return wait

    def reset(self) -> None:
        """Back to the short wait (a connection delivered)."""
        self.delay_s = self.first_s


class LinkStats(Protocol):
    """The counters a link keeps about its connection attempts (``ClientStats``, ``SenderStats``)."""

    state: str
    connect_failures: int
    last_error: str


def try_connect(host: str, port: int, timeout_s: float, stats: LinkStats) -> socket.socket | None:
    """One connection attempt: the socket with Nagle off, or None.

    Nagle is off because small pose lines and frames must not wait. On failure it returns None with the
    failure counted in ``stats`` (state "backoff"); the caller then waits ``Backoff.failed()``.
    """
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        stats.connect_failures += 1
        stats.last_error = f"connect: {exc}"
        stats.state = "backoff"
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock

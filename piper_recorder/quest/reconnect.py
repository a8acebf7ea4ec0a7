"""Reconnecting to the headset: the back-off schedule and the TCP connect shared by the pose client
(:mod:`.client`, a blocking thread) and the panel video sender (:mod:`.video`, non-blocking, polled).

Both wait ``first_s`` after a failed attempt, double the wait up to ``max_s`` on each further
failure and go back to ``first_s`` once the connection carried data. Plain Python, no ROS.
"""
from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field


def validate_backoff(first_s: float, max_s: float) -> None:
    """Raise ValueError unless ``0 < first_s <= max_s`` (both finite); names match the configs."""
    for name, v in (("reconnect_s", first_s), ("reconnect_max_s", max_s)):
        if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if max_s < first_s:
        raise ValueError("reconnect_max_s must be >= reconnect_s")


@dataclass
class Backoff:
    """Exponential back-off: ``failed()`` gives the wait before the next attempt and doubles the one
    after it; ``reset()`` after a connection that delivered goes back to the short wait."""

    first_s: float
    max_s: float
    delay_s: float = field(init=False)

    def __post_init__(self) -> None:
        validate_backoff(self.first_s, self.max_s)
        self.delay_s = self.first_s

    def failed(self) -> float:
        wait, self.delay_s = self.delay_s, min(self.delay_s * 2, self.max_s)
        return wait

    def reset(self) -> None:
        self.delay_s = self.first_s


def connect_tcp(host: str, port: int, timeout_s: float) -> socket.socket:
    """Open a TCP connection with Nagle off (small pose lines and frames must not wait); raises OSError."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock

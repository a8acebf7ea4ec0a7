"""A free TCP port on a host, for a process the graph starts on port 0 (the simulated headset's channels)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS's choice for port 0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]

"""Message rates over a sliding window, for the graph-health table."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RateMeter:
    """Arrival times of one topic's messages over the last ``window_s`` seconds (monotonic clock).

    ``rate(now)`` is (messages in the window - 1) / their span once two arrived, so a 200 Hz topic reads
    200 and not 199 over a 1 s window; it falls to 0 once fewer than two arrivals lie within the window
    (``age`` says how long the topic has been silent).
    """

    window_s: float = 2.0
    total: int = 0
    last_t: float | None = None
    _times: deque[float] = field(default_factory=deque)

    def tick(self, t: float) -> None:
        """One message arrived at ``t``."""
        self.total += 1
        self.last_t = t
        self._times.append(t)
        self._trim(t)

    def _trim(self, now: float) -> None:
        while self._times and self._times[0] < now - self.window_s:
            self._times.popleft()

    def rate(self, now: float) -> float:
        """Messages per second over the window ending at ``now``; 0 with fewer than two in it."""
        self._trim(now)
        if len(self._times) < 2:
            return 0.0
        span = self._times[-1] - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else 0.0

    def age(self, now: float) -> float | None:
        """Seconds since the last message, or None if none arrived."""
        return None if self.last_t is None else max(0.0, now - self.last_t)

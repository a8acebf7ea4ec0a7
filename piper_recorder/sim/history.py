"""A short history of stamped EEF positions, interpolated to a camera's capture time.

The camera renders the EEF *at the frame stamp*, so a recorded frame and the arm state with the
same stamp agree. Poses arrive asynchronously, so the camera captures slightly in the past (its
render latency) where the history already brackets the capture time.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Sequence

import numpy as np


class PoseHistory:
    """Thread-safe ring of (stamp_ns, xyz); ``at(t)`` interpolates linearly, holding the ends."""

    def __init__(self, maxlen: int = 512):
        self._stamps: deque[int] = deque(maxlen=maxlen)
        self._points: deque[np.ndarray] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def add(self, stamp_ns: int, xyz: Sequence[float] | np.ndarray) -> None:
        """Append a position; an older stamp is ignored and an equal one replaces the newest point."""
        p = np.asarray(xyz, float).reshape(3)
        with self._lock:
            if self._stamps and stamp_ns <= self._stamps[-1]:
                if stamp_ns == self._stamps[-1]:
                    self._points[-1] = p
                return  # out of order: keep the history monotonic
            self._stamps.append(int(stamp_ns))
            self._points.append(p)

    def at(self, stamp_ns: int) -> np.ndarray | None:
        """The position at ``stamp_ns``, interpolated (held beyond the ends); None while empty."""
        with self._lock:
            if not self._stamps:
                return None
            stamps = list(self._stamps)
            i = bisect.bisect_right(stamps, stamp_ns)
            if i == 0:
                return self._points[0].copy()
            if i == len(stamps):
                return self._points[-1].copy()
            t0, t1 = stamps[i - 1], stamps[i]
            a = (stamp_ns - t0) / (t1 - t0)
            return (1.0 - a) * self._points[i - 1] + a * self._points[i]

    def latest_stamp(self) -> int | None:
        """The newest stamp held (ns), or None while empty."""
        with self._lock:
            return self._stamps[-1] if self._stamps else None

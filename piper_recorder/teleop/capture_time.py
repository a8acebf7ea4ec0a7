"""Header stamps (host/ROS clock, ns) -> this host's monotonic clock (s), for teleop's staleness rules.

The stamp of a headset input is its capture time on the host clock (quest_bridge maps the headset's
clock to it); teleop times inputs on the monotonic clock, which never steps. Converting one stamp by
reading both clocks at the moment it arrives (``mono - (host_now - stamp)``) makes the result earlier
by however long the thread was held between the two reads (a GIL hand-over, an OS preemption), which on
a loaded machine can exceed the time between two headset frames: a later input could come out earlier
than the one before.

``HostToMono`` converts with the host-minus-monotonic offset of the tightest clock-read pair of the
last ``window_s`` (each conversion reads monotonic, host, monotonic: the pair's width bounds its error;
a preempted read is wide and loses to any unpreempted one), so one held thread does not move the
result. The window follows slow host clock slewing (NTP: at most 0.5 ms/s); a host clock step shows
once the pairs of the window have been replaced.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class HostToMono:
    """``convert(stamp_ns)`` -> monotonic seconds, never later than now; clocks injectable for tests."""

    def __init__(
        self,
        host_ns: Callable[[], int] = time.time_ns,
        mono_ns: Callable[[], int] = time.monotonic_ns,
        window_s: float = 2.0,
    ):
        self._host, self._mono = host_ns, mono_ns
        self._window_ns = round(window_s * 1e9)
        # (read time, width, offset): widths increase from the front, so the front is the tightest pair
        self._pairs: deque[tuple[int, int, int]] = deque()

    def offset_ns(self) -> tuple[int, int]:
        """Read the clocks once more.

        Returns (host - monotonic offset of the tightest recent pair, now on the monotonic clock).
        """
        m0 = self._mono()
        h = self._host()
        m1 = self._mono()
        width, off = m1 - m0, h - (m0 + m1) // 2
        q = self._pairs
        while q and q[-1][1] >= width:
            q.pop()
        q.append((m1, width, off))
        while q[0][0] < m1 - self._window_ns:
            q.popleft()
        return q[0][2], m1

    def convert(self, stamp_ns: int) -> float:
        """Monotonic seconds of a host-clock stamp (0 or less: unstamped, now)."""
        off, now = self.offset_ns()
        if stamp_ns <= 0:
            return now / 1e9
        return min(stamp_ns - off, now) / 1e9

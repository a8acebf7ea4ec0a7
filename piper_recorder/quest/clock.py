"""Map the headset's monotonic clock to the host clock, so poses carry capture time, not arrival time.

Each frame gives one observation ``d = host_recv_ns - mono_ns = offset + delay`` where ``delay``
(USB/adb + TCP + scheduling) is always >= the path's minimum delay and mostly jitter. The minimum of
``d`` over a sliding window is therefore a robust estimate of ``offset + min_delay``: late frames
(bursts, stalls) only raise ``d`` and never move the estimate. Capture time is ``mono + offset``.

Accuracy: the estimate is late by exactly the minimum one-way delay of the window (unobservable
without a round trip; for adb over USB it is sub-millisecond), plus headset/host drift within the
window (50 ppm over 10 s = 0.5 ms). Measured figures are in test/quest/test_quest_clock.py and the report.

Clock jumps: a headset reboot/reconnect (``reset()`` from the client), the headset clock going
backwards, or a consistent jump of the host clock (every observation for at least ``jump_confirm_s``
of receive time later than the estimate by more than ``jump_threshold_s``) reset the window; a jump
the other way is followed immediately because it lowers the minimum. "For at least" matters: after
a stall, a backlog arrives at one instant with its oldest line far above the estimate; that single
instant must not count as confirmed, or the clock re-bases so that the whole backlog gets "now" as
capture time and seconds-old poses look fresh.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class SlidingMin:
    """Minimum of (key, value) pairs whose key is within ``span`` of the newest key (O(1) amortised)."""

    def __init__(self, span: int):
        self.span = span
        self._q: deque[tuple[int, int]] = deque()

    def push(self, key: int, value: int) -> None:
        """Add ``value`` at ``key``; drop what fell out of the window."""
        q = self._q
        while q and q[-1][1] >= value:
            q.pop()
        q.append((key, value))
        while q[0][0] < key - self.span:
            q.popleft()

    def clear(self) -> None:
        """Forget every value."""
        self._q.clear()

    @property
    def min(self) -> int | None:
        """The window's minimum, or None when it is empty."""
        return self._q[0][1] if self._q else None

    def __bool__(self) -> bool:
        return bool(self._q)


@dataclass
class ClockMapperConfig:
    """The clock mapper's settings."""

    window_s: float = 10.0  # sliding window of the minimum; long enough to catch a low-delay frame
    jump_threshold_s: float = 0.25  # a host clock step larger than this resets the window
    jump_confirm_s: float = 1.0  # ... once every observation for this long confirms it

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not self.window_s > 0 or not self.jump_confirm_s > 0 or not self.jump_threshold_s > 0:
            raise ValueError("clock mapper: window_s, jump_threshold_s and jump_confirm_s must be > 0")
        if self.jump_confirm_s > self.window_s:
            raise ValueError("clock mapper: jump_confirm_s must be <= window_s")


class MonoClockMapper:
    """Headset mono (float s) -> host time (int ns) with the sliding minimum-delay offset."""

    def __init__(self, config: ClockMapperConfig | None = None):
        self.config = config or ClockMapperConfig()
        self.config.validate()
        self._window = SlidingMin(int(self.config.window_s * 1e9))
        self._recent = SlidingMin(int(self.config.jump_confirm_s * 1e9))
        self._first_recv_ns: int | None = None
        self._last_mono_ns: int | None = None
        self._above_since_ns: int | None = None  # receive time since which every d is above the estimate
        self.resets = 0
        self.samples = 0

    def reset(self) -> None:
        """Forget all observations (new connection, headset restart)."""
        self._window.clear()
        self._recent.clear()
        self._first_recv_ns = None
        self._last_mono_ns = None
        self._above_since_ns = None
        self.resets += 1

    @property
    def offset_ns(self) -> int | None:
        """Current estimate of host_time - headset_mono (ns), or None before the first observation."""
        return self._window.min

    def observe(self, mono_s: float, recv_ns: int) -> int:
        """Add one (capture mono, host receive time) pair; return the mapped capture time in ns.

        The returned stamp never exceeds ``recv_ns`` (a frame cannot be captured after it arrived).
        """
        mono_ns = round(mono_s * 1e9)
        if self._last_mono_ns is not None and mono_ns < self._last_mono_ns:
            self.reset()  # headset clock went backwards: a restart, not jitter
        self._last_mono_ns = mono_ns
        d = recv_ns - mono_ns
        self._recent.push(recv_ns, d)
        if self._first_recv_ns is None:
            self._first_recv_ns = recv_ns
        current = self._window.min
        confirm_ns = int(self.config.jump_confirm_s * 1e9)
        if current is None or d - current <= self.config.jump_threshold_s * 1e9:
            self._above_since_ns = None
        elif self._above_since_ns is None:
            self._above_since_ns = recv_ns
        recent = self._recent.min
        if (
            current is not None
            and recent is not None
            and self._above_since_ns is not None
            and recv_ns - self._above_since_ns >= confirm_ns
            and recent - current > self.config.jump_threshold_s * 1e9
        ):
            self._window.clear()
            self._window.push(recv_ns, recent)
            self._first_recv_ns = recv_ns
            self._above_since_ns = None
            self.resets += 1
        self._window.push(recv_ns, d)
        self.samples += 1
        offset = self._window.min
        assert offset is not None  # just pushed
        return min(mono_ns + offset, recv_ns)

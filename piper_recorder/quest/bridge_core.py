"""What the quest_bridge node publishes for each headset message, without ROS (fuzzable, testable).

``BridgeCore.handle(msg, recv_ns)`` stamps frames with their capture time (``MonoClockMapper``) and
returns plain records the node turns into messages one to one: poses only for devices reported
valid and tracked, joy for both hands on every frame, the raw line for every accepted message, and
the hello info. A last finiteness check guards every number that leaves (defence in depth behind
the parser; a failing record is dropped and counted as ``non_finite_output``).
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from .clock import ClockMapperConfig, MonoClockMapper
from .protocol import DEVICES, HANDS, Frame, Hello, Message

FRAME_PREFIX = "quest_"
MAX_STAMP_AGE_NS = 60 * 10**9


@dataclass(frozen=True)
class PoseOut:
    device: str  # head | left | right  -> /quest/<device>/pose
    stamp_ns: int
    frame_id: str  # "quest_<space>"
    pos: tuple[float, float, float]
    quat_xyzw: tuple[float, float, float, float]


@dataclass(frozen=True)
class JoyOut:
    hand: str  # left | right  -> /quest/<hand>/joy
    stamp_ns: int
    frame_id: str
    axes: tuple[float, float, float, float]  # trigger, squeeze, stick_x, stick_y
    buttons: tuple[int, int, int, int]  # primary, secondary, stick_click, menu


@dataclass
class BridgeOutput:
    poses: list[PoseOut] = field(default_factory=list)
    joys: list[JoyOut] = field(default_factory=list)
    raw: str | None = None  # -> /quest/raw
    hello: dict[str, Any] | None = None  # -> /quest/hello (JSON)


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


class BridgeCore:
    """Stateful message -> output mapping; owns the clock mapper and the rate/age counters."""

    def __init__(self, clock: ClockMapperConfig | None = None, frame_prefix: str = FRAME_PREFIX,
                 rate_window_s: float = 2.0):
        self.clock = MonoClockMapper(clock)
        self.frame_prefix = frame_prefix
        self.counters: Counter[str] = Counter()
        self.hello: dict[str, Any] | None = None
        self.last_frame: Frame | None = None
        self.last_frame_recv_ns = 0
        self.last_delay_ns = 0  # recv - mapped capture of the last frame (arrival latency estimate)
        self._rate_window_ns = int(rate_window_s * 1e9)
        self._frame_times: deque[int] = deque()

    def on_connection(self) -> None:
        """A new connection may be a restarted headset with a new clock."""
        self.clock.reset()
        self._frame_times.clear()

    def handle(self, msg: Message, recv_ns: int) -> BridgeOutput:
        out = BridgeOutput(raw=msg.raw)
        if isinstance(msg, Hello):
            self.hello = msg.info
            out.hello = msg.info
            self.counters["hello"] += 1
            return out
        if not isinstance(msg, Frame):
            self.counters["heartbeat"] += 1
            return out
        stamp = self.clock.observe(msg.mono, recv_ns)
        if not recv_ns - MAX_STAMP_AGE_NS <= stamp <= recv_ns:  # cannot happen by construction; guard it
            self.counters["bad_stamp"] += 1
            return out
        self.counters["frames"] += 1
        self.last_frame, self.last_frame_recv_ns = msg, recv_ns
        self.last_delay_ns = recv_ns - stamp
        self._frame_times.append(recv_ns)
        while self._frame_times and self._frame_times[0] < recv_ns - self._rate_window_ns:
            self._frame_times.popleft()
        frame_id = self.frame_prefix + msg.space
        for name in DEVICES:
            dev = getattr(msg, name)
            if not dev.usable:
                self.counters[f"untracked_{name}"] += 1
                continue
            if not _finite(*dev.pos, *dev.quat):
                self.counters["non_finite_output"] += 1
                continue
            out.poses.append(PoseOut(name, stamp, frame_id, dev.pos, dev.quat))
        for hand in HANDS:
            h = msg.hand(hand)
            axes = (h.trigger, h.squeeze, h.stick[0], h.stick[1])
            if not _finite(*axes):
                self.counters["non_finite_output"] += 1
                continue
            out.joys.append(JoyOut(hand, stamp, frame_id, axes,
                                   (int(h.primary), int(h.secondary), int(h.stick_click), int(h.menu))))
        return out

    def frame_rate_hz(self, now_ns: int) -> float:
        """Frames received over the last rate window, per second (0 when stale)."""
        times = [t for t in self._frame_times if t >= now_ns - self._rate_window_ns]
        return len(times) * 1e9 / self._rate_window_ns

"""What the quest_bridge node publishes for each headset message, without ROS (fuzzable, testable).

``BridgeCore.handle(msg, recv_ns)`` stamps frames with their capture time (``MonoClockMapper``) and
returns plain records the node turns into messages one to one: poses only for devices reported
valid and tracked, joy for both hands on every frame, the raw line for every accepted message, and
the hello info, with its JSON for /quest/hello. A last finiteness check guards every number that
leaves (defence in depth behind the parser; a failing record is dropped and counted as
``non_finite_output``), and a hello that cannot be encoded as JSON is dropped and counted as
``unencodable_hello`` (the parser refuses those first).

``handle_batch`` takes every message that was waiting in the socket at once. When the bridge fell
behind (a burst, or the bridge starved of CPU) that is a backlog of old frames, and publishing them
all would replay seconds of old motion into teleop. The control records are therefore coalesced: per
device only the newest pose; per hand only the joys that carry a change (a button edge), the one
with the lowest grip (a release anywhere in the backlog is never coalesced away) and the newest.
Every raw line and hello still goes out, in order, for recording.

A new connection, and a hello that names another ``page`` than the one streaming (piper-quest-web
numbers each page it serves), start a new input source (a restarted app, a reload or a second tab
taking over the relay): ``BridgeOutput.source_change`` asks the node to mark it on each hand's joy
stream before anything of the new source, and the clock mapper starts afresh. Any other hello (the
app's or the page's metadata again) changes nothing.
"""

from __future__ import annotations

import itertools
import json
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
    """One device pose to publish on ``/quest/<device>/pose``, stamped with its capture time."""

    device: str  # head | left | right  -> /quest/<device>/pose
    stamp_ns: int
    frame_id: str  # "quest_<space>"
    pos: tuple[float, float, float]
    quat_xyzw: tuple[float, float, float, float]


@dataclass(frozen=True)
class JoyOut:
    """One hand's axes and buttons to publish on ``/quest/<hand>/joy``."""

    hand: str  # left | right  -> /quest/<hand>/joy
    stamp_ns: int
    frame_id: str
    axes: tuple[float, float, float, float]  # trigger, squeeze, stick_x, stick_y
    buttons: tuple[int, int, int, int]  # primary, secondary, stick_click, menu


@dataclass
class BridgeOutput:
    """What one headset message makes the node publish."""

    poses: list[PoseOut] = field(default_factory=list)
    joys: list[JoyOut] = field(default_factory=list)
    raw: str | None = None  # -> /quest/raw
    hello: dict[str, Any] | None = None  # the headset's app info
    hello_json: str | None = None  # -> /quest/hello
    source_change: bool = False  # a new input source begins here: -> an empty Joy on each hand, first


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


class BridgeCore:
    """Stateful message -> output mapping; owns the clock mapper and the rate/age counters."""

    def __init__(
        self, clock: ClockMapperConfig | None = None, frame_prefix: str = FRAME_PREFIX, rate_window_s: float = 2.0
    ):
        self.clock = MonoClockMapper(clock)
        self.frame_prefix = frame_prefix
        self.counters: Counter[str] = Counter()
        self.hello: dict[str, Any] | None = None
        self.last_frame: Frame | None = None
        self.last_frame_recv_ns = 0
        self.last_delay_ns = 0  # recv - mapped capture of the last frame (arrival latency estimate)
        self._rate_window_ns = int(rate_window_s * 1e9)
        self._frame_times: deque[int] = deque()
        self._page: Any = None  # the relay's number of the page streaming (None: no relay, or not yet said)

    def on_connection(self) -> BridgeOutput:
        """A new connection: a new input source, maybe a restarted headset with a new clock."""
        self._new_source()
        self._page = None
        return BridgeOutput(source_change=True)

    def _new_source(self) -> None:
        self.clock.reset()
        self._frame_times.clear()
        self.counters["source_changes"] += 1

    def handle(self, msg: Message, recv_ns: int) -> BridgeOutput:
        """What one accepted message, received at ``recv_ns``, makes the node publish."""
        out = BridgeOutput(raw=msg.raw)
        if isinstance(msg, Hello):
            try:
                text = json.dumps(msg.info, allow_nan=False)
            except (ValueError, RecursionError):
                self.counters["unencodable_hello"] += 1
                return out
            self.hello = msg.info
            out.hello, out.hello_json = msg.info, text
            page = msg.info.get("page")
            if page is not None and page != self._page:
                self._page = page
                out.source_change = True
                self._new_source()
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
            out.joys.append(
                JoyOut(hand, stamp, frame_id, axes, (int(h.primary), int(h.secondary), int(h.stick_click), int(h.menu)))
            )
        return out

    def handle_batch(self, msgs: list[Message], recv_ns: int) -> list[BridgeOutput]:
        """``handle`` for every message received together, with the control records coalesced."""
        outs = [self.handle(m, recv_ns) for m in msgs]
        self.counters["coalesced"] += coalesce(outs)
        return outs

    def frame_rate_hz(self, now_ns: int) -> float:
        """Frames received over the last rate window, per second (0 when stale)."""
        times = [t for t in self._frame_times if t >= now_ns - self._rate_window_ns]
        return len(times) * 1e9 / self._rate_window_ns


def coalesce(outs: list[BridgeOutput]) -> int:
    """Strip superseded control records from a backlog, in place; returns how many were dropped.

    Kept: the newest pose of each device; for each hand the newest joy, the joy with the lowest grip
    (where a release happened, so teleop releases even if the grip closed again later in the
    backlog), and every joy whose buttons differ from that hand's previous joy (each press and
    release of A/B/X/Y/menu stays an edge). Raw lines and hellos are untouched.
    """
    if len(outs) < 2:
        return 0
    newest_pose: dict[str, tuple[int, int]] = {}
    joys: dict[str, list[tuple[int, int, JoyOut]]] = {}
    for i, out in enumerate(outs):
        for k, p in enumerate(out.poses):
            newest_pose[p.device] = (i, k)
        for k, j in enumerate(out.joys):
            joys.setdefault(j.hand, []).append((i, k, j))
    keep_joy: set[tuple[int, int]] = set()
    for seq in joys.values():
        keep_joy.add(seq[-1][:2])
        keep_joy.add(min(seq, key=lambda e: e[2].axes[1])[:2])  # lowest squeeze (the first of equals)
        for prev, cur in itertools.pairwise(seq):
            if cur[2].buttons != prev[2].buttons:
                keep_joy.add(cur[:2])
    kept_poses = set(newest_pose.values())
    dropped = 0
    for i, out in enumerate(outs):
        poses = [p for k, p in enumerate(out.poses) if (i, k) in kept_poses]
        js = [j for k, j in enumerate(out.joys) if (i, k) in keep_joy]
        dropped += len(out.poses) - len(poses) + len(out.joys) - len(js)
        out.poses, out.joys = poses, js
    return dropped

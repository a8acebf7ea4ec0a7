"""Stamped events -> rows on an exact time grid plus per-camera frames (README.md, Timing).

The rules, in one place for the live recorders and the rosbag converter:

- Grid: tick k is at ``t_k = start_ns + floor(k * 1e9 / fps)`` (integer ns), assembled once
  ``now >= t_k + config.delay_ns(depth)``: the lateness allowance plus, when rows carry frames (nominal, RGB-D),
  the frame horizon (``frame_assign``). The cameras' phase estimates start from their captures before the start
  (``history``); when those cover less than ``frame_assign.WARMUP_S`` the first tick waits. Timer wake-ups never
  move the grid.
- A row holds, for every input, the newest sample stamped <= t_k (buffers sort by stamp: arrival order does not
  matter). A sample older than ``stale_s`` is still used and counted in ``values_stale``; a message stamped at or
  before an assembled tick counts in ``messages_late`` (still used later); non-finite samples are dropped
  (``messages_invalid``), so rows hold the last finite value.
- Origin: rows never contain NaN, so ticks before every required input (and one frame per camera) has a sample
  are skipped (``skipped_start_ticks``). The first complete tick k0 is the origin: row i is tick k0 + i,
  ``timestamp = grid_timestamp(i, fps)`` (i / fps rounded up to float32), ``origin_ns = t_k0``. A pre-roll (the
  latest sample of each input before ``start_ns``) makes k0 = 0.
- Frames, ``capture`` mode: each frame stamped in [origin, end] goes to ``sink.frame`` in stamp order at
  ``t = (stamp - origin_ns) / 1e9`` once ``now >= stamp + lateness``; the newest frame at or before the origin is
  sent at t = 0 (row 0 has a frame), unless the next one's PTS is 0 too (``pts_ticks``: within 1/90000 s of the
  origin; that one then opens the video). A frame stamped at or before
  one already sent is dropped (``frames_late``); gaps over 1.5 periods count ``round(dt * fps) - 1`` in
  ``frames_missing``, whatever the cause.
- Frames, ``nominal`` mode (always for RGB-D): every row carries, per camera, the frame chosen by causal
  phase-locked pairing (``frame_assign``). Reusing the previous row's frame counts ``frames_repeated``, frames
  skipped between rows ``frames_dropped``, a frame older than ``stale_s`` ``frames_stale``; ``frames_ahead``,
  ``frame_ahead_max_ms`` / ``frame_behind_max_ms`` (``frame_offset_max_ms`` the larger) measure new frames
  against t_k; a frame arriving after its row was assembled counts ``frames_late``. The LeRobot sink writes the
  frame re-stamped to the row time.
- Raw headset lines stamped in [start_ns, end] go to ``sink.raw_quest`` in stamp order.
- ``finish(end_ns)`` assembles every tick with t_k <= end_ns and releases what is buffered up to it; call it after
  feeding every message received up to ``end_ns + config.delay_ns(depth)``.

Inputs and row values come from the feature table (``AssemblyConfig.table``): ``add_input(name, stamp, values)``
takes any of its inputs, ``add_joint_state`` & co. the Piper inputs by name; all stamps are int ns of the ROS
clock. Poses come in ROS order (x, y, z, w) and rows store (w, x, y, z). RGB-D colour and depth arrive apart:
``DepthPairer`` pairs them by nearest stamp before ``add_frame``. ``counters.to_dict()`` and the sink's counters
make the episode's record.

Determinism: rows depend only on stamps, so the same messages in any order give the same rows as long as each
arrives before ``now`` passes its stamp + lateness. To reproduce a live episode from a bag (the live recorder does
exactly this):

1. ``start_ns`` = the "started" event's start_ns; the recorder's fps / cameras / timestamp_mode / lateness_s /
   stale_s (``depth=True`` for RGB-D).
2. Pre-roll: feed the newest message of each input and camera received before start_ns (for a camera whose
   frames go in rows, also those captured within ``cfg.preroll_frames_ns(depth)`` before it), and pass
   ``history``: per camera the capture stamps received before start_ns as the recorder's ``CaptureHistory``
   kept them.
3. Then each message received in [start_ns, end_ns + cfg.delay_ns(depth)] in receive order: ``advance(t_recv)``,
   then ``add_*(stamp, ...)`` (raw headset lines: stamp = receive time).
4. ``finish(end_ns)`` with the "saved" event's end_ns; its start_ns is ``origin_ns`` and its rows
   ``counters.rows``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from piper_recorder.features.table import PIPER_TABLE, FeatureTable
from piper_recorder.names import CAMERA

from ..timebase import grid_timestamp, pts_ticks
from .buffers import Sample, SampleBuffer
from .frame_assign import CAUSAL_TOL_NS, WARMUP_S, PhaseTracker, first_row_reach_ns, horizon_ns, pick, window_captures
from .messages import pose7

TIMESTAMP_MODES = ("capture", "nominal")
# The one default of each timing setting, for the assembler, both recorders (nodes and parameter
# files) and the bag converter. nominal: one frame per row at the row time, the mode every loader
# accepts (LeRobot's 1e-4 s tolerance, torchcodec, GR00T's index-based readers).
DEFAULT_TIMESTAMP_MODE = "nominal"
DEFAULT_LATENESS_S = 0.1  # a row is assembled this long after its time (covers GIL/encoder-start stalls)
# Inputs every row of the Piper table needs; "reward" is optional (0 until a reward arrives).
STATE_INPUTS = PIPER_TABLE.required


@dataclass(frozen=True)
class AssemblyConfig:
    """How stamped events become rows: rate, cameras, timestamp mode, lateness and staleness, and the feature table."""

    fps: float = float(CAMERA.fps)
    cameras: tuple[str, ...] = ("cam_front", "cam_wrist")
    timestamp_mode: str = DEFAULT_TIMESTAMP_MODE
    lateness_s: float = DEFAULT_LATENESS_S
    stale_s: float = 0.25
    table: FeatureTable = PIPER_TABLE  # inputs sampled per row and the row values cut from them

    def validate(self) -> None:
        """Raise ``ValueError`` for a configuration the assembler cannot run with."""
        self.table.validate()
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps}")
        if self.timestamp_mode not in TIMESTAMP_MODES:
            raise ValueError(f"timestamp_mode must be one of {TIMESTAMP_MODES}, got {self.timestamp_mode!r}")
        if self.lateness_s < 0 or self.stale_s <= 0:
            raise ValueError("lateness_s must be >= 0 and stale_s > 0")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"duplicate camera names in {self.cameras}")

    def frames_in_rows(self, depth: bool = False) -> bool:
        """Rows carry their frames (nominal mode, RGB-D observations) rather than capture-time PTS."""
        return depth or self.timestamp_mode == "nominal"

    def frame_horizon_ns(self, depth: bool = False) -> int:
        """How far past t_k the frame of row k may be captured (0 when frames keep their capture time)."""
        return horizon_ns(1e9 / self.fps) if self.frames_in_rows(depth) else 0

    def preroll_frames_ns(self, depth: bool = False) -> int:
        """Frames captured this long before an episode's start that row 0 may take.

        ``frame_assign.first_row_reach_ns`` when rows carry frames; else only the newest at or before it.
        """
        return first_row_reach_ns(1e9 / self.fps) if self.frames_in_rows(depth) else 0

    def delay_ns(self, depth: bool = False) -> int:
        """How long after t_k row k is assembled.

        Every message it may use has arrived by then if each arrives within ``lateness_s`` of its stamp. Callers stop
        feeding ``end + delay`` after an end.
        """
        return round(self.lateness_s * 1e9) + self.frame_horizon_ns(depth)


@dataclass(frozen=True)
class Frame:
    """One camera capture: uint8 HxWx3 RGB, optional depth (uint16 mm or float m), capture stamp."""

    stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None


@dataclass(frozen=True)
class Row:
    """One assembled row: its index, grid time, values and frames, for a sink."""

    index: int  # row index within the episode (0-based)
    timestamp: np.float32  # grid_timestamp(index, fps)
    tick_ns: int  # absolute grid time of this row
    values: dict[str, np.ndarray]  # per table feature: arm_joint(6) arm_eef(7) gripper(1) cmd_eef(7) ...; float32
    frames: dict[str, Frame]  # per camera, the frame at/before tick_ns


class Sink(Protocol):
    """Where the assembler sends rows, frames and raw headset lines (the LeRobot and RGB-D sinks)."""

    def row(self, row: Row) -> None:
        """Take the next row."""

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        """Take a camera frame at ``t`` seconds from the row origin."""

    def raw_quest(self, line: str) -> None:
        """Take one raw headset line."""


@dataclass
class Counters:
    """What the assembly noticed about one episode; ``to_dict()`` is merged into episodes.jsonl."""

    timestamp_mode: str
    rows: int = 0
    skipped_start_ticks: int = 0
    messages_late: dict[str, int] = field(default_factory=dict)
    messages_invalid: dict[str, int] = field(default_factory=dict)  # non-finite values, dropped
    values_stale: dict[str, int] = field(default_factory=dict)
    frames_received: dict[str, int] = field(default_factory=dict)
    frames_sent: dict[str, int] = field(default_factory=dict)
    frames_dropped: dict[str, int] = field(default_factory=dict)
    frames_repeated: dict[str, int] = field(default_factory=dict)
    frames_late: dict[str, int] = field(default_factory=dict)
    frames_stale: dict[str, int] = field(default_factory=dict)
    frames_missing: dict[str, int] = field(default_factory=dict)  # capture mode: gaps in the sent frames
    # rows carrying frames, over each row's new frame (not repeats): captured after t_k (<= 1 ms, clock
    # noise), the largest capture - t_k > 0 and t_k - capture >= 0, and the largest |capture - t_k|
    frames_ahead: dict[str, int] = field(default_factory=dict)
    frame_ahead_max_ms: dict[str, float] = field(default_factory=dict)
    frame_behind_max_ms: dict[str, float] = field(default_factory=dict)
    frame_offset_max_ms: dict[str, float] = field(default_factory=dict)
    frames_unpaired: dict[str, int] = field(default_factory=dict)  # RGB-D: colour/depth images with no partner
    # rows carrying frames: the oldest frame any row carried, repeats included (a stalled camera's depth)
    frame_age_max_ms: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def _inc(d: dict[str, int], key: str, n: int = 1) -> None:
        d[key] = d.get(key, 0) + n

    def to_dict(self) -> dict[str, Any]:
        """The counters as plain values, for episodes.jsonl."""
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}


class EpisodeAssembler:
    """One episode's assembly. Not thread-safe: the caller serialises ``add_*``/``advance``/``finish``.

    ``history``: per camera, capture stamps seen before the episode (``CaptureHistory.before(start_ns)``);
    they only feed the phase trackers (frames themselves come through ``add_frame``), so row 0's slot
    comes from as many captures as later rows' and needs no warm-up when they cover ``WARMUP_S``.
    """

    def __init__(
        self,
        config: AssemblyConfig,
        start_ns: int,
        sink: Sink,
        depth: bool = False,
        history: Mapping[str, Sequence[int]] | None = None,
    ):
        config.validate()
        self.config, self.start_ns, self._sink, self._depth = config, int(start_ns), sink, depth
        # RGB-D observations always pair a frame with each row, whatever the LeRobot timestamp mode
        self._frames_in_rows = config.frames_in_rows(depth)
        f = Fraction(config.fps).limit_denominator(1_000_000)
        self._num, self._den = f.numerator, f.denominator
        self._period_ns = 1e9 * self._den / self._num
        self._delay_ns = config.delay_ns(depth)
        self._horizon_ns = config.frame_horizon_ns(depth)
        self._row0_reach_ns = first_row_reach_ns(self._period_ns)
        window = window_captures(config.fps)
        self._phase = {cam: PhaseTracker(self._period_ns, window) for cam in config.cameras}
        self._fed_ns: dict[str, int | None] = dict.fromkeys(config.cameras)  # tracker fed up to here
        history = history or {}
        self._history = {cam: sorted(int(s) for s in history.get(cam, ())) for cam in config.cameras}
        # the first tick also waits for the part of WARMUP_S of captures the history does not cover, so
        # every camera's phase estimate starts from several
        warmup = round(WARMUP_S * 1e9)
        covered = [max(0, self.start_ns - h[0]) if h else 0 for h in self._history.values()]
        self._warmup_ns = max([0] + [warmup - c for c in covered]) if self._frames_in_rows else 0
        self._finish_ns: int | None = None
        self._assembled_ns: int | None = None  # the furthest limit assembled to (assembled_until_ns)
        self._stale_ns = round(config.stale_s * 1e9)
        self._table = config.table
        self._dims = {spec.name: spec.dim for spec in config.table.inputs}
        self._required = config.table.required
        self._inputs: dict[str, SampleBuffer[int, np.ndarray]] = {name: SampleBuffer() for name in self._dims}
        self._frames: dict[str, SampleBuffer[int, Frame]] = {cam: SampleBuffer() for cam in config.cameras}
        self._raw: SampleBuffer[tuple[int, int], str] = SampleBuffer()
        self._raw_seq = 0
        self._next_k = 0
        self._last_tick_ns: int | None = None  # time of the last assembled (or skipped) tick
        self._origin_k: int | None = None
        self.origin_ns: int | None = None
        self._sent_ns: dict[str, int | None] = dict.fromkeys(config.cameras)  # last frame sent / chosen
        self._end_ns: int | None = None
        self.counters = Counters(timestamp_mode=config.timestamp_mode)
        for cam in config.cameras:
            for d in (
                self.counters.frames_received,
                self.counters.frames_sent,
                self.counters.frames_dropped,
                self.counters.frames_repeated,
                self.counters.frames_late,
                self.counters.frames_stale,
            ):
                d[cam] = 0
            if not self._frames_in_rows:
                self.counters.frames_missing[cam] = 0
            else:
                self.counters.frames_ahead[cam] = 0
                self.counters.frame_ahead_max_ms[cam] = 0.0
                self.counters.frame_behind_max_ms[cam] = 0.0
                self.counters.frame_offset_max_ms[cam] = 0.0
            if depth:
                self.counters.frames_unpaired[cam] = 0

    # ---- grid -------------------------------------------------------------------------------
    def tick_ns(self, k: int) -> int:
        """The grid time of tick ``k`` (integer ns, exact)."""
        return self.start_ns + (k * 1_000_000_000 * self._den) // self._num

    @property
    def next_tick_ns(self) -> int:
        """Grid time of the next tick to assemble (it is due at ``next_due_ns``)."""
        return self.tick_ns(self._next_k)

    @property
    def next_due_ns(self) -> int:
        """When the next tick may be assembled: its grid time + ``config.delay_ns``.

        The first one also waits for the phase warm-up.
        """
        return self.tick_ns(self._next_k) + self._delay_ns + (self._warmup_ns if self._next_k == 0 else 0)

    @property
    def assembled_until_ns(self) -> int | None:
        """Everything up to this time (rows, frames sent with their capture time, raw lines) has gone to the sink.

        None before the first ``advance``. An episode cannot end before it: those rows are written (the sink takes no
        row back), so a stop stamped earlier ends here.
        """
        return self._assembled_ns

    @property
    def rows(self) -> int:
        """The number of rows sent to the sink."""
        return self.counters.rows

    @property
    def finished(self) -> bool:
        """Whether ``finish`` has been called."""
        return self._end_ns is not None

    def missing_inputs(self, t_ns: int | None = None) -> list[str]:
        """Required inputs with no sample at or before t_ns (default: the next tick); for status."""
        t = self.tick_ns(self._next_k) if t_ns is None else t_ns
        missing = [n for n in self._required if self._inputs[n].latest_at(t) is None]
        return missing + [c for c in self.config.cameras if self._frames[c].latest_at(t + self._horizon_ns) is None]

    # ---- inputs -----------------------------------------------------------------------------
    def _add(self, name: str, stamp_ns: int, value: np.ndarray) -> None:
        if not np.isfinite(value).all():
            Counters._inc(self.counters.messages_invalid, name)  # never into a row: hold the last good value
            return
        stamp_ns = int(stamp_ns)
        if self._last_tick_ns is not None and stamp_ns <= self._last_tick_ns:
            Counters._inc(self.counters.messages_late, name)
        self._inputs[name].insert(stamp_ns, value)

    def add_input(self, name: str, stamp_ns: int, values: Sequence[float] | np.ndarray) -> None:
        """One sample of the table's input ``name``: ``dim`` values (as a message adapter reads them)."""
        dim = self._dims.get(name)
        if dim is None:
            raise KeyError(f"unknown input {name!r} (inputs: {list(self._dims)})")
        v = np.asarray(values, dtype=np.float32).reshape(-1)
        if v.shape != (dim,):
            raise ValueError(f"input {name!r} needs {dim} values, got {v.shape[0]}")
        self._add(name, stamp_ns, v)

    def add_joint_state(self, stamp_ns: int, positions: Sequence[float]) -> None:
        """joint1..joint6 (rad) then the gripper width (m): 7 values."""
        v = np.asarray(positions, dtype=np.float32).reshape(-1)
        if v.shape != (7,):
            raise ValueError(f"joint state needs 7 positions (6 joints + gripper), got {v.shape[0]}")
        self.add_input("joint_states", stamp_ns, v)

    def add_eef_pose(self, stamp_ns: int, position: Sequence[float], quat_xyzw: Sequence[float]) -> None:
        """Add a measured end-effector pose (ROS xyzw quaternion in; rows hold wxyz)."""
        self.add_input("eef_pose", stamp_ns, pose7(position, quat_xyzw))

    def add_commanded_pose(self, stamp_ns: int, position: Sequence[float], quat_xyzw: Sequence[float]) -> None:
        """Add a commanded end-effector pose (ROS xyzw quaternion in; rows hold wxyz)."""
        self.add_input("commanded_pose", stamp_ns, pose7(position, quat_xyzw))

    def add_commanded_gripper(self, stamp_ns: int, width_m: float) -> None:
        """Add a commanded gripper width (m)."""
        self.add_input("commanded_gripper", stamp_ns, np.array([width_m], dtype=np.float32))

    def add_reward(self, stamp_ns: int, reward: float) -> None:
        """Add a reward (rows hold 0 until the first one)."""
        self.add_input("reward", stamp_ns, np.array([reward], dtype=np.float32))

    def add_frame(self, camera: str, stamp_ns: int, rgb: np.ndarray, depth: np.ndarray | None = None) -> None:
        """Add a camera frame (``depth``: uint16 mm HxW, required for RGB-D)."""
        if camera not in self._frames:
            raise KeyError(f"unknown camera {camera!r} (configured: {list(self._frames)})")
        if self._depth and depth is None:
            raise ValueError(f"camera {camera!r}: this assembly needs a depth image with every frame")
        stamp_ns = int(stamp_ns)
        c = self.counters
        c.frames_received[camera] += 1
        sent = self._sent_ns[camera]
        if not self._frames_in_rows and sent is not None and stamp_ns <= sent:
            c.frames_late[camera] += 1  # its turn has passed: the encoder only takes increasing times
            return
        fed = self._fed_ns[camera]
        if self._frames_in_rows and fed is not None and stamp_ns <= fed:
            c.frames_late[camera] += 1  # a row that could have taken it is done; later rows still may
        self._frames[camera].insert(stamp_ns, Frame(stamp_ns, rgb, depth))

    def count_unpaired(self, camera: str, n: int = 1) -> None:
        """Colour or depth images that found no partner (``DepthPairer``) while this episode ran."""
        Counters._inc(self.counters.frames_unpaired, camera, n)

    def add_raw_quest(self, stamp_ns: int, line: str) -> None:
        # (stamp, arrival seq) keeps distinct lines that share a receive stamp
        """Add one raw headset line, stamped with its receive time."""
        self._raw.insert((int(stamp_ns), self._raw_seq), line)
        self._raw_seq += 1

    # ---- output -----------------------------------------------------------------------------
    def advance(self, now_ns: int) -> int:
        """Assemble every tick with t_k + delay <= now_ns; returns the number of new rows."""
        if self._end_ns is not None:
            return 0
        return self._run_until(int(now_ns) - self._delay_ns)

    def finish(self, end_ns: int) -> Counters:
        """Assemble the remaining ticks up to end_ns, release buffered frames and lines; returns counters."""
        if self._end_ns is None:
            self._finish_ns = int(end_ns)
            self._run_until(int(end_ns))
            self._end_ns = int(end_ns)
        return self.counters

    def _run_until(self, limit_ns: int) -> int:
        before = self.counters.rows
        self._assembled_ns = limit_ns if self._assembled_ns is None else max(self._assembled_ns, limit_ns)
        while self.tick_ns(self._next_k) <= limit_ns:
            if self._next_k == 0 and self._finish_ns is None and self.tick_ns(0) + self._warmup_ns > limit_ns:
                break  # the first tick waits for the phase warm-up
            self._tick(self._next_k)
            self._next_k += 1
        if self.origin_ns is not None and not self._frames_in_rows:
            for cam in self.config.cameras:
                for s in self._frames[cam].pop_until(limit_ns):
                    self._send(cam, s.value, s.stamp_ns - self.origin_ns)
        for line in self._raw.pop_until((limit_ns, 1 << 62)):
            if line.stamp_ns[0] >= self.start_ns:
                self._sink.raw_quest(line.value)
        return self.counters.rows - before

    def _send(self, cam: str, frame: Frame, rel_ns: int) -> None:
        prev = self._sent_ns[cam]
        if prev is not None:
            periods = (frame.stamp_ns - prev) * self.config.fps / 1e9
            if periods > 1.5:
                self.counters.frames_missing[cam] += round(periods) - 1
        self._sent_ns[cam] = frame.stamp_ns
        self.counters.frames_sent[cam] += 1
        self._sink.frame(cam, frame, max(0, rel_ns) / 1e9)

    def _grid_offset(self, stamp_ns: int) -> int:
        """Stamp - its nearest grid time, in [-P/2, P/2] (integer, on the exact grid)."""
        unit = 1_000_000_000 * self._den
        k = (2 * (stamp_ns - self.start_ns) * self._num + unit) // (2 * unit)
        return stamp_ns - self.tick_ns(k)

    def _row_frame(self, cam: str, t: int) -> Sample[int, Frame] | None:
        """The frame for the row at t (phase-locked pairing, ``frame_assign``); None if there is none yet.

        Commits nothing but the phase tracker's input, so a skipped start tick can call it.
        """
        buf, tracker = self._frames[cam], self._phase[cam]
        limit = t + self._horizon_ns
        fed = self._fed_ns[cam]
        feed = limit
        if fed is None:  # the first tick: the warm-up captures too (at most what finish() may rely on)
            feed = limit + self._warmup_ns
            if self._finish_ns is not None:
                feed = max(limit, min(feed, self._finish_ns + self._horizon_ns))
        if fed is None:  # the captures before the episode, then the episode's own (each capture once)
            before = (s for s in self._history[cam] if s <= feed)
            for s in sorted(set(before).union(buf.stamps[: buf.index_at(feed) + 1])):
                tracker.add(self._grid_offset(s))
        else:
            for i in range(buf.index_at(fed) + 1, buf.index_at(feed) + 1):
                tracker.add(self._grid_offset(buf.stamps[i]))
        self._fed_ns[cam] = feed if fed is None else max(fed, feed)
        prev = self._sent_ns[cam]
        slot = tracker.slot_ns
        # causal: a locked camera's frame may be CAUSAL_TOL_NS (clock noise) after t, another's none; the
        # first row's among the captures within the reach only (``first_row_reach_ns``: whatever else is held)
        after = prev if prev is not None else t - self._row0_reach_ns - 1
        j = pick(
            buf.stamps,
            after,
            None if slot is None else t + slot,
            self._period_ns,
            t + (CAUSAL_TOL_NS if slot is not None else 0),
        )
        if j is not None:
            return buf.at(j)
        return buf.latest_at(t if prev is None else prev)  # row 0: the pre-roll frame; later: a repeat

    def _tick(self, k: int) -> None:
        t = self.tick_ns(k)
        self._last_tick_ns = t
        c = self.counters
        samples = {n: self._inputs[n].latest_at(t) for n in self._required}
        if self._frames_in_rows:
            frames = {cam: self._row_frame(cam, t) for cam in self.config.cameras}
        else:
            frames = {cam: self._frames[cam].latest_at(t) for cam in self.config.cameras}
        have = {n: s for n, s in samples.items() if s is not None}
        got = {cam: f for cam, f in frames.items() if f is not None}  # both complete from the origin on
        if self._origin_k is None:
            if len(have) < len(samples) or len(got) < len(frames):
                c.skipped_start_ticks += 1
                for buf in self._inputs.values():
                    buf.prune_before(t)
                for fbuf in self._frames.values():  # keep what a later start tick's window may take
                    fbuf.prune_before(t - self._row0_reach_ns if self._frames_in_rows else t)
                return
            self._origin_k, self.origin_ns = k, t
            if not self._frames_in_rows:
                for cam, f in got.items():  # the frame at/before the origin opens the video at t = 0 ...
                    self._frames[cam].drop_through(t)
                    nxt = self._frames[cam].first()
                    if nxt is None or pts_ticks((nxt.stamp_ns - t) / 1e9) > 0:  # ... unless the next one's PTS is 0
                        self._send(cam, f.value, 0)
        for name, s in have.items():
            if t - s.stamp_ns > self._stale_ns:
                Counters._inc(c.values_stale, name)
        current: dict[str, np.ndarray] = {}
        for name, dim in self._dims.items():  # optional inputs are zeros until their first sample
            opt = have.get(name) or self._inputs[name].latest_at(t)
            current[name] = opt.value if opt is not None else np.zeros(dim, dtype=np.float32)
        values = {f.key: current[f.input][f.start : f.stop] for f in self._table.features}
        row_frames: dict[str, Frame] = {}
        if self._frames_in_rows:
            for cam, f in got.items():
                prev = self._sent_ns[cam]
                if prev is not None and f.stamp_ns == prev:
                    c.frames_repeated[cam] += 1
                else:
                    if prev is not None:
                        c.frames_dropped[cam] += self._frames[cam].count_between(prev, f.stamp_ns)
                    off = f.stamp_ns - t  # > 0: captured after its row (at most CAUSAL_TOL_NS)
                    if off > 0:
                        c.frames_ahead[cam] += 1
                        c.frame_ahead_max_ms[cam] = max(c.frame_ahead_max_ms[cam], round(off / 1e6, 3))
                    else:
                        c.frame_behind_max_ms[cam] = max(c.frame_behind_max_ms[cam], round(-off / 1e6, 3))
                    c.frame_offset_max_ms[cam] = max(c.frame_offset_max_ms[cam], round(abs(off) / 1e6, 3))
                age = t - f.stamp_ns
                if age > self._stale_ns:
                    c.frames_stale[cam] += 1
                if age > 0 and age / 1e6 > c.frame_age_max_ms.get(cam, 0.0):
                    c.frame_age_max_ms[cam] = round(age / 1e6, 3)
                self._sent_ns[cam] = f.stamp_ns
                c.frames_sent[cam] += 1
                row_frames[cam] = f.value
                self._frames[cam].prune_before(f.stamp_ns)
        for buf in self._inputs.values():
            buf.prune_before(t)
        i = k - self._origin_k
        c.rows += 1
        self._sink.row(Row(i, grid_timestamp(i, self.config.fps), t, values, row_frames))

"""Episode state machine shared by both recorders (no ROS): start/stop/discard/delete, ticks, shutdown.

Threads: input methods (``add_*``) are called from any thread and only insert into the assembler under
a short lock; ``tick(now)`` is called by the recorder's tick thread; the service methods block their
caller until the writer thread has done the work. Every writer call runs on one ``WriterWorker``.

States: idle -> recording -> (saving) -> idle; closed after ``shutdown``. Every wrong order gets a
clear refusal and changes nothing; an episode is always either saved whole or discarded.
A save that fails while the writer still holds the episode (e.g. a full disk) goes to ``save_failed``:
nothing is discarded, ``stop`` retries the save (once space is back) and ``discard`` drops it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from piper_recorder.assembly import AssemblyConfig, CaptureHistory, DepthPairer, EpisodeAssembler, window_captures
from piper_recorder.assembly.messages import pose7
from piper_recorder.errors import PiperError

from .targets import EpisodeTarget, Record
from .verdict import OUTCOME_KEY, REASONS_KEY, VERDICT_KEY, label_fields
from .worker import DEFAULT_MAX_LAG_S, QueuedSink, WriterWorker

IDLE, RECORDING, SAVING, SAVE_FAILED, CLOSED = "idle", "recording", "saving", "save_failed", "closed"
# a stop stamped this much after its request's arrival is not believed (the stamping clock disagrees
# with this one): the episode ends at the arrival instead. Less than that is clock noise: the arrival too.
STOP_STAMP_FUTURE_TOLERANCE_NS = 50_000_000
# how long samples are kept before an episode starts: the newest one at or before the start seeds it,
# and the ones after it cover the writer's start-up (the episode starts when the request arrived)
PREROLL_INPUTS_NS, PREROLL_FRAMES_NS = 1_000_000_000, 500_000_000
_T = TypeVar("_T", bound=tuple)


def _keep(buf: deque[_T], item: _T, window_ns: int) -> None:
    buf.append(item)
    while len(buf) > 1 and buf[0][0] < item[0] - window_ns:
        buf.popleft()


def _preroll(buf: deque[_T], start_ns: int, reach_ns: int = 0) -> list[_T]:
    """What a recorder already running at ``start_ns`` would hold.

    The newest sample at or before ``start_ns``, those captured within ``reach_ns`` before it, and every later one
    (frames: what row 0 may take, ``AssemblyConfig.preroll_frames_ns``).
    """
    items = sorted(buf, key=lambda x: x[0])
    newest = max((i for i, x in enumerate(items) if x[0] <= start_ns), default=0)
    first = next((i for i, x in enumerate(items) if x[0] >= start_ns - reach_ns), newest)
    return items[min(first, newest) :]


@dataclass
class Answer:
    """A service's answer: whether it did what was asked, the message for the caller, and the event it published."""

    ok: bool
    message: str
    event: dict[str, Any] | None = None


def parse_stop_at(payload: str) -> int:
    """The end time of a ``stop_episode_at`` request: ``{"end_ns": <int, ROS-clock ns>}``.

    ValueError with the reason otherwise (a client's bug: refused, never guessed).
    """
    try:
        arg = json.loads(payload)
    except ValueError:
        arg = None
    if not isinstance(arg, dict) or set(arg) != {"end_ns"}:
        raise ValueError(
            f'stop_episode_at wants a JSON object {{"end_ns": <integer ROS-clock ns>}}, got {payload[:80]!r}'
        )
    end = arg["end_ns"]
    if not isinstance(end, int) or isinstance(end, bool) or end <= 0:
        raise ValueError(f"stop_episode_at: end_ns must be a positive integer (ns), got {end!r}")
    return end


@dataclass
class _Unsaved:
    """A finished episode whose save is still to be done: what a retry of the save needs.

    The target keeps the episode's sink itself.
    """

    counters: dict[str, Any]
    timeout: bool
    start_ns: int
    origin_ns: int | None
    end_ns: int
    reason: str
    sink: QueuedSink | None = None  # its frames dropped behind the writer join the counters at the save


class _InputError(PiperError):
    """A row/frame call failed on the writer thread before the save: the episode cannot be saved whole."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause

    def describe(self) -> str:
        return f"{type(self.cause).__name__}: {self.cause}"


class EpisodeController:
    """The episode state machine of one recorder: inputs, ticks, the services, and the writer thread's work.

    ``tick_stats``: record the tick thread's delays in each episode (``tick_delay_ms``); off for a replay (the bag
    converter), whose ticks follow the log times and measure nothing.
    """

    def __init__(
        self,
        target: EpisodeTarget[Any],
        assembly: AssemblyConfig,
        *,
        recorder: str,
        max_episode_s: float,
        publish_event: Callable[[dict[str, Any]], None],
        session_record: Callable[[], dict[str, Any]],
        on_change: Callable[[], None] = lambda: None,
        log: Callable[[str], object] = print,
        tick_stats: bool = True,
        max_lag_s: float = DEFAULT_MAX_LAG_S,
        episode_fields: Callable[[int, int], dict[str, Any]] | None = None,
        stop_reach_s: float = 0.0,
        drain: Callable[[], object] = lambda: None,
    ):
        assembly.validate()
        # hands over every message received so far (the node's polled inputs): a stop calls it once the
        # assembly delay has passed, before the last rows are assembled
        self._drain = drain
        # ticks assemble rows this much later than their lateness asks: how far back a stamped stop
        # (stop_at) can end an episode before the rows after it are written (RecorderConfig.stop_reach_s)
        self._reach_ns = round(stop_reach_s * 1e9)
        self.max_lag_s = max_lag_s
        self._tick_stats = tick_stats
        self._episode_fields = episode_fields  # (row-0 time, end) -> fields of the saved episode's record
        self.target, self.assembly, self.recorder = target, assembly, recorder
        self.max_episode_ns = int(max_episode_s * 1e9) if max_episode_s > 0 else 0
        self._publish_event, self._session_record, self._on_change, self._log = (
            publish_event,
            session_record,
            on_change,
            log,
        )
        self.worker = WriterWorker(f"{recorder}-writer")
        self._lock = threading.Lock()  # assembler and state; held only for short work
        self._service = threading.Lock()  # one state transition at a time
        self.state = IDLE
        self._asm: EpisodeAssembler | None = None
        self._sink: QueuedSink | None = None
        self._stop_at: int | None = None  # a stop was requested for this time: no row after it is assembled
        self._episode: int | None = None
        self._task = ""
        self._session_started = False
        self._saved: list[tuple[int, str]] = []  # (episode, task) saved in this session; delete_last pops
        # the newest sample of each input and camera seeds the next episode (its pre-roll)
        # (an episode starts when its request arrived, before the writer is ready: the samples that came
        # in between are kept here for a short while and fed to the new episode, see ``_preroll``)
        self._preroll_inputs: dict[str, deque[tuple[int, np.ndarray]]] = {}
        self._preroll_frames: dict[str, deque[tuple[int, np.ndarray, np.ndarray | None]]] = {}
        self._pairers = {cam: DepthPairer(1e9 / assembly.fps) for cam in assembly.cameras}
        # every camera's newest capture stamps, idle or not: an episode's phase estimate starts from them
        self._captures = {cam: CaptureHistory(window_captures(assembly.fps)) for cam in assembly.cameras}
        self.last_counters: dict[str, Any] = {}
        self._delay_s = assembly.delay_ns(target.depth) / 1e9  # rows are assembled this long after their time
        self._tick_delays: list[int] = []
        self._unsaved: _Unsaved | None = None  # the finished episode a failed save left with the writer
        self._label: dict[str, Any] = {}  # the episode in flight's outcome label, applied at its save
        self.last_label: dict[str, Any] = {}  # the last label given (episode, outcome, note): ~/status
        self.last_verdict: dict[str, Any] = {}  # the last saved episode's verdict: ~/status
        self.last_message = "idle"
        self.last_ok = True  # whether the last answer was a success (False: a refusal, shown on the HUD)
        self.answers = 0  # answers given so far: tells a repeated refusal from the same one

    # ---- inputs (any thread) ----------------------------------------------------------------
    def add_input(self, name: str, stamp_ns: int, values: Sequence[float] | np.ndarray) -> None:
        """One sample of a feature-table input (``InputRouter`` calls this for every vector message)."""
        v = np.asarray(values, dtype=np.float32)  # once: the pre-roll and the assembler share it
        with self._lock:
            buf = self._preroll_inputs.get(name)
            if buf is None:
                buf = self._preroll_inputs[name] = deque()
            _keep(buf, (stamp_ns, v), PREROLL_INPUTS_NS)
            if self._asm is not None and self.state in (RECORDING, SAVING):
                self._asm.add_input(name, stamp_ns, v)

    def add_joint_state(self, stamp_ns: int, positions: Sequence[float]) -> None:
        """Add a joint state (6 joints rad + gripper m)."""
        self.add_input("joint_states", stamp_ns, positions)

    def add_eef_pose(self, stamp_ns: int, position: Sequence[float], quat_xyzw: Sequence[float]) -> None:
        """Add a measured end-effector pose (ROS xyzw quaternion)."""
        self.add_input("eef_pose", stamp_ns, pose7(position, quat_xyzw))

    def add_commanded_pose(self, stamp_ns: int, position: Sequence[float], quat_xyzw: Sequence[float]) -> None:
        """Add a commanded end-effector pose (ROS xyzw quaternion)."""
        self.add_input("commanded_pose", stamp_ns, pose7(position, quat_xyzw))

    def add_commanded_gripper(self, stamp_ns: int, width_m: float) -> None:
        """Add a commanded gripper width (m)."""
        self.add_input("commanded_gripper", stamp_ns, [width_m])

    def add_reward(self, stamp_ns: int, reward: float) -> None:
        """Add a reward."""
        self.add_input("reward", stamp_ns, [reward])

    def add_frame(self, camera: str, stamp_ns: int, rgb: np.ndarray, depth: np.ndarray | None = None) -> None:
        """Add a camera frame (colour, with its depth for RGB-D)."""
        with self._lock:
            _keep(self._preroll_frames.setdefault(camera, deque()), (stamp_ns, rgb, depth), PREROLL_FRAMES_NS)
            captures = self._captures.get(camera)
            if captures is not None:
                captures.add(stamp_ns)
            if self._asm is not None and self.state in (RECORDING, SAVING):
                self._asm.add_frame(camera, stamp_ns, rgb, depth)

    def add_color(self, camera: str, stamp_ns: int, rgb: Any) -> None:
        """RGB-D: one half of a capture; it reaches the assembly once paired with its depth image."""
        self._pair(camera, stamp_ns, rgb, is_depth=False)

    def add_depth(self, camera: str, stamp_ns: int, depth: Any) -> None:
        """Add a depth image, to be paired with its colour image by stamp."""
        self._pair(camera, stamp_ns, depth, is_depth=True)

    def _pair(self, camera: str, stamp_ns: int, img: Any, is_depth: bool) -> None:
        if camera not in self._pairers:
            raise KeyError(f"unknown camera {camera!r} (configured: {list(self._pairers)})")
        with self._lock:
            p = self._pairers[camera]
            before = p.unpaired
            pairs = p.add_depth(stamp_ns, img) if is_depth else p.add_color(stamp_ns, img)
            if p.unpaired > before and self._asm is not None and self.state in (RECORDING, SAVING):
                self._asm.count_unpaired(camera, p.unpaired - before)
        for stamp, rgb, depth in pairs:
            self.add_frame(camera, stamp, rgb, depth)

    def add_raw_quest(self, stamp_ns: int, line: str) -> None:
        """Add one raw headset line, stamped with its receive time."""
        with self._lock:
            if self._asm is not None and self.state in (RECORDING, SAVING):
                self._asm.add_raw_quest(stamp_ns, line)

    # ---- tick thread ------------------------------------------------------------------------
    def next_tick_ns(self) -> int | None:
        """ROS-clock time at which the next row becomes due (grid time + lateness [+ frame horizon]), or None."""
        with self._lock:
            if self._asm is None or self.state != RECORDING:
                return None
            return self._asm.next_due_ns + self._reach_ns

    def tick(self, now_ns: int) -> None:
        """Assemble what is due at ``now_ns`` (the tick thread), and auto-stop a full episode."""
        auto_stop: int | None = None
        with self._lock:
            if self._asm is None or self.state != RECORDING:
                return
            now_ns -= self._reach_ns  # rows held back for a stamped stop (stop_reach_s)
            due = self._asm.next_due_ns
            if self._stop_at is not None:  # a stop is on its way to the worker: rows end at its time
                now_ns = min(now_ns, self._stop_at + round(self._delay_s * 1e9))
            if now_ns >= due:  # how late the tick thread assembled a row (rows stay on the grid regardless)
                self._tick_delays.append(now_ns - due)
            self._asm.advance(now_ns)
            if self.max_episode_ns and now_ns - self._asm.start_ns >= self.max_episode_ns:
                auto_stop, asm = self._asm.start_ns + self.max_episode_ns, self._asm
        if auto_stop is not None:
            self.stop(auto_stop, reason="max_episode_s", only=asm)

    # ---- services (block the caller) -------------------------------------------------------
    def start(self, task: str, now: Callable[[], int], source: Record | None = None) -> Answer:
        """Start an episode at ``now()`` as the request is taken, before the writer opens its files.

        The file opening is no part of the episode (the buffers hold what arrives meanwhile); ``source``: where its
        messages come from (a bag), saved with it.
        """
        with self._service:
            if self.state == CLOSED:
                return self._refuse("recorder is shutting down; no new episodes")
            if self.state == SAVE_FAILED:
                return self._refuse(self._unsaved_hint())
            if self.state != IDLE:
                return self._refuse(
                    f"already recording episode {self._episode} "
                    f"('{self._task}'); call stop_episode or discard_episode first"
                )
            if self.target.needs_task and not task.strip():
                return self._refuse("parameter 'task' is empty; set it (ros2 param set <node> task '...') first")
            start_ns = now()
            if self.worker.backlog:
                self._log(f"writer thread still has {self.worker.backlog} queued calls")
            try:
                record = self._session_record()
                if not self._session_started:
                    self.worker.call(lambda: self.target.begin_session(record))
                    self._session_started = True
                idx, sink = self.worker.call(lambda: self.target.start_episode(task, record, source))
            except Exception as exc:  # noqa: BLE001 - e.g. BindingChangeError: answer, stay idle
                return self._refuse(f"cannot start: {type(exc).__name__}: {exc}")
            with self._lock:
                self.worker.take_error()
                self._sink = QueuedSink(sink, self.worker, self.max_lag_s, shed_row_frames=not self.target.depth)
                self._stop_at = None
                self._asm = EpisodeAssembler(
                    self.assembly,
                    start_ns,
                    self._sink,
                    depth=self.target.depth,
                    history={cam: h.before(start_ns) for cam, h in self._captures.items()},
                )
                self._tick_delays = []
                for name, inputs in self._preroll_inputs.items():
                    for stamp, values in _preroll(inputs, start_ns):
                        self._asm.add_input(name, stamp, values)
                reach = self.assembly.preroll_frames_ns(self.target.depth)
                for cam, frames in self._preroll_frames.items():
                    for stamp, rgb, depth in _preroll(frames, start_ns, reach):
                        self._asm.add_frame(cam, stamp, rgb, depth)
                self._episode, self._task, self.state = idx, task, RECORDING
                self._label = {}
            event = self._event("started", start_ns=start_ns)
            return self._done(Answer(True, f"recording episode {idx} (task '{task}')", event))

    def request_stop(self, end_ns: int) -> None:
        """Note at once (any thread, before ``stop`` gets its turn) that the episode ends at ``end_ns``.

        The tick thread assembles no row after it, however long the stop then waits for the service lock.
        """
        with self._lock:
            if self.state == RECORDING and self._asm is not None:
                self._stop_at = int(end_ns) if self._stop_at is None else min(self._stop_at, int(end_ns))

    def stop_at(self, end_ns: int, arrival_ns: int) -> Answer:
        """Stop at ``end_ns``, when the requester asked (a headset press's capture stamp); the request arrived at ``arrival_ns``.

        Both are on the recorder's ROS clock. A stamp before the episode's start is refused: it is a stop for an earlier
        episode (a press resent after its episode ended) and must not end this one. The episode ends at
        ``min(end_ns, arrival_ns)`` (a press is not later than its request), at the arrival if the stamp is more than
        ``STOP_STAMP_FUTURE_TOLERANCE_NS`` after it (the clocks disagree), and never before ``assembled_until_ns`` (rows
        up to there are written; the answer then says how far after the stamp it ended). Not recording, or a failed save
        held: as ``stop``.
        """
        with self._lock:
            state, asm = self.state, self._asm
            if state != RECORDING or asm is None:
                problem = "" if state == SAVE_FAILED else self._not_recording("stop")
            elif end_ns < asm.start_ns:
                problem = (
                    f"stop_episode_at: end_ns {end_ns} is {(asm.start_ns - end_ns) / 1e6:.0f} ms before "
                    f"episode {self._episode}'s start: a stop for an earlier episode, not applied"
                )
            else:
                problem, end, written = "", min(end_ns, arrival_ns), asm.assembled_until_ns
                if written is not None and end < written:
                    note = (
                        f"; ended {(written - end) / 1e6:.0f} ms after end_ns: the rows up to there were "
                        "written when the stop arrived"
                    )
                    end = written
                elif end_ns > arrival_ns + STOP_STAMP_FUTURE_TOLERANCE_NS:
                    note = (
                        f"; end_ns was {(end_ns - arrival_ns) / 1e6:.0f} ms after the request's arrival "
                        "(clocks disagree): ended at the arrival"
                    )
                elif end == end_ns:  # the usual case: what ending at the arrival would have added
                    note = f"; ended at end_ns, {(arrival_ns - end) / 1e6:.0f} ms before the request arrived"
                else:
                    note = "; ended at the request's arrival (end_ns a little after it: clock noise)"
                self._stop_at = end if self._stop_at is None else min(self._stop_at, end)
        if problem:
            return self._refuse(problem)
        if state == SAVE_FAILED:
            return self.stop(end_ns)  # retries the save of the episode held (its end is kept)
        ans = self.stop(end, only=asm)  # only that episode: a new one started meanwhile is not ended
        self._log(f"stop_episode_at{note}")
        ans.message += note
        return ans

    def stop(
        self, end_ns: int | Callable[[], int], reason: str = "stop_episode", only: EpisodeAssembler | None = None
    ) -> Answer:
        """Save the episode in flight, or retry a failed save.

        ``only``: just if it is still that episode, for the auto-stop.
        """
        with self._service:
            if only is not None and self._asm is not only:
                return Answer(False, "episode already ended")
            if self.state == SAVE_FAILED and only is None:
                return self._retry_save()
            if self.state != RECORDING:
                return self._refuse(self._not_recording("stop"))
            end = end_ns() if callable(end_ns) else int(end_ns)
            with self._lock:
                if self._stop_at is not None:
                    end = min(end, self._stop_at)
                self.state = SAVING
            self._on_change()
            # messages still in flight for the last rows (and their frames): wait out the assembly delay
            delay = self._delay_s - max(0.0, (time.time_ns() - end) / 1e9)
            if delay > 0:
                time.sleep(delay)
            self._drain()
            with self._lock:
                asm = self._asm
                assert asm is not None
                counters = asm.finish(end).to_dict()
                if self._tick_stats:
                    counters["tick_delay_ms"] = self._delay_stats()
                self._asm, sink, self._stop_at = None, self._sink, None
            self.last_counters = counters
            timeout = reason != "stop_episode"  # max_episode_s or shutdown: a truncation, not a terminal
            if counters["rows"] < self.target.min_rows:
                missing = asm.missing_inputs(end)
                why = f"empty: {counters['rows']} rows" + (f", never received {missing}" if missing else "")
                return self._drop(why, ok=False, start_ns=asm.start_ns)
            return self._commit(_Unsaved(counters, timeout, asm.start_ns, asm.origin_ns, end, reason, sink))

    def _commit(self, u: _Unsaved) -> Answer:
        """Save on the writer thread; a failure with the episode still held by the writer keeps it."""
        t0 = time.monotonic()
        try:
            rec = self.worker.call(lambda: self._save(u))
        except _InputError as exc:  # rows or frames never reached the writer: the episode is incomplete
            return self._drop(f"save failed: {exc.describe()}", ok=False, start_ns=u.start_ns)
        except Exception as exc:  # noqa: BLE001 - a failed save leaves no half-written episode
            why = f"{type(exc).__name__}: {exc}"
            held = self._writer_holds_episode()
            if not (held and self.target.keeps_failed_save(exc)):  # not held: nothing left to discard
                return self._drop(
                    f"save failed: {why}" + ("" if held else "; the episode is lost"),
                    ok=False,
                    start_ns=u.start_ns,
                    discard_writer=held,
                )
            self._unsaved = u
            with self._lock:
                self.state = SAVE_FAILED
            event = self._event(
                "save_failed", start_ns=u.origin_ns, end_ns=u.end_ns, rows=u.counters["rows"], reason=why
            )
            return self._done(
                Answer(False, f"saving episode {self._episode} failed ({why}); " + self._unsaved_hint(), event)
            )
        self._unsaved = None
        idx = self._episode
        assert idx is not None
        self._saved.append((idx, self._task))
        with self._lock:
            self.state = IDLE
        event = self._event("saved", start_ns=u.origin_ns, end_ns=u.end_ns, rows=u.counters["rows"], reason=u.reason)
        rec = rec if isinstance(rec, dict) else {}
        event.update({k: rec[k] for k in (VERDICT_KEY, REASONS_KEY, OUTCOME_KEY) if k in rec})
        self.last_verdict = {"episode_index": idx, **{k: rec[k] for k in (VERDICT_KEY, REASONS_KEY) if k in rec}}
        late = (time.time_ns() - u.end_ns) / 1e9
        verdict = f"; verdict {rec[VERDICT_KEY]}" if VERDICT_KEY in rec else ""
        if rec.get(VERDICT_KEY) not in (None, "ok"):
            verdict += f" ({'; '.join(rec.get(REASONS_KEY) or [])})"
        return self._done(
            Answer(
                True,
                f"saved episode {idx}: {u.counters['rows']} rows ({u.reason}; saved "
                f"{late:.2f} s after its end, the save {time.monotonic() - t0:.2f} s)"
                f"{verdict}",
                event,
            )
        )

    def _retry_save(self) -> Answer:
        u = self._unsaved
        assert u is not None
        with self._lock:
            self.state = SAVING
        self._on_change()
        return self._commit(u)

    def _save(self, u: _Unsaved) -> dict[str, Any]:
        err = self.worker.take_error()
        if err is not None:
            raise _InputError(err)
        if u.sink is not None and u.sink.behind:  # on the writer thread: every frame before the save is counted
            u.counters["frames_dropped_writer_behind"] = dict(u.sink.behind)
        fields = (
            {}
            if self._episode_fields is None
            else self._episode_fields(u.origin_ns if u.origin_ns is not None else u.start_ns, u.end_ns)
        )
        with self._lock:
            label = dict(self._label)
        return self.target.save_episode({**u.counters, **fields, **label}, u.timeout)

    def _writer_holds_episode(self) -> bool:
        """True if the writer still has the episode after the failed save.

        The LeRobot writer keeps it staged; the RGB-D writer's journal rollback ends it.
        """
        try:
            return self.worker.call(self.target.holds_episode)
        except Exception:  # noqa: BLE001
            return True

    def _unsaved_hint(self) -> str:
        return (
            f"episode {self._episode} is not saved but kept: free disk space and call stop_episode to "
            "retry the save, or discard_episode to drop it"
        )

    def discard(self, reason: str = "discard_episode") -> Answer:
        """Drop the episode in flight, or a failed save the writer still holds."""
        with self._service:
            if self.state == SAVE_FAILED:
                self._unsaved = None
                with self._lock:
                    self.state = SAVING
                return self._drop(reason, ok=True, start_ns=None)
            if self.state != RECORDING:
                return self._refuse(self._not_recording("discard"))
            with self._lock:
                asm, self._asm, self._stop_at = self._asm, None, None
                self.state = SAVING
            return self._drop(reason, ok=True, start_ns=asm.start_ns if asm else None)

    def delete_last(self) -> Answer:
        """Delete the last episode saved in this session."""
        with self._service:
            if self.state != IDLE:
                return self._refuse(f"episode {self._episode} is {self.state}; stop or discard it before deleting")
            if not self._saved:
                return self._refuse("nothing saved in this session to delete")
            idx, task = self._saved[-1]
            try:
                self.worker.call(self.target.delete_last_episode)
            except Exception as exc:  # noqa: BLE001
                return self._refuse(f"cannot delete episode {idx}: {type(exc).__name__}: {exc}")
            self._saved.pop()
            self._episode, self._task = idx, task
            event = self._event("deleted", start_ns=None, reason="delete_last_episode")
            return self._done(Answer(True, f"deleted episode {idx}", event))

    def label(self, outcome: str, note: str = "", episode: int | None = None) -> Answer:
        """Mark an episode success / failure, with an optional short note.

        The episode in flight (applied at its save; ``episode`` None or its index), else an episode saved in this
        session (``episode``, default the last one: its record is rewritten at once). Waits for a save in progress, so a
        label given while the episode is being saved lands on it.
        """
        try:
            fields = label_fields(outcome, note)
        except ValueError as exc:
            return self._refuse(f"cannot label: {exc}")
        with self._service:
            if self.state in (RECORDING, SAVE_FAILED) and episode in (None, self._episode):
                with self._lock:
                    self._label = fields
                return self._labelled(self._episode, fields, "applied at its save")
            if self.state not in (IDLE, RECORDING, SAVE_FAILED):
                return self._refuse(f"cannot label: recorder is {self.state}")
            saved = [i for i, _ in self._saved]
            if not saved:
                return self._refuse("cannot label: no episode in flight and none saved in this session")
            idx = saved[-1] if episode is None else episode
            if idx not in saved:
                return self._refuse(
                    f"cannot label episode {idx}: not saved in this session (saved: {saved}); "
                    "use piper-dataset label afterwards"
                )
            try:
                self.worker.call(lambda: self.target.label_saved(idx, fields))
            except Exception as exc:  # noqa: BLE001 - e.g. a full disk: the record is unchanged
                return self._refuse(f"cannot label episode {idx}: {type(exc).__name__}: {exc}")
            return self._labelled(idx, fields, "saved")

    def _labelled(self, idx: int | None, fields: dict[str, Any], how: str) -> Answer:
        self.last_label = {"episode_index": idx, **fields}
        event = self._event("labeled", start_ns=None)
        event.update(episode_index=idx, **fields)
        note = f" ({fields['outcome_note']!r})" if fields.get("outcome_note") else ""
        return self._done(Answer(True, f"episode {idx} labelled {fields[OUTCOME_KEY]}{note}: {how}", event))

    def shutdown(self, save: bool) -> Answer:
        """Save or discard the episode in flight, then close the writer. Idempotent."""
        ans = Answer(True, "closed")
        if self.state == SAVE_FAILED and save:
            ans = self.stop(time.time_ns, reason="shutdown")  # one more try before the writer closes
        elif self.state == RECORDING:
            ans = self.stop(time.time_ns, reason="shutdown") if save else self.discard(reason="shutdown")
        if self.state == SAVE_FAILED:  # the writer discards it on close anyway: say so
            ans = self.discard(reason=f"shutdown; {ans.message}" if not ans.ok else "shutdown")
            ans = Answer(False, ans.message, ans.event) if save else ans
        with self._service:
            if self.state == CLOSED:
                return ans
            self.state = CLOSED
            try:
                self.worker.call(self.target.close)
            except Exception as exc:  # noqa: BLE001
                ans = Answer(False, f"{ans.message}; close failed: {type(exc).__name__}: {exc}", ans.event)
            self.worker.stop()
        self._on_change()
        return ans

    # ---- status -----------------------------------------------------------------------------
    def status(self, now_ns: int) -> dict[str, Any]:
        """The controller's state for the status topic.

        ``writer_lag_s``/``falling_behind``: how far the writer thread is behind real time (at half of ``max_lag_s`` it
        says so; at ``max_lag_s`` it drops frames, counted in ``frames_dropped_writer_behind``).
        """
        lag = self.worker.lag_s()
        with self._lock:
            st: dict[str, Any] = {
                "recorder": self.recorder,
                "state": self.state,
                "episode_index": self._episode,
                "task": self._task,
                "saved_this_session": [i for i, _ in self._saved],
                "writer_backlog": self.worker.backlog,
                "writer_lag_s": round(lag, 3),
                "falling_behind": lag > 0.5 * self.max_lag_s,
                "message": self.last_message,
                "ok": self.last_ok,
                "answers": self.answers,
                "last_label": dict(self.last_label),
                "last_verdict": dict(self.last_verdict),
            }
            if self._asm is not None:
                behind = dict(self._sink.behind) if self._sink is not None else {}
                st.update(
                    elapsed_s=round((now_ns - self._asm.start_ns) / 1e9, 3),
                    rows=self._asm.rows,
                    frames_dropped_writer_behind=behind,
                    waiting_for=self._asm.missing_inputs() if self._asm.origin_ns is None else [],
                    counters=self._asm.counters.to_dict(),
                    tick_delay_ms=self._delay_stats(),
                )
            else:
                st["counters"] = self.last_counters
        return st

    # ---- helpers ----------------------------------------------------------------------------
    def _delay_stats(self) -> dict[str, float]:
        """p50/p99/max of the tick thread's delay past each row's due time (``next_due_ns``), in ms."""
        if not self._tick_delays:
            return {"ticks": 0}
        d = np.asarray(self._tick_delays, dtype=np.float64) / 1e6
        return {
            "ticks": int(d.size),
            "p50": round(float(np.percentile(d, 50)), 3),
            "p99": round(float(np.percentile(d, 99)), 3),
            "max": round(float(d.max()), 3),
        }

    def _not_recording(self, what: str) -> str:
        if self.state == SAVING:
            return f"episode {self._episode} is already being saved; cannot {what} it"
        if self.state == CLOSED:
            return "recorder is shutting down"
        return f"no episode in progress (state {self.state}); nothing to {what} — call start_episode first"

    def _drop(self, reason: str, ok: bool, start_ns: int | None, discard_writer: bool = True) -> Answer:
        try:
            self.worker.call(self._discard_writer if discard_writer else self.worker.take_error)
        except Exception as exc:  # noqa: BLE001
            reason = f"{reason}; discard failed: {type(exc).__name__}: {exc}"
            ok = False
        with self._lock:
            self.state = IDLE
        event = self._event("discarded", start_ns=start_ns, reason=reason)
        return self._done(Answer(ok, f"discarded episode {self._episode} ({reason})", event))

    def _discard_writer(self) -> None:
        self.worker.take_error()
        self.target.discard_episode()

    def _event(
        self,
        event: str,
        start_ns: int | None,
        end_ns: int | None = None,
        rows: int | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        return {
            "recorder": self.recorder,
            "event": event,
            "episode_index": self._episode,
            "task": self._task,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "rows": rows,
            "reason": reason,
        }

    def _refuse(self, message: str) -> Answer:
        self.last_message, self.last_ok, self.answers = message, False, self.answers + 1
        return Answer(False, message)

    def _done(self, ans: Answer) -> Answer:
        self.last_message, self.last_ok, self.answers = ans.message, ans.ok, self.answers + 1
        if ans.event is not None:
            self._publish_event(ans.event)
        self._log(ans.message)
        self._on_change()
        return ans

"""TeleopSession: one teleop session's coordination, without ROS: what the teleop node decides.

The node (``piper_recorder.nodes.teleop``) is an adapter: it turns messages into plain values (poses
as float sequences, ``Joy`` states, header stamps in ns, JSON strings), calls this class, and publishes
or sends what it hands back (targets, haptic commands, recorder service calls, label calls, the status).
Everything between is decided here, under one lock, because three threads feed it: the executor's
callbacks, the control thread (``tick``, at ``control_rate_hz``) and a SpaceMouse reader thread:

- ``TeleopCore`` (clutch, mapping, limits) with inputs moved onto the monotonic clock
  (``HostToMono``), and the SpaceMouse mode's ``SpaceMouseInput``;
- ``RecorderCalls``: presses become service calls with deadlines (a stop with its press's capture
  stamp, the Joy header stamp, as the episode's end); their reports pulse the headset
  (``timeout`` while retrying, ``refused`` when a press did not take effect) and become ``last_alarm``;
- the stop chord's label calls (``label_episode``): one per recorder, not retried; a refusal or no
  answer within ``call_timeout_s`` pulses ``refused``;
- haptics (``HapticScheduler``): confirmations of what the recorders did (``/episode_events``), a
  refused grip, a forced release, a limit starting to shape the target, a ``bad`` save verdict felt
  once per stop;
- the status dict (``/teleop/status``), due at once (at most every ``STATUS_MIN_PERIOD_S``) when the
  clutch, the active limits, an alarm or a label changed.

Two arms (``bimanual``, ``teleop.bimanual.BimanualCore``): each hand drives the arm of its name, so a hand
pose carries its hand and arm feedback its arm; ``tick_arms`` hands out each arm's target and what its
clutch did. An arm's refusals, forced releases and limits pulse that arm's hand; the engage buzz too.
The presses' confirmations and alarms pulse the buttons hand (``TeleopConfig.hand``), as with one arm.
The status keeps every single-arm key (``engaged``: any arm; the counters summed over the arms; the
newest forced release of either) and adds ``arms``: each arm's clutch, limits, release and counters.
A SpaceMouse drives one arm only: with two arms the input must be the headset.

Times come from ``clock`` (monotonic seconds) and ``to_mono`` (header stamps), both injectable, so the
tests run a session on a fake clock. ``tick`` runs at 100 Hz: it allocates one small ``Tick`` and
nothing else of its own.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from piper_recorder.teleop.spacemouse.input import TELEOP_INPUTS, SpaceMouseInput

from .arm_engine import ArmEngine, ArmTick
from .bimanual import BimanualConfig, BimanualCore, BimanualTickResult
from .capture_time import HostToMono
from .clutch import ClutchEvent
from .haptics import EVENT_PATTERNS, HapticConfig, HapticScheduler
from .mapper import Action, Joy, TeleopConfig, TeleopCore, TickResult
from .recorder_calls import RecorderCallConfig, RecorderCalls, Report, Send

ALARM_PATTERN = {"timeout": "timeout", "failed": "refused"}  # RecorderCalls' alarm -> haptics pattern
STATUS_MIN_PERIOD_S = 0.1
REFUSAL_LOG_PERIOD_S = 2.0  # a grip kept closed against an interlock is logged at most this often
_CLUTCH_CHANGES = (ClutchEvent.ENGAGED, ClutchEvent.RELEASED, ClutchEvent.FORCED_RELEASE)


@dataclass
class TeleopNodeConfig:
    """The teleop node's own parameters: recorders, haptics, calls, faults."""

    recorders: list[str] = field(default_factory=lambda: ["lerobot_recorder", "rgbd_recorder"])
    haptic_amp: float = 0.6
    haptic_ms: int = 40
    fault_on_arm_error: bool = True  # an ERROR level in /arm/status refuses / releases the clutch
    arm_frame: str = "arm_base"
    call_timeout_s: float = 3.0  # a recorder service call unanswered this long is reported and resent
    retry_window_s: float = 20.0  # ... until this long after the press; then it is reported as failed
    input: str = "headset"  # headset (/quest/* from quest_bridge) | spacemouse (spacemouse.*)
    # two arms (launchers: piper_launch.arms), each driven by the hand of its name, with its base calibration
    # arm_base.<arm>.* (teleop.frames.ArmBaseConfig); empty: one arm, driven by ``hand``
    arms: list[str] = field(default_factory=list)

    def calls(self) -> RecorderCallConfig:
        """The recorder calls' settings."""
        return RecorderCallConfig(call_timeout_s=self.call_timeout_s, retry_window_s=self.retry_window_s)

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not 0.0 <= self.haptic_amp <= 1.0 or not 0 <= self.haptic_ms <= 2000:
            raise ValueError("haptic_amp must be in [0, 1] and haptic_ms in [0, 2000]")
        if any(not r or "/" in r for r in self.recorders):
            raise ValueError(f"recorders must be plain node names, got {self.recorders}")
        if self.input not in TELEOP_INPUTS:
            raise ValueError(f"input must be one of {TELEOP_INPUTS}, got {self.input!r}")
        self.calls().validate()


class Pending(Protocol):
    """A call in flight (an rclpy ``Future``): whether its answer has come."""

    def done(self) -> bool:
        """Whether the answer has come."""


@dataclass(slots=True)
class Tick:
    """One control tick: the core's result and what the node must do besides publishing the target.

    The core's result: target, gripper, clutch event, presses, label.
    """

    result: TickResult
    engage_haptic: dict[str, Any] | None = None  # the engage buzz to put on /quest/haptic
    log_refusal: bool = False  # log this refusal (rate-limited)


@dataclass(slots=True)
class ArmsTick:
    """One control tick of two arms: the core's result (each arm's target and clutch, the presses) and what else to do."""

    result: BimanualTickResult
    engage_haptics: list[dict[str, Any]] = field(default_factory=list)  # an engage buzz per arm engaged (its hand)
    log_refusals: list[str] = field(default_factory=list)  # the arms whose refusal to log now (rate-limited per arm)


@dataclass
class ServiceStep:
    """One service poll: calls to send, clients to re-create, outcomes to log, pulses and status to publish."""

    sends: list[Send] = field(default_factory=list)
    reconnect: list[str] = field(default_factory=list)  # recorders whose Trigger clients to re-create
    relabel: list[str] = field(default_factory=list)  # recorders whose label client to re-create
    reports: list[Report] = field(default_factory=list)  # every call outcome, to log
    late_labels: list[tuple[str, str, str]] = field(default_factory=list)  # (recorder, outcome, message)
    haptic: list[dict[str, Any]] = field(default_factory=list)  # /quest/haptic commands due now
    status: dict[str, Any] | None = None  # /teleop/status to publish now


@dataclass
class ReplyStep:
    """What one reply makes the node do: log a report, pulse the headset."""

    report: Report | None = None
    haptic: list[dict[str, Any]] = field(default_factory=list)


class TeleopSession:
    """See the module docstring; every public method takes the session's lock."""

    def __init__(
        self,
        cfg: TeleopConfig,
        ncfg: TeleopNodeConfig,
        haptics: HapticConfig,
        spacemouse: SpaceMouseInput | None = None,
        clock: Callable[[], float] = time.monotonic,
        to_mono: HostToMono | None = None,
        bimanual: BimanualConfig | None = None,
    ):
        """``bimanual``: two arms, one per hand (None: one arm, driven by ``cfg.hand``)."""
        ncfg.validate()
        if bimanual is not None and (spacemouse is not None or ncfg.input != TELEOP_INPUTS[0]):
            raise ValueError(
                f"input {ncfg.input!r} drives one arm: two arms ({', '.join(bimanual.arms)}) take input "
                f"{TELEOP_INPUTS[0]!r}"
            )
        self.cfg, self.ncfg = cfg, ncfg
        # validates the assembled config; a SpaceMouse speaks the arm base frame already
        self.core: TeleopCore | BimanualCore = (
            TeleopCore(cfg, remap=np.eye(3) if spacemouse is not None else None)
            if bimanual is None
            else BimanualCore(cfg, bimanual)
        )
        self.spacemouse = spacemouse
        # the buttons hand's: the presses' confirmations and alarms, and (with one arm) everything
        self.haptics = HapticScheduler(haptics)
        # each arm's hand (the arm's name; one arm: the driving hand) -> the scheduler its pulses play on
        self._hand_haptics = {
            hand: self.haptics if hand == cfg.hand else HapticScheduler(haptics) for hand in self.core.arms
        }
        self.calls = RecorderCalls(list(ncfg.recorders), ncfg.calls())
        self._clock = clock
        # header stamps (the ROS clock) onto the monotonic clock, immune to a thread held between clock reads
        self._to_mono = to_mono or HostToMono()
        self._lock = threading.Lock()
        self._engage = {hand: {"hand": hand, "amp": ncfg.haptic_amp, "ms": ncfg.haptic_ms} for hand in self.core.arms}
        self._labels_pending: dict[str, tuple[Pending, float, str]] = {}  # rec -> (call, sent, outcome)
        self._presses = 0  # button presses so far (the bad verdict's pattern is felt once per press)
        self._bad_felt: tuple[int, float] = (-1, -math.inf)  # (presses, when) at the last 'bad' pattern
        self.last_outcome: dict[str, Any] | None = None  # the last label a recorder confirmed
        self.last_alarm: dict[str, Any] | None = None
        # per arm: the limits that shaped its last published target
        self._limits_active: dict[str, tuple[str, ...]] = dict.fromkeys(self.core.arms, ())
        self._status_dirty = False
        self._status_sent = 0.0
        self._last_refusal_log = dict.fromkeys(self.core.arms, -math.inf)

    @property
    def bimanual(self) -> bool:
        """Whether this session drives two arms (``tick_arms``) rather than one (``tick``)."""
        return isinstance(self.core, BimanualCore)

    # ---- inputs -------------------------------------------------------------------------------
    def _captured(self, stamp_ns: int) -> tuple[float, int | None]:
        """A message's capture time on the monotonic clock (never later than now) and its source order.

        The order is the stamp; None when unstamped (all we know is that it arrived now).
        """
        return self._to_mono.convert(stamp_ns), (stamp_ns if stamp_ns > 0 else None)

    def on_hand_pose(self, stamp_ns: int, p: Sequence[float], q: Sequence[float], hand: str | None = None) -> None:
        """Take a driving hand's pose, stamped at capture (ns).

        ``hand``: which (None: the one driving hand of a single arm); ValueError for a hand that drives no arm.
        """
        with self._lock:  # the converter's state too
            engine = self.core.engine(hand)
            t, order = self._captured(stamp_ns)
            engine.on_hand_pose(t, p, q, order)

    def on_joy(self, stamp_ns: int, hand: str, joy: Joy | None) -> None:
        """``joy`` None: a message too short to be a controller's (counted as rejected)."""
        with self._lock:
            t, order = self._captured(stamp_ns)
            if joy is None:
                self.core.counters.rejected_inputs += 1
                return
            self.core.on_joy(t, hand, joy, order)

    def on_source_change(self, stamp_ns: int, hand: str, reason: str) -> None:
        """The headset's input source changed, as ``hand``'s joy stream reports it: a clutch event."""
        with self._lock:
            t, order = self._captured(stamp_ns)
            self.core.on_source_change(t, reason, hand, order)
            self._status_dirty = True

    def on_arm_pose(self, p: Sequence[float], q: Sequence[float], arm: str | None = None) -> None:
        """Take an arm's measured flange pose, at its arrival (``arm`` None: the one arm)."""
        with self._lock:
            self.core.engine(arm).on_arm_pose(self._clock(), p, q)

    def on_joints(self, positions: Sequence[float], arm: str | None = None) -> None:
        """Take an arm's joint positions, at their arrival (``arm`` None: the one arm)."""
        with self._lock:
            self.core.engine(arm).on_joint_states(self._clock(), positions)

    def on_arm_errors(self, errors: Sequence[str], arm: str | None = None) -> None:
        """The ERROR entries of one /arm/status (none: the fault cleared), unless ``fault_on_arm_error`` is off.

        ``arm``: whose status (None: the one arm); a fault refuses or releases that arm alone.
        """
        if not self.ncfg.fault_on_arm_error:
            return
        with self._lock:
            self.core.engine(arm).on_arm_fault("; ".join(errors) if errors else None)

    def on_episode_event(self, data: str) -> None:
        """One ``/episode_events`` JSON message: the toggle, confirmations, the label, a bad verdict."""
        try:
            ev = json.loads(data)
            kind = ev.get("event")
        except (ValueError, AttributeError):
            return
        rec = ev.get("recorder")
        if not (isinstance(kind, str) and isinstance(rec, str)):
            return
        with self._lock:
            now = self._clock()
            self.calls.on_event(now, rec, kind)
            self.core.on_recording(self.calls.recording)
            if kind in EVENT_PATTERNS:
                self.haptics.confirm(now, EVENT_PATTERNS[kind])  # once for all recorders
            if kind == "labeled" and ev.get("outcome") in ("success", "failure"):
                self.haptics.confirm(now, str(ev["outcome"]))  # felt once for all recorders
                self.last_outcome = {"episode_index": ev.get("episode_index"), "outcome": ev["outcome"]}
                self._status_dirty = True
            # a bad verdict is felt once per stop, not per recorder (their episode numbers may differ): again
            # only after a press, or dedupe_s later for episodes driven through the services
            felt_press, felt_at = self._bad_felt
            if (
                kind == "saved"
                and ev.get("verdict") == "bad"
                and (self._presses > felt_press or now - felt_at > self.haptics.cfg.dedupe_s)
            ):
                self._bad_felt = (self._presses, now)
                self.haptics.play(now, "bad")

    def on_recorder_status(self, rec: str, data: str) -> None:
        """One recorder's ``~/status`` JSON message."""
        try:
            state = json.loads(data).get("state")
        except (ValueError, AttributeError):
            return
        with self._lock:
            self.calls.on_status(self._clock(), rec, state)
            self.core.on_recording(self.calls.recording)

    def on_spacemouse_report(self, t: float, report: bytes) -> bool:
        """Take one SpaceMouse report (reader thread); False when it cannot be used."""
        assert self.spacemouse is not None
        with self._lock:
            return self.spacemouse.on_report(t, report)

    def on_spacemouse_state(self, state: str, detail: str) -> None:
        """Take the SpaceMouse device's state (reader thread)."""
        assert self.spacemouse is not None and isinstance(self.core, TeleopCore)
        with self._lock:
            now = self._clock()
            was = self.spacemouse.connected
            self.spacemouse.on_state(now, state, detail)
            if self.spacemouse.connected != was:  # unplugged or plugged in: a change of input source
                self.core.on_source_change(now, f"spacemouse {state}")
            self._status_dirty = True

    # ---- control tick -------------------------------------------------------------------------
    def tick(self) -> Tick:
        """The next target (while engaged) and what else the tick did (one arm; two: ``tick_arms``).

        Presses become recorder calls,
        limits and interlocks pulse the headset, a clutch change makes the status due.
        """
        core = self.core
        if not isinstance(core, TeleopCore):
            raise TypeError("a two-arm session ticks with tick_arms()")
        with self._lock:
            now = self._clock()
            res = core.tick(now) if self.spacemouse is None else self.spacemouse.step(core, now)
            self._presses_to_calls(now, res.actions, res.stop_stamp_ns)
            log_refusal = self._arm_ticked(now, self.cfg.hand, core.arm, res)
        return Tick(res, self._engage[self.cfg.hand] if res.clutch is ClutchEvent.ENGAGED else None, log_refusal)

    def tick_arms(self) -> ArmsTick:
        """Each arm's next target (while its clutch is engaged) and what else the tick did (two arms; one: ``tick``)."""
        core = self.core
        if not isinstance(core, BimanualCore):
            raise TypeError("a single-arm session ticks with tick()")
        with self._lock:
            now = self._clock()
            res = core.tick(now)
            self._presses_to_calls(now, res.actions, res.stop_stamp_ns)
            out = ArmsTick(res)
            for arm, arm_res in res.arms.items():
                if self._arm_ticked(now, arm, core.arms[arm], arm_res):
                    out.log_refusals.append(arm)
                if arm_res.clutch is ClutchEvent.ENGAGED:
                    out.engage_haptics.append(self._engage[arm])
        return out

    def _presses_to_calls(self, now: float, actions: list[Action], stop_stamp_ns: int | None) -> None:
        for action in actions:
            self.calls.press(now, action, stop_stamp_ns)  # a STOP ends at its press's stamp
            self.haptics.new_press()
            self._presses += 1
        if actions:
            self.core.on_recording(self.calls.recording)

    def _arm_ticked(self, now: float, arm: str, engine: ArmEngine, res: ArmTick) -> bool:
        """Follow what one arm's tick did: its limits and haptics (on its hand), the status; whether to log its refusal."""
        self._track_limits(now, arm, engine.limits.acted if res.target is not None else ())
        for name in res.haptics:  # a refused grip, a release the operator did not make
            self._hand_haptics[arm].play(now, name)
        if res.clutch in _CLUTCH_CHANGES:
            self._status_dirty = True
        log_refusal = res.clutch is ClutchEvent.REFUSED and now - self._last_refusal_log[arm] > REFUSAL_LOG_PERIOD_S
        if log_refusal:
            self._last_refusal_log[arm] = now
        return log_refusal

    def _track_limits(self, now: float, arm: str, active: tuple[str, ...]) -> None:
        """Pulse ``haptics.limit`` on the arm's hand when a limit starts shaping its target, and make the status due.

        The core counts the hits.
        """
        if active == self._limits_active[arm]:
            return
        if any(name not in self._limits_active[arm] for name in active):
            self._hand_haptics[arm].play(now, "limit")
        self._limits_active[arm] = active
        self._status_dirty = True

    # ---- recorder calls -----------------------------------------------------------------------
    def poll(self, ready: Callable[[str], bool]) -> ServiceStep:
        """Advance the recorder calls and the label deadlines.

        ``ready(recorder)``: its Trigger clients are matched. Hands out the haptic pulses due and the status when it is due.
        """
        out = ServiceStep()
        with self._lock:
            now = self._clock()
            res = self.calls.poll(now, ready)
            self.core.on_recording(self.calls.recording)
            out.sends, out.reconnect, out.reports = res.sends, res.reconnect, res.reports
            for report in res.reports:
                self._alarm(now, report)
            # a label not answered within call_timeout_s (a dead endpoint still matched) is reported, and
            # that recorder's label client re-created, as RecorderCalls does for the Trigger clients
            late = [
                (rec, outcome)
                for rec, (call, sent, outcome) in self._labels_pending.items()
                if not call.done() and now - sent > self.ncfg.call_timeout_s
            ]
            for rec, outcome in late:
                del self._labels_pending[rec]
                message = f"no answer within {self.ncfg.call_timeout_s:g} s"
                out.late_labels.append((rec, outcome, message))
                self._label_alarm(now, rec, message)
            out.relabel = sorted({r for r, _ in late} | set(res.reconnect))
            out.haptic = self._due(now)
            if self._status_dirty and now - self._status_sent >= STATUS_MIN_PERIOD_S:
                out.status = self._status(now)
        return out

    def on_reply(self, call_id: int, success: bool, message: str) -> ReplyStep:
        """A recorder's answer to a Trigger call: its report (to log) and the pulses now due."""
        with self._lock:
            now = self._clock()
            report = self.calls.on_reply(now, call_id, success, message)
            self.core.on_recording(self.calls.recording)
            if report is None or report.outcome.alarm is None:
                return ReplyStep(report)
            self._alarm(now, report)
            return ReplyStep(report, self._due(now))

    def _alarm(self, now: float, report: Report) -> None:
        """Pulse the headset and remember the outcome for the status when the operator must know."""
        alarm = report.outcome.alarm
        if alarm is None:
            return
        self.haptics.play(now, ALARM_PATTERN[alarm])  # several recorders at once: one pattern
        seq = (self.last_alarm or {}).get("seq", 0) + 1  # tells a repeated alarm from the same one
        self.last_alarm = {
            "recorder": report.recorder,
            "action": report.action.value,
            "outcome": report.outcome.value,
            "message": report.message,
            "pattern": alarm,
            "seq": seq,
        }
        self._status_dirty = True

    # ---- label calls (the stop chord) ---------------------------------------------------------
    def label_sent(self, rec: str, call: Pending, outcome: str) -> None:
        """A ``label_episode`` call went out to ``rec``: its deadline starts now."""
        with self._lock:
            self._labels_pending[rec] = (call, self._clock(), outcome)

    def label_answered(self, rec: str, call: Pending) -> None:
        """``call`` has its answer (the node reads it and reports a refusal with ``label_failed``)."""
        with self._lock:
            if rec in self._labels_pending and self._labels_pending[rec][0] is call:
                del self._labels_pending[rec]

    def label_failed(self, rec: str, message: str) -> None:
        """A label that did not take effect (not available, refused, failed): pulse ``refused``."""
        with self._lock:
            self._label_alarm(self._clock(), rec, message)

    def _label_alarm(self, now: float, rec: str, message: str) -> None:
        self.haptics.play(now, "refused")
        seq = (self.last_alarm or {}).get("seq", 0) + 1
        self.last_alarm = {
            "recorder": rec,
            "action": "label_episode",
            "outcome": "refused",
            "message": message,
            "pattern": "failed",
            "seq": seq,
        }
        self._status_dirty = True

    # ---- outputs ------------------------------------------------------------------------------
    def _due(self, now: float) -> list[dict[str, Any]]:
        return [
            {"hand": hand, "amp": p.amp, "ms": p.ms}
            for hand, scheduler in self._hand_haptics.items()
            for p in scheduler.due(now)
        ]

    def haptic_due(self) -> list[dict[str, Any]]:
        """The /quest/haptic commands due now."""
        with self._lock:
            return self._due(self._clock())

    def status(self) -> dict[str, Any]:
        """/teleop/status now (the 1 Hz one); the limits seen since the previous status are cleared."""
        with self._lock:
            return self._status(self._clock())

    def _status(self, now: float) -> dict[str, Any]:
        core = self.core
        arms = core.arms
        # limits_active: every limit that changed a target since the last status, so a brief hit shows
        limits = {arm: sorted(e.limits_seen | set(self._limits_active[arm])) for arm, e in arms.items()}
        newest = max(arms.values(), key=lambda e: -math.inf if e.last_release_t is None else e.last_release_t)
        counters = core.counters if isinstance(core, TeleopCore) else core.total_counters()
        played: dict[str, int] = {}
        for scheduler in self._hand_haptics.values():
            for name, n in scheduler.played.items():
                played[name] = played.get(name, 0) + n
        status = {
            "engaged": core.engaged,
            "recording": core.recording,
            **asdict(counters),
            "limits_active": sorted({name for names in limits.values() for name in names}),
            "recorders": {n: r.state for n, r in self.calls.recorders.items()},
            "calls_in_flight": self.calls.pending(),
            "last_alarm": self.last_alarm,
            "last_release": newest.last_release,
            "last_release_age_s": _age(now, newest.last_release_t),
            "haptics": played,
            "input": self.ncfg.input,
            "last_outcome": self.last_outcome,
        }
        if self.spacemouse is not None:
            status["spacemouse"] = self.spacemouse.status()
        if isinstance(core, BimanualCore):
            status["arms"] = {arm: _arm_status(now, e, limits[arm]) for arm, e in arms.items()}
        for e in arms.values():
            e.limits_seen.clear()
        self._status_dirty, self._status_sent = False, now
        return status


def _age(now: float, t: float | None) -> float | None:
    return None if t is None else round(max(0.0, now - t), 3)


def _arm_status(now: float, engine: ArmEngine, limits_active: list[str]) -> dict[str, Any]:
    """One arm's part of a two-arm status: its clutch, limits, newest forced release and counters."""
    counters = asdict(engine.counters)
    del counters["source_changes"]  # the session's (a new source releases both arms), not an arm's
    return {
        "engaged": engine.engaged,
        "limits_active": limits_active,
        "last_release": engine.last_release,
        "last_release_age_s": _age(now, engine.last_release_t),
        **counters,
    }

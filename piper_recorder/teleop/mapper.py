"""TeleopCore: controller poses + buttons + arm feedback in, safe EEF targets and recorder actions out.

Pure Python, driven with explicit monotonic times so tests can replay any sequence. The node feeds
each message into ``on_*`` and calls ``tick(t)`` at the control rate; a tick returns a target only
while the clutch is engaged.

Headset inputs carry their capture time (the node maps ``header.stamp`` onto the monotonic clock),
not their arrival: a bridge that falls behind delivers old poses late, and judging them by arrival
would replay seconds of old motion. The watchdog therefore releases once the newest pose or joy was
captured more than ``stale_timeout_s`` ago, however recently it arrived; a pose older than the one
held is ignored. A grip release (or the menu button) acts in ``on_joy`` at once, before any later
message of the same backlog can hide it, whatever the age of the message that carried it.

Mapping (on engage latch controller pose c0 and arm pose e0; M is the XR->robot remap):
    p = e0.p + M (c.p - c0.p) * pos_scale
    R = (M c.R c0.R^T M^T) e0.R
At the engage tick c == c0, so the first target is exactly the measured arm pose: engaging (and
re-engaging after any release) never makes the arm jump. The raw target then goes through the
one-euro filter, the tether / workspace / speed limits, and a final hard check; a target failing
the check is never returned (it is counted and the clutch is released).

What the operator must feel (``TickResult.haptics``, pattern names of ``teleop.haptics``): a grip
the interlocks refuse (no arm feedback, arm fault, arm outside the workspace, controller not
tracked) gives ``refused`` once per grip attempt, since the clutch retries silently while the grip
stays closed and an operator who feels nothing thinks the arm follows; a release the operator did
not make (stale headset stream, lost arm feedback, arm fault, unsafe target) gives ``release``,
because the clutch now needs the grip opened and closed again, and an operator still holding it
would otherwise wait for an arm that never moves. The menu button's release is the operator's own:
counted, not pulsed. ``last_release`` keeps the reason of the newest forced release for the status.

A change of input source (``on_source_change``: another page took over the headset relay, the headset
reconnected, the SpaceMouse was unplugged or plugged in) is a clutch event: the clutch is force-released
and stays disarmed until the new source's grip opens, and the held hand pose and joys are forgotten, so
the arm moves only on a fresh grip of the new source, from where it stands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike

from ..names import DELETE_LAST_EPISODE, DISCARD_EPISODE, QUEST_HANDS, START_EPISODE, STOP_EPISODE
from .clutch import Clutch, ClutchConfig, ClutchEvent
from .filters import FilterConfig, OneEuroOrientation, OneEuroPosition
from .frames import FrameConfig, remap_matrix
from .limits import Limits, LimitsConfig, LimitViolation
from .rotations import Quat, conjugate_rotation_t, is_finite, quat_mul_t, rotate_then_t, unit_t

QUAT_NORM_TOL = 0.1  # input quaternions further than this from unit length are rejected, not "fixed"
MAX_ABS_POS = 100.0  # m; larger coordinates are garbage (and would overflow the arithmetic)
STALL_TICKS = 3  # a tick this many periods late means our own process was stalled ...
STALL_GRACE_S = 0.05  # ... and the watchdogs wait this long for the queued messages to be delivered


@dataclass
class TeleopConfig:
    """Teleop's parameters (its sub-configs: ``clutch``, ``frame``, ``filter``, ``limits``)."""

    hand: str = "right"  # controller that drives the arm; the other hand's X/A deletes
    control_rate_hz: float = 100.0
    pos_scale: float = 1.0
    stale_timeout_s: float = 0.25  # headset watchdog: disengage after this long without data
    arm_stale_timeout_s: float = 0.5  # arm feedback older than this refuses / drops the clutch
    gripper_max_width: float = 0.07  # m; width = max * (1 - trigger)
    delete_hold_s: float = 1.0  # hold the other hand's primary this long to delete the last episode
    # the stop chord: A alone labels the stopped episode success (False: leaves it unlabelled), A with the
    # thumbstick held pressed labels it failure
    outcome_on_stop: bool = True
    clutch: ClutchConfig = field(default_factory=ClutchConfig)
    frame: FrameConfig = field(default_factory=FrameConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    @property
    def other_hand(self) -> str:
        """The hand that does not drive the arm."""
        return "left" if self.hand == "right" else "right"

    @property
    def period(self) -> float:
        """The control period in seconds."""
        return 1.0 / self.control_rate_hz

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if self.hand not in QUEST_HANDS:
            raise ValueError(f"hand must be 'left' or 'right', got {self.hand!r}")
        for name in (
            "control_rate_hz",
            "pos_scale",
            "stale_timeout_s",
            "arm_stale_timeout_s",
            "gripper_max_width",
            "delete_hold_s",
        ):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        if self.control_rate_hz > 1000:
            raise ValueError(f"control_rate_hz {self.control_rate_hz} is unreasonably high")
        for sub in (self.clutch, self.frame, self.filter, self.limits):
            sub.validate()


class Action(Enum):
    """Recorder service calls requested by the buttons."""

    START = START_EPISODE
    STOP = STOP_EPISODE
    DISCARD = DISCARD_EPISODE
    DELETE_LAST = DELETE_LAST_EPISODE


@dataclass
class Joy:
    """One hand's controls: trigger and squeeze in [0, 1], and the buttons."""

    trigger: float = 0.0
    squeeze: float = 0.0
    primary: bool = False
    secondary: bool = False
    menu: bool = False
    stick_click: bool = False  # the thumbstick pressed in: held across a stop, it labels the episode failure


@dataclass
class Pose:
    """A position (m) and unit quaternion (xyzw)."""

    p: np.ndarray
    q: np.ndarray  # xyzw, unit


@dataclass
class TickResult:
    """What one control tick did: the target (while engaged), clutch event, presses, haptics."""

    target: Pose | None = None
    gripper: float | None = None
    clutch: ClutchEvent = ClutchEvent.NONE
    reason: str | None = None  # why the clutch refused or was forced to release
    actions: list[Action] = field(default_factory=list)
    haptics: list[str] = field(default_factory=list)  # patterns to play now ("refused", "release")
    outcome: str | None = None  # the stop chord's label for the episode being stopped (docs/curation.md)
    # the capture stamp (header stamp, ROS ns) of the press that asked for the STOP: the episode ends there,
    # not when the request reaches a recorder (stop_episode_at); None: unstamped, it ends at the arrival
    stop_stamp_ns: int | None = None


@dataclass
class Counters:
    """The core's counters for the status."""

    rejected_inputs: int = 0  # non-finite / non-unit poses and joys ignored
    refused_engages: int = 0  # ticks where the grip was closed but an interlock refused
    forced_releases: int = 0
    unsafe_targets: int = 0  # targets that failed the final check (never published)
    published: int = 0
    out_of_order_inputs: int = 0  # headset poses/joys captured (at the source) before the one held (ignored)
    source_changes: int = 0  # the input source changed (a new page or connection): a forced release
    limit_hits: dict[str, int] = field(default_factory=dict)  # limits.LIMIT_NAMES: times each started acting


@dataclass(frozen=True, slots=True)
class _FPose:
    """A pose held by the core, as floats.

    The tick's arithmetic is scalar (``rotations.*_t``), and tuples need no defensive copies; arrays are made
    only for the target handed out.
    """

    p: tuple[float, ...]
    q: Quat


def _floats(v: ArrayLike) -> list[float] | None:
    """``v`` flattened to floats as numpy would (None: not numbers).

    A list or tuple of floats (what the node passes, on every message) is taken without numpy.
    """
    if (type(v) is list or type(v) is tuple) and all(type(x) is float for x in v):
        return list(v)
    try:
        return np.asarray(v, dtype=float).ravel().tolist()
    except (TypeError, ValueError):
        return None


def _valid_pose(p: ArrayLike, q: ArrayLike) -> _FPose | None:
    pl = _floats(p)
    ql = _floats(q) if pl is not None else None
    if pl is None or ql is None:
        return None
    if len(pl) != 3 or len(ql) != 4 or not is_finite(pl, ql):
        return None
    if (
        max(abs(v) for v in pl) > MAX_ABS_POS
        or max(abs(v) for v in ql) > 2.0
        or abs(math.sqrt(sum(v * v for v in ql)) - 1.0) > QUAT_NORM_TOL
    ):
        return None
    return _FPose(tuple(pl), unit_t(ql))


class TeleopCore:
    """The teleop state machine: inputs in through ``on_*``, a target out of each ``tick``."""

    def __init__(self, cfg: TeleopConfig, remap: np.ndarray | None = None):
        """Start idle (clutch released, nothing held).

        ``remap``: the input's frame -> arm base (default: the XR stage remap of ``cfg.frame``); an
        input that already speaks the arm base frame (``piper_recorder.teleop.spacemouse``) passes the identity.
        """
        cfg.validate()
        self.cfg = cfg
        self.M = remap_matrix(cfg.frame) if remap is None else np.asarray(remap, dtype=float).reshape(3, 3)
        if abs(float(np.linalg.det(self.M)) - 1.0) > 1e-6 or not np.allclose(self.M @ self.M.T, np.eye(3)):
            raise ValueError(f"remap must be a rotation matrix, got {self.M.tolist()}")
        self._M = self.M.tolist()
        self._Mt = self.M.T.tolist()
        self.clutch = Clutch(cfg.clutch)
        self.limits = Limits(cfg.limits)
        self.pos_filter = OneEuroPosition(cfg.filter)
        self.rot_filter = OneEuroOrientation(cfg.filter)
        self.counters = Counters()
        self.limits_seen: set[str] = set()  # limits that acted since the caller last cleared it (status)
        self.recording = False
        self._hand: _FPose | None = None
        self._hand_t = -math.inf
        self._joy: Joy | None = None
        self._joy_t = -math.inf
        # the source's order of the pose / joy held (their header stamps, ns): None = unstamped
        self._hand_order: int | None = None
        self._joy_order: int | None = None
        self._arm: _FPose | None = None
        self._arm_t = -math.inf
        self._joints_t = -math.inf
        self._arm_fault: str | None = None
        self._actions: list[Action] = []
        self._outcome: str | None = None  # the label of the last stop press, handed out with it
        self._stop_stamp: int | None = None  # the last stop press's capture stamp, handed out with it
        self._other_primary_since: float | None = None
        self._delete_fired = False
        self._c0: _FPose | None = None
        self._e0: _FPose | None = None
        self._prev: _FPose | None = None
        self._last_tick_t: float | None = None
        self._grace_until = -math.inf
        self._released: tuple[ClutchEvent, str | None] | None = None  # a release on_joy applied, to report
        self._refusal_felt = False  # this grip attempt's refusal was already pulsed (reset when the grip opens)
        self._source_order: int | None = None  # the stamp of the last source change (both hands report it)
        self._baseline: set[str] = set()  # hands whose next joy only sets the button state (no press edges)
        self.last_release: str | None = None  # why the newest forced release happened (menu, stale stream, ...)
        self.last_release_t: float | None = None  # ... and when (monotonic): a late HUD still shows a recent one

    # ---- inputs -------------------------------------------------------------------------------
    @staticmethod
    def _newer(t: float, order: int | None, held_t: float, held_order: int | None) -> bool:
        """Whether an input is not older than the one held.

        By the source's order (the header stamp the
        bridge gave it, which rises with the headset's capture clock) when both have one: ``t`` is that
        stamp moved onto this host's monotonic clock, and the move reads two clocks, so a thread preempted
        between the reads shifts it by the preemption (inputs of a rising stream would be judged out of
        order, and dropped). By ``t`` otherwise.
        """
        if order is not None and held_order is not None:
            return order >= held_order
        return t >= held_t

    def on_hand_pose(self, t: float, p: ArrayLike, q: ArrayLike, order: int | None = None) -> bool:
        """``t``: capture time of the pose (monotonic clock); ``order``: its source order (header stamp, ns)."""
        pose = _valid_pose(p, q)
        if pose is None:
            self.counters.rejected_inputs += 1
            return False
        if not self._newer(t, order, self._hand_t, self._hand_order):
            self.counters.out_of_order_inputs += 1  # older than the pose held: never drive with it
            return False
        # newer at the source: its capture time is not earlier than the held one's, whatever t's noise
        self._hand, self._hand_t, self._hand_order = pose, max(t, self._hand_t) if order is not None else t, order
        return True

    def on_joy(self, t: float, hand: str, joy: Joy, order: int | None = None) -> bool:
        """``t``, ``order``: as ``on_hand_pose``."""
        if not all(math.isfinite(v) for v in (joy.trigger, joy.squeeze)):
            self.counters.rejected_inputs += 1
            return False
        joy = Joy(
            min(1.0, max(0.0, joy.trigger)),
            min(1.0, max(0.0, joy.squeeze)),
            bool(joy.primary),
            bool(joy.secondary),
            bool(joy.menu),
            bool(joy.stick_click),
        )
        baseline = hand in self._baseline  # the first joy of a new source: a button held is no press
        self._baseline.discard(hand)
        if hand == self.cfg.hand:
            prev = joy if baseline else self._joy or Joy()
            if joy.primary and not prev.primary:
                if self.recording:  # the stop chord: the thumbstick held in says failure
                    self._outcome = "failure" if joy.stick_click else "success" if self.cfg.outcome_on_stop else None
                    self._stop_stamp = order
                self._actions.append(Action.STOP if self.recording else Action.START)
                self.recording = not self.recording  # optimistic; on_recording() corrects it
            if joy.secondary and not prev.secondary:
                self._actions.append(Action.DISCARD)
                self.recording = False
            if self.clutch.engaged and (joy.squeeze < self.cfg.clutch.release_below or joy.menu):
                # Release now, not at the next tick: a later message of a backlog (a re-grip) must not
                # hide it, and its age does not matter: an opened grip is always obeyed.
                ev = self.clutch.update(joy.squeeze, joy.menu, None)
                if ev is ClutchEvent.FORCED_RELEASE:
                    self._count_release(t, "menu")
                self._released = (ev, "menu" if ev is ClutchEvent.FORCED_RELEASE else None)
            if self._newer(t, order, self._joy_t, self._joy_order):
                self._joy, self._joy_order = joy, order
                self._joy_t = max(t, self._joy_t) if order is not None else t
            else:
                self.counters.out_of_order_inputs += 1
        elif hand == self.cfg.other_hand:
            if joy.primary and baseline:
                self._delete_fired = True  # held when the source changed: the hold counts from a fresh press
            elif joy.primary:
                if self._other_primary_since is None:
                    self._other_primary_since = t
            else:
                self._other_primary_since, self._delete_fired = None, False
            self._check_delete_hold(t)
        return True

    def on_source_change(self, t: float, reason: str, hand: str | None = None, order: int | None = None) -> None:
        """The input source changed (see the module docstring): release, and forget the held inputs.

        A headset reports it on each hand's joy
        stream (``hand``; None: every hand at once) with one source stamp (``order``): the release acts
        once, and each hand's held input is forgotten when its own stream says so, after anything that
        stream delivered of the old source.
        """
        if order is None or order != self._source_order:
            self._source_order = order
            self.counters.source_changes += 1
            if self.clutch.force_release() is ClutchEvent.FORCED_RELEASE:
                self._released = (ClutchEvent.FORCED_RELEASE, self._count_release(t, reason))
            self._refusal_felt = False
        hands = QUEST_HANDS if hand is None else (hand,)
        if self.cfg.hand in hands:
            self._hand, self._hand_t, self._hand_order = None, -math.inf, None
            self._joy, self._joy_t, self._joy_order = None, -math.inf, None
        if self.cfg.other_hand in hands:
            self._other_primary_since, self._delete_fired = None, False
        self._baseline.update(hands)

    def on_arm_pose(self, t: float, p: ArrayLike, q: ArrayLike) -> bool:
        """Take the arm's measured flange pose at ``t``; False when refused (not finite, not unit)."""
        pose = _valid_pose(p, q)
        if pose is None:
            self.counters.rejected_inputs += 1
            return False
        self._arm, self._arm_t = pose, t
        return True

    def on_joint_states(self, t: float, positions: ArrayLike) -> bool:
        """Take the arm's joint positions at ``t``; False when refused."""
        # the node's list of floats as it is; anything else as numpy reads it (and refuses it)
        values = (
            positions
            if type(positions) is list and all(type(x) is float for x in positions)
            else np.asarray(positions, dtype=float)
        )
        if not is_finite(values):
            self.counters.rejected_inputs += 1
            return False
        self._joints_t = t
        return True

    def on_arm_fault(self, fault: str | None) -> None:
        """The arm reported a fault (message) or cleared it (None)."""
        self._arm_fault = fault

    def on_recording(self, recording: bool) -> None:
        """Recorder-reported state (from /episode_events) wins over the optimistic toggle."""
        self.recording = recording

    @property
    def engaged(self) -> bool:
        """Whether the clutch is engaged."""
        return self.clutch.engaged

    # ---- control tick -------------------------------------------------------------------------
    def tick(self, t: float) -> TickResult:
        """One control tick at ``t``: the next target while engaged, and what else happened."""
        res = TickResult()
        self._check_delete_hold(t)
        res.actions, self._actions = self._actions, []
        stopped = Action.STOP in res.actions
        res.outcome, self._outcome = (self._outcome if stopped else None), None
        res.stop_stamp_ns, self._stop_stamp = (self._stop_stamp if stopped else None), None
        dt_actual = self.cfg.period if self._last_tick_t is None else t - self._last_tick_t
        self._last_tick_t = t
        if dt_actual > STALL_TICKS * self.cfg.period:
            # This process itself did not run (overloaded host): messages could not arrive either, so
            # give the subscriptions a moment to catch up before judging the streams stale.
            self._grace_until = t + STALL_GRACE_S

        if self._released is not None:
            (res.clutch, res.reason), self._released = self._released, None
            if res.clutch is ClutchEvent.FORCED_RELEASE and res.reason != "menu":
                res.haptics.append("release")  # not the operator's doing: tell the hand to re-grip
            return res  # released on an input: no target this tick, whatever came after
        if self.clutch.engaged and t >= self._grace_until:
            reason = self._stream_problem(t) or self._arm_problem(t)
            if reason is not None:
                return self._forced(t, res, reason)
        if self._joy is not None and t - self._joy_t <= self.cfg.stale_timeout_s:
            if self._joy.squeeze < self.cfg.clutch.release_below:
                self._refusal_felt = False  # the grip opened: the next closing is a new attempt
            # the interlocks decide an engage only: an engaged clutch ignores them (the watchdogs above
            # release it), so they are not evaluated 100 times a second for nothing
            refuse = None if self.clutch.engaged else self._refuse_reason(t)
            ev = self.clutch.update(self._joy.squeeze, self._joy.menu, refuse)
            res.clutch = ev
            if ev is ClutchEvent.REFUSED:
                self.counters.refused_engages += 1
                res.reason = refuse
                if not self._refusal_felt:  # once per grip attempt: the clutch retries every tick
                    self._refusal_felt = True
                    res.haptics.append("refused")
            elif ev is ClutchEvent.FORCED_RELEASE:
                res.reason = self._count_release(t, "menu")
            elif ev is ClutchEvent.ENGAGED:
                self._refusal_felt = False
                self._latch()
        if not self.clutch.engaged:
            return res

        assert self._hand is not None and self._arm is not None and self._prev is not None
        assert self._joy is not None  # the clutch engages on a joy message only
        prev = self._prev
        raw_p, raw_q = self._raw_target(self._hand)
        dt_f = min(max(dt_actual, 0.2 * self.cfg.period), 5.0 * self.cfg.period)
        fp = self.pos_filter.step(raw_p, dt_f)
        fq = self.rot_filter.step(raw_q, dt_f)
        before = self.limits.acted
        p, q = self.limits.apply_t(fp, fq, prev.p, prev.q, self._arm.p, self.cfg.period)
        for name in self.limits.acted:
            if name not in before:
                self.counters.limit_hits[name] = self.counters.limit_hits.get(name, 0) + 1
        self.limits_seen.update(self.limits.acted)
        try:
            self.limits.check_t(p, q, prev.p, prev.q, self.cfg.period)
        except LimitViolation as exc:
            self.counters.unsafe_targets += 1
            return self._forced(t, res, f"unsafe target refused: {exc}")
        gripper = self.cfg.gripper_max_width * (1.0 - self._joy.trigger)
        if not (math.isfinite(gripper) and 0.0 <= gripper <= self.cfg.gripper_max_width):
            self.counters.unsafe_targets += 1
            return self._forced(t, res, f"unsafe gripper width {gripper} refused")
        self._prev = _FPose(tuple(p), q)
        res.target = Pose(np.array(p), np.array(q))
        res.gripper = gripper
        self.counters.published += 1
        return res

    # ---- internals ----------------------------------------------------------------------------
    def _raw_target(self, c: _FPose) -> tuple[list[float], Quat]:
        c0, e0 = self._c0, self._e0
        assert c0 is not None and e0 is not None  # latched when the clutch engaged
        k = self.cfg.pos_scale
        d = [(a - b) * k for a, b in zip(c.p, c0.p)]
        p = [e + m0 * d[0] + m1 * d[1] + m2 * d[2] for e, (m0, m1, m2) in zip(e0.p, self._M)]
        # M R(c) R(c0)^T M^T = M R(c conj(c0)) M^T, applied after the arm's latched orientation
        x0, y0, z0, w0 = c0.q
        r_delta = conjugate_rotation_t(self._M, self._Mt, quat_mul_t(c.q, (-x0, -y0, -z0, w0)))
        return p, rotate_then_t(r_delta, e0.q)

    def _latch(self) -> None:
        assert self._hand is not None and self._arm is not None  # _refuse_reason let the clutch engage
        self.limits.acted = ()  # a limit still acting at the first tick of a new engagement is a new hit
        self._c0 = self._hand
        self._e0 = self._arm
        self._prev = self._arm
        self.pos_filter.reset(self._arm.p)
        self.rot_filter.reset(self._e0.q)

    def rebase(self) -> None:
        """Make the hand pose held correspond to the last published target from now on (engaged only).

        An absolute input (a tracked controller) must not: its offset is the operator's hand. A rate
        input (a SpaceMouse integrates its twist into a pose) calls it when a limit held the target:
        without it the integrated pose runs on past the workspace wall or the tether, and pulling back
        first has to unwind all of that before the arm moves.
        """
        if self.clutch.engaged and self._hand is not None and self._prev is not None:
            self._c0 = self._hand
            self._e0 = self._prev

    def _forced(self, t: float, res: TickResult, reason: str) -> TickResult:
        if self.clutch.force_release() is ClutchEvent.FORCED_RELEASE:
            res.clutch, res.reason = ClutchEvent.FORCED_RELEASE, self._count_release(t, reason)
            res.haptics.append("release")  # not the operator's doing: tell the hand to re-grip
        return res

    def _count_release(self, t: float, reason: str) -> str:
        """Count a forced release, and keep its reason and time for the status."""
        self.counters.forced_releases += 1
        self.last_release, self.last_release_t = reason, t
        return reason

    def _stream_problem(self, t: float) -> str | None:
        age = t - min(self._hand_t, self._joy_t)
        if age > self.cfg.stale_timeout_s:
            return f"headset stream stale ({age:.3f} s)"
        return None

    def _arm_problem(self, t: float) -> str | None:
        if self._arm is None or t - self._arm_t > self.cfg.arm_stale_timeout_s:
            return "no arm pose feedback"
        if t - self._joints_t > self.cfg.arm_stale_timeout_s:
            return "no arm joint feedback"
        if self._arm_fault is not None:
            return f"arm fault: {self._arm_fault}"
        return None

    def _refuse_reason(self, t: float) -> str | None:
        if self._hand is None or t - self._hand_t > self.cfg.stale_timeout_s:
            return "controller not tracked"
        reason = self._arm_problem(t)
        if reason is not None:
            return reason
        assert self._arm is not None  # _arm_problem: no feedback is a reason
        if not self.limits.inside(self._arm.p):
            return f"arm outside workspace at {np.round(np.array(self._arm.p), 3).tolist()}"
        return None

    def _check_delete_hold(self, t: float) -> None:
        since = self._other_primary_since
        if since is not None and not self._delete_fired and t - since >= self.cfg.delete_hold_s:
            self._delete_fired = True
            self._actions.append(Action.DELETE_LAST)

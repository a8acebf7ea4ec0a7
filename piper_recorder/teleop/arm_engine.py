"""ArmEngine: one arm driven by one hand: its clutch, anchor, filters, limits, watchdogs and final check.

Pure Python, driven with explicit monotonic times. The hand's pose and joy and the arm's feedback come in
through ``on_*``; ``tick(t)`` fills in the arm's part of a tick (``ArmTick``): a target only while the
clutch is engaged. A single-arm session runs one engine (``mapper.TeleopCore``), a two-arm session one per
arm (``bimanual.BimanualCore``); the episode buttons are not an engine's (``episode_buttons``).

Headset inputs carry their capture time (the node maps ``header.stamp`` onto the monotonic clock),
not their arrival: a bridge that falls behind delivers old poses late, and judging them by arrival
would replay seconds of old motion. The watchdog therefore releases once the newest pose or joy was
captured more than ``stale_timeout_s`` ago, however recently it arrived; a pose older than the one
held is ignored. A grip release (or the menu button) acts in ``on_joy`` at once, before any later
message of the same backlog can hide it, whatever the age of the message that carried it.

Mapping (on engage latch controller pose c0 and arm pose e0; M is the input -> arm base remap):
    p = e0.p + M (c.p - c0.p) * pos_scale
    R = (M c.R c0.R^T M^T) e0.R
At the engage tick c == c0, so the first target is exactly the measured arm pose: engaging (and
re-engaging after any release) never makes the arm jump. The raw target then goes through the
one-euro filter, the tether / workspace / speed limits, and a final hard check; a target failing
the check is never returned (it is counted and the clutch is released).

What the operator must feel (``ArmTick.haptics``, pattern names of ``teleop.haptics``, for this arm's
hand): a grip the interlocks refuse (no arm feedback, arm fault, arm outside the workspace, controller
not tracked) gives ``refused`` once per grip attempt, since the clutch retries silently while the grip
stays closed and an operator who feels nothing thinks the arm follows; a release the operator did not
make (stale headset stream, lost arm feedback, arm fault, unsafe target, a new input source) gives
``release``, because the clutch now needs the grip opened and closed again, and an operator still
holding it would otherwise wait for an arm that never moves. The menu button's release is the
operator's own: counted, not pulsed. ``last_release`` keeps the reason of the newest forced release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import ArrayLike

from .clutch import Clutch, ClutchEvent
from .config import TeleopConfig
from .filters import OneEuroOrientation, OneEuroPosition
from .inputs import FPose, Joy, Pose, is_newer, valid_pose
from .limits import Limits, LimitViolation
from .rotations import Quat, conjugate_rotation_t, is_finite, quat_mul_t, rotate_then_t

STALL_TICKS = 3  # a tick this many periods late means our own process was stalled ...
STALL_GRACE_S = 0.05  # ... and the watchdogs wait this long for the queued messages to be delivered


@dataclass
class ArmTick:
    """One arm's part of a control tick: its target (while engaged), clutch event and haptics."""

    target: Pose | None = None
    gripper: float | None = None
    clutch: ClutchEvent = ClutchEvent.NONE
    reason: str | None = None  # why the clutch refused or was forced to release
    haptics: list[str] = field(default_factory=list)  # patterns to play now on this arm's hand ("refused", "release")


@dataclass
class Counters:
    """Teleop's counters for the status (an engine counts its arm's; ``source_changes`` is the session's)."""

    rejected_inputs: int = 0  # non-finite / non-unit poses and joys ignored
    refused_engages: int = 0  # ticks where the grip was closed but an interlock refused
    forced_releases: int = 0
    unsafe_targets: int = 0  # targets that failed the final check (never published)
    published: int = 0
    out_of_order_inputs: int = 0  # headset poses/joys captured (at the source) before the one held (ignored)
    source_changes: int = 0  # the input source changed (a new page or connection): a forced release
    limit_hits: dict[str, int] = field(default_factory=dict)  # limits.LIMIT_NAMES: times each started acting


def total(counters: list[Counters]) -> Counters:
    """The sum of several counters (each limit's hits summed too)."""
    out = Counters()
    for c in counters:
        for f in fields(Counters):
            if f.name != "limit_hits":
                setattr(out, f.name, getattr(out, f.name) + getattr(c, f.name))
        for name, n in c.limit_hits.items():
            out.limit_hits[name] = out.limit_hits.get(name, 0) + n
    return out


class ArmEngine:
    """One arm's teleop state machine: its hand's pose and grip and its feedback in, a target out of each ``tick``."""

    def __init__(self, cfg: TeleopConfig, remap: np.ndarray, counters: Counters | None = None):
        """Start idle (clutch released, nothing held).

        ``remap``: the hand's frame -> this arm's base (a rotation matrix); ``counters``: where to count
        (a single-arm session shares its counters with its one engine).
        """
        cfg.validate()
        self.cfg = cfg
        self.M = np.asarray(remap, dtype=float).reshape(3, 3)
        if abs(float(np.linalg.det(self.M)) - 1.0) > 1e-6 or not np.allclose(self.M @ self.M.T, np.eye(3)):
            raise ValueError(f"remap must be a rotation matrix, got {self.M.tolist()}")
        self._M = self.M.tolist()
        self._Mt = self.M.T.tolist()
        self.clutch = Clutch(cfg.clutch)
        self.limits = Limits(cfg.limits)
        self.pos_filter = OneEuroPosition(cfg.filter)
        self.rot_filter = OneEuroOrientation(cfg.filter)
        self.counters = Counters() if counters is None else counters
        self.limits_seen: set[str] = set()  # limits that acted since the caller last cleared it (status)
        self._hand: FPose | None = None
        self.hand_t = -math.inf  # the capture time of the hand pose held
        self._joy: Joy | None = None
        self._joy_t = -math.inf
        # the source's order of the pose / joy held (their header stamps, ns): None = unstamped
        self._hand_order: int | None = None
        self._joy_order: int | None = None
        self._arm: FPose | None = None
        self._arm_t = -math.inf
        self._joints_t = -math.inf
        self._arm_fault: str | None = None
        self._c0: FPose | None = None
        self._e0: FPose | None = None
        self._prev: FPose | None = None
        self._last_tick_t: float | None = None
        self._grace_until = -math.inf
        self._released: tuple[ClutchEvent, str | None] | None = None  # a release on_joy applied, to report
        self._refusal_felt = False  # this grip attempt's refusal was already pulsed (reset when the grip opens)
        self.last_release: str | None = None  # why the newest forced release happened (menu, stale stream, ...)
        self.last_release_t: float | None = None  # ... and when (monotonic): a late HUD still shows a recent one

    # ---- inputs -------------------------------------------------------------------------------
    def on_hand_pose(self, t: float, p: ArrayLike, q: ArrayLike, order: int | None = None) -> bool:
        """``t``: capture time of the pose (monotonic clock); ``order``: its source order (header stamp, ns)."""
        pose = valid_pose(p, q)
        if pose is None:
            self.counters.rejected_inputs += 1
            return False
        if not is_newer(t, order, self.hand_t, self._hand_order):
            self.counters.out_of_order_inputs += 1  # older than the pose held: never drive with it
            return False
        # newer at the source: its capture time is not earlier than the held one's, whatever t's noise
        self._hand, self.hand_t, self._hand_order = pose, max(t, self.hand_t) if order is not None else t, order
        return True

    @property
    def joy(self) -> Joy | None:
        """The hand's joy held (the newest by the source's order; None: none since the source changed)."""
        return self._joy

    def on_joy(self, t: float, joy: Joy, order: int | None = None) -> None:
        """One checked joy of this arm's hand (``inputs.valid_joy``); ``t``, ``order``: as ``on_hand_pose``."""
        if self.clutch.engaged and (joy.squeeze < self.cfg.clutch.release_below or joy.menu):
            # Release now, not at the next tick: a later message of a backlog (a re-grip) must not
            # hide it, and its age does not matter: an opened grip is always obeyed.
            ev = self.clutch.update(joy.squeeze, joy.menu, None)
            if ev is ClutchEvent.FORCED_RELEASE:
                self._count_release(t, "menu")
            self._released = (ev, "menu" if ev is ClutchEvent.FORCED_RELEASE else None)
        if is_newer(t, order, self._joy_t, self._joy_order):
            self._joy, self._joy_order = joy, order
            self._joy_t = max(t, self._joy_t) if order is not None else t
        else:
            self.counters.out_of_order_inputs += 1

    def release_for_new_source(self, t: float, reason: str) -> None:
        """The input source changed: release (a forced release, felt), and wait for the new source's grip to open."""
        if self.clutch.force_release() is ClutchEvent.FORCED_RELEASE:
            self._released = (ClutchEvent.FORCED_RELEASE, self._count_release(t, reason))
        self._refusal_felt = False

    def forget_hand(self) -> None:
        """Forget the hand's pose and joy (its stream now comes from a new source, whose order starts afresh)."""
        self._hand, self.hand_t, self._hand_order = None, -math.inf, None
        self._joy, self._joy_t, self._joy_order = None, -math.inf, None

    def on_arm_pose(self, t: float, p: ArrayLike, q: ArrayLike) -> bool:
        """Take the arm's measured flange pose at ``t``; False when refused (not finite, not unit)."""
        pose = valid_pose(p, q)
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

    @property
    def engaged(self) -> bool:
        """Whether the clutch is engaged."""
        return self.clutch.engaged

    # ---- control tick -------------------------------------------------------------------------
    def tick(self, t: float, res: ArmTick) -> ArmTick:
        """One control tick at ``t``, written into ``res``: the next target while engaged, and what else happened."""
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
        self._prev = FPose(tuple(p), q)
        res.target = Pose(np.array(p), np.array(q))
        res.gripper = gripper
        self.counters.published += 1
        return res

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

    # ---- internals ----------------------------------------------------------------------------
    def _raw_target(self, c: FPose) -> tuple[list[float], Quat]:
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

    def _forced(self, t: float, res: ArmTick, reason: str) -> ArmTick:
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
        age = t - min(self.hand_t, self._joy_t)
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
        if self._hand is None or t - self.hand_t > self.cfg.stale_timeout_s:
            return "controller not tracked"
        reason = self._arm_problem(t)
        if reason is not None:
            return reason
        assert self._arm is not None  # _arm_problem: no feedback is a reason
        if not self.limits.inside(self._arm.p):
            return f"arm outside workspace at {np.round(np.array(self._arm.p), 3).tolist()}"
        return None

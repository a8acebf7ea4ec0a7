"""SpaceMouse -> TeleopCore (no ROS): the 6-DoF twist integrated into a hand pose, the buttons into a Joy.

A SpaceMouse is a rate device: the cap's deflection is a velocity, and the cap springs back to rest.
``SpaceMouseInput`` integrates the deflection (deadband, ``linear_speed`` / ``angular_speed`` at full
deflection) into a virtual hand pose in the arm base frame and hands it, with a synthesized ``Joy``,
to the same ``TeleopCore`` the headset drives (built with the identity remap), so the clutch and its
interlocks, ``pos_scale``, the one-euro filter, the tether, workspace and speed limits, the final
hard check and the NaN rules are the headset's own. ``step(core, t)`` is one control tick.

Buttons (indices into the report-3 bitmask; 0 = left, 1 = right on the two-button models):

- ``clutch_button`` (0) toggles the clutch at the press. The cap springs back, so an engaged clutch
  with the hand off the cap commands no motion. A release teleop makes (lost arm feedback, arm fault,
  unsafe target) or a refused engage turns the toggle off: press again, the arm never starts later by
  surprise. The device closed, unplugged or silent past ``TeleopConfig.stale_timeout_s`` stops feeding
  the core, whose staleness rule releases the clutch as for a headset.
- ``gripper_button`` (1): a short press toggles the gripper (closed = width 0, open = the core's
  ``gripper_max_width``), at the release; it acts while the clutch is engaged (the width goes with the
  targets) and is kept across clutch cycles, so an object held stays held while re-centring.
- holding ``gripper_button`` for ``record_hold_s`` (1 s) starts an episode on every recorder, or stops
  and saves the one recording (the headset's A button: the same toggle, the same recorder calls).
- ``discard_button`` (-1: none; e.g. a SpaceMouse Pro's extra keys) discards the episode recording.
  Without one: ``ros2 service call /<recorder>/discard_episode std_srvs/srv/Trigger``.

Axes: the device's report frame (``hid``: x right, y toward the user, z down) maps to the arm base
(x forward, y left, z up) for an operator facing the arm's +x: pushing the cap away moves the flange
forward, lifting it moves it up, twisting it counter-clockwise (seen from above) yaws the flange
counter-clockwise. ``yaw_offset_deg`` turns that for an operator at an angle. Rotations turn the
flange about arm-base axes through the flange; ``rotation: false`` keeps its orientation.

A deflection is held until the next report; a device that reported a deflection and then nothing for
``report_timeout_s`` is taken to be at rest (counted as ``stalls``), so a report lost or a device stuck
mid-motion never keeps the arm moving. When a safety limit holds the target the virtual pose is
re-based onto the published target (``TeleopCore.rebase``): pushing into a wall winds nothing up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.mapper import Joy, TeleopCore, TickResult
from piper_recorder.teleop.rotations import normalize, quat_mul, rot_z

from .hid import DROP_REASONS, HidDecoder

# rows: arm base axes in device-report coordinates (base x = away from the user = -y, base y = left
# = -x, base z = up = -z); a proper rotation, so rotation vectors map like translations
DEVICE_TO_BASE = np.array([[0.0, -1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
MAX_BUTTON = 63
TELEOP_INPUTS = ("headset", "spacemouse")  # teleop's ``input`` parameter (and the launch argument teleop_input)


@dataclass
class SpaceMouseConfig:
    """The SpaceMouse mode's parameters (``spacemouse.*``)."""

    device: str = "auto"  # /dev/hidrawN, or auto: the first 3Dconnexion node in /sys/class/hidraw
    full_scale: float = 350.0  # raw report value at full deflection
    deadband: float = 0.1  # fraction of full scale ignored around rest (a resting cap reads a few counts)
    linear_speed: float = 0.1  # m/s at full deflection
    angular_speed: float = 0.8  # rad/s at full deflection
    rotation: bool = True  # false: translation only
    yaw_offset_deg: float = 0.0  # the device's "away from the user" relative to the arm's +x, about +z
    clutch_button: int = 0
    gripper_button: int = 1
    record_hold_s: float = 1.0  # hold the gripper button this long: start / stop-and-save an episode
    discard_button: int = -1  # -1: none
    report_timeout_s: float = 0.25  # a deflection not reported again within this is taken as rest; 0: never
    reopen_s: float = 1.0  # retry opening an absent or lost device this often

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in ("full_scale", "linear_speed", "angular_speed", "record_hold_s", "reopen_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"spacemouse.{name} must be finite and > 0, got {v}")
        if not 0.0 <= self.deadband < 1.0:
            raise ValueError(f"spacemouse.deadband must be in [0, 1), got {self.deadband}")
        if not math.isfinite(self.report_timeout_s) or self.report_timeout_s < 0:
            raise ValueError(f"spacemouse.report_timeout_s must be finite and >= 0, got {self.report_timeout_s}")
        if not math.isfinite(self.yaw_offset_deg) or abs(self.yaw_offset_deg) > 360.0:
            raise ValueError(f"spacemouse.yaw_offset_deg must be within +-360, got {self.yaw_offset_deg}")
        for name in ("clutch_button", "gripper_button"):
            if not 0 <= getattr(self, name) <= MAX_BUTTON:
                raise ValueError(f"spacemouse.{name} must be a button index 0..{MAX_BUTTON}")
        if not -1 <= self.discard_button <= MAX_BUTTON:
            raise ValueError(f"spacemouse.discard_button must be -1 (none) or 0..{MAX_BUTTON}")
        used = [b for b in (self.clutch_button, self.gripper_button, self.discard_button) if b >= 0]
        if len(set(used)) != len(used):
            raise ValueError(
                f"spacemouse buttons must differ: clutch {self.clutch_button}, gripper "
                f"{self.gripper_button}, discard {self.discard_button}"
            )
        if not self.device:
            raise ValueError("spacemouse.device must be a path or 'auto'")


@dataclass
class SpaceMouseCounters:
    """Reports, drops by reason, stalls and presses, for the status."""

    reports: int = 0
    drops: dict[str, int] = field(default_factory=dict)  # hid.DROP_REASONS: malformed reports ignored
    other_reports: int = 0  # well-formed reports that are not motion or buttons (battery, ...)
    stalls: int = 0  # deflections not repeated within report_timeout_s (taken as rest)
    clutch_presses: int = 0
    gripper_toggles: int = 0
    record_holds: int = 0
    discard_presses: int = 0
    disconnects: int = 0
    bad_devices: int = 0  # closed as not a SpaceMouse (reports too fast or malformed; reader.HidrawReader)


def _shaped(raw: tuple[int, int, int], full_scale: float, deadband: float) -> np.ndarray:
    """Raw axes -> [-1, 1] with the deadband removed (continuous at its edge)."""
    d = np.clip(np.asarray(raw, dtype=float) / full_scale, -1.0, 1.0)
    mag = np.maximum(np.abs(d) - deadband, 0.0) / (1.0 - deadband)
    return np.sign(d) * mag


def _rotvec_quat(w: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(w))
    if angle < 1e-12:
        return np.array([0.0, 0.0, 0.0, 1.0])
    axis = w / angle
    s = math.sin(angle / 2.0)
    return np.array([axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2.0)])


class SpaceMouseInput:
    """Decoded reports -> a virtual hand pose (arm base frame) and a Joy, fed to a TeleopCore by ``step``.

    Times are monotonic seconds; every method is called under the caller's one lock (reader thread
    and control thread).
    """

    def __init__(self, cfg: SpaceMouseConfig):
        cfg.validate()
        self.cfg = cfg
        self.decoder = HidDecoder(cfg.full_scale)
        self.A = rot_z(math.radians(cfg.yaw_offset_deg)) @ DEVICE_TO_BASE
        self.counters = SpaceMouseCounters()
        self.device_state, self.device_detail = "closed", ""
        self.clutch_on = False
        self.gripper_closed = False
        self.p: np.ndarray = np.zeros(3)
        self.q = np.array([0.0, 0.0, 0.0, 1.0])
        self._v = np.zeros(3)  # arm base frame, m/s
        self._w = np.zeros(3)  # rad/s
        self._t: float | None = None  # integrated up to
        self._motion_t = -math.inf  # the last motion report
        self._buttons = 0
        self._grip_down_t: float | None = None
        self._record_fired = False
        self._pulse_primary = False
        self._pulse_secondary = False
        self._fed_live = False  # the last Joy fed had the clutch on or a press: the next one must follow
        # the core's clutch may wait for an open grip (after its forced release, a refusal, a reconnect):
        # the next Joy fed is an open one, so the next press engages
        self._disarmed = False

    @property
    def connected(self) -> bool:
        """Whether the device is open."""
        return self.device_state == "open"

    # ---- device --------------------------------------------------------------------------------
    def on_state(self, t: float, state: str, detail: str = "") -> None:
        """The reader's device state: "open", "absent", "lost", "bad"."""
        if self.connected and state != "open":
            self.counters.disconnects += 1
        if state == "bad":
            self.counters.bad_devices += 1
        if state == "open" and not self.connected:
            self._disarmed = True  # the core may have released on the silence: re-arm it with an open grip
        self.device_state, self.device_detail = state, detail
        if state != "open":  # nothing held over a reconnect: no motion, no clutch, no half press
            self._integrate(t)
            self._v, self._w = np.zeros(3), np.zeros(3)
            self.clutch_on = False
            self._buttons, self._grip_down_t, self._record_fired = 0, None, False

    def on_report(self, t: float, report: bytes) -> bool:
        """Apply one report; False when the decoder refused it (counted in ``drops``)."""
        self._integrate(t)
        self.counters.reports += 1
        d = self.decoder.decode(report)
        self.counters.drops = {r: self.decoder.drops[r] for r in DROP_REASONS if r in self.decoder.drops}
        if d.kind == "motion":
            st = self.decoder.state
            self._v = self.A @ _shaped(st.translation, self.cfg.full_scale, self.cfg.deadband) * self.cfg.linear_speed
            rot = _shaped(st.rotation, self.cfg.full_scale, self.cfg.deadband) * self.cfg.angular_speed
            self._w = self.A @ rot if self.cfg.rotation else np.zeros(3)
            self._motion_t = t
        elif d.kind == "buttons":
            self._on_buttons(t, self.decoder.state.buttons)
        elif d.kind == "other":
            self.counters.other_reports += 1
        return d.kind != "drop"

    def _on_buttons(self, t: float, mask: int) -> None:
        pressed, released = mask & ~self._buttons, self._buttons & ~mask
        self._buttons = mask
        c, g, x = (1 << self.cfg.clutch_button), (1 << self.cfg.gripper_button), self.cfg.discard_button
        if pressed & c:
            self.counters.clutch_presses += 1
            self.clutch_on = not self.clutch_on
            if self.clutch_on:  # a fresh virtual pose per engagement: it stays small
                self.p, self.q = np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0])
        if pressed & g:
            self._grip_down_t, self._record_fired = t, False
        if released & g and self._grip_down_t is not None:
            self._check_hold(t)
            if not self._record_fired:
                self.gripper_closed = not self.gripper_closed
                self.counters.gripper_toggles += 1
            self._grip_down_t, self._record_fired = None, False
        if x >= 0 and pressed & (1 << x):
            self.counters.discard_presses += 1
            self._pulse_secondary = True

    def _check_hold(self, t: float) -> None:
        if self._grip_down_t is not None and not self._record_fired and t - self._grip_down_t >= self.cfg.record_hold_s:
            self._record_fired = True
            self.counters.record_holds += 1
            self._pulse_primary = True

    def _integrate(self, t: float) -> None:
        if self._t is None or t <= self._t:
            self._t = t if self._t is None else self._t
            return
        end = t
        moving = bool(np.any(self._v) or np.any(self._w))
        timeout = self.cfg.report_timeout_s
        if moving and timeout > 0 and t - self._motion_t > timeout:
            end = max(self._t, self._motion_t + timeout)  # the deflection counted until the timeout, then rest
        dt = end - self._t
        if self.clutch_on and dt > 0:
            self.p = self.p + self._v * dt
            if np.any(self._w):
                self.q = normalize(quat_mul(_rotvec_quat(self._w * dt), self.q))
        if end < t:
            self._v, self._w = np.zeros(3), np.zeros(3)
            self.counters.stalls += 1
        self._t = t

    # ---- control tick --------------------------------------------------------------------------
    def sample(self, t: float) -> tuple[np.ndarray, np.ndarray, Joy] | None:
        """The hand pose and Joy for a tick at ``t``; None while the device is not open.

        The core's staleness rule then releases the clutch.
        """
        if not self.connected:
            return None
        self._integrate(t)
        self._check_hold(t)
        squeeze = 1.0 if self.clutch_on and not self._disarmed else 0.0
        self._disarmed = False
        joy = Joy(
            trigger=1.0 if self.gripper_closed else 0.0,
            squeeze=squeeze,
            primary=self._pulse_primary,
            secondary=self._pulse_secondary,
            menu=False,
        )
        self._pulse_primary = self._pulse_secondary = False  # one tick high: the core acts on the edge
        return self.p.copy(), self.q.copy(), joy

    def recenter(self) -> None:
        """Put the integrated hand pose back at the origin."""
        self.p, self.q = np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0])

    def step(self, core: TeleopCore, t: float) -> TickResult:
        """One control tick: feed the core, tick it, and follow what it did.

        With the clutch off and nothing to press the core is not fed at all (it then has nothing to do
        each tick, as with no headset): the integration and the hold timer still advance here, and the
        tick that turns the clutch on (or carries a press) feeds the pose and the Joy the core engages
        or acts on.
        """
        if self.connected:
            self._integrate(t)
            self._check_hold(t)
        active = (
            self.clutch_on
            or core.engaged
            or self._pulse_primary
            or self._pulse_secondary
            or self._fed_live
            or self._disarmed
        )
        fed = self.sample(t) if active else None
        # after a Joy with the clutch on or a press, feed the one that lets go too (the core re-arms the
        # clutch on an open grip and sees a press by its edge)
        self._fed_live = fed is not None and (fed[2].squeeze > 0 or fed[2].primary or fed[2].secondary)
        if fed is not None:
            p, q, joy = fed
            core.on_hand_pose(t, p, q)
            core.on_joy(t, core.cfg.hand, joy)
        res = core.tick(t)
        if res.clutch in (ClutchEvent.FORCED_RELEASE, ClutchEvent.REFUSED):
            self.clutch_on = False
            self._disarmed = True  # press again: a late engage or a re-engage never starts by surprise
        if res.target is not None and core.limits.acted and fed is not None:
            self.recenter()  # a limit holds the target: follow it, wind nothing up
            core.on_hand_pose(t, self.p, self.q)
            core.rebase()
        return res

    def status(self) -> dict[str, object]:
        """The device's state and counters for ``/teleop/status``."""
        return {
            "device": self.device_state,
            "detail": self.device_detail,
            "layout": self.decoder.layout,
            "clutch": self.clutch_on,
            "gripper_closed": self.gripper_closed,
            **dict(vars(self.counters).items()),
        }

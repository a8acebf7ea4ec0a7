"""Arm command backends over ``PiperLink``: how a goal (pose + joint solution) becomes CAN frames.

* ``PositionBackend``: MotionCtrl_2(0x01, 0x00 MOVE P, speed) + EndPoseCtrl; the firmware solves IK.
* ``ImpedanceBackend``: MotionCtrl_2(0x01, 0x04 MOVE M, speed, 0xAD) + JointMitCtrl per joint. The host
  has already solved IK (the controller does it while validating the target); here the joint
  reference moves at most ``max_joint_step`` per tick, its low-passed rate is sent as v_ref (without
  it the PD lags by kd/kp), gains ramp from 0 over ``gain_ramp_s``, and the torque feed-forward is
  ``t_ff`` + gravity: sampled from the holding torques in a joint-position hold just before switching
  into MIT mode, then (``gravity_adapt_s`` > 0) low-passed toward the measured motor torque of joints
  that are nearly still and off their limits, so it follows the pose; clipped to ``gravity_ff_max``.
  Leaving MIT mode returns to a joint-position hold at the measured joints.

Each ``command`` returns the pose it sent (absolute, 4x4) or None when it sent nothing this tick;
an unchanged goal is re-sent after ``keepalive_s`` of silence rather than every tick.

Firmware (``firmware``): releases read JointMitCtrl differently, so before it commands
anything the impedance backend is configured with the dialect of the firmware the link read
(``configure``): it refuses (``FirmwareRefused``, naming the firmware and the way out) an unknown
firmware or one before S-V1.7-3 (joints reversed in MIT mode), divides the torque of joints 1-3 by
4 on S-V1.7-3..1.8-2 (the firmware multiplies it by 4; the link divides their effort likewise), and
sends the 12-bit frame with move mode 0x06 from S-V1.8-8 (the link encodes it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from piper_recorder.errors import PiperError

from . import kinematics as kin
from .firmware import MitDialect
from .link import Feedback, PiperLink


class FirmwareRefused(PiperError, RuntimeError):
    """The impedance backend will not drive this firmware (the message says why and what to do)."""


@dataclass
class ArmConfig:
    """Everything the arm controller needs; the piper_arm node declares one ROS parameter per field."""

    can_channel: str = "can0"
    can_interface: str = "socketcan"
    backend: str = "position"  # "position" | "impedance"
    emulate: bool = False  # start the CAN emulator in-process on a virtual bus
    auto_enable: bool = False  # enable + hold on start with real hardware (emulate always does)
    # where the emulated arm starts: a ready pose, because the real rest pose (all zeros) sits on the
    # j2/j3 limits with the wrist singular (j5 = 0), where no IK can follow small Cartesian targets
    emulator_start_joints: list[float] = field(default_factory=lambda: [0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    # an in-process virtual bus cannot fall silent: a feedback gap there means the host starved the
    # emulator's thread, so emulation relaxes can_silence_s
    emulator_can_silence_s: float = 1.0
    # the firmware version the emulator reports and whose MIT dialect it speaks ("" = the emulator's
    # default, S-V1.8-5; e.g. S-V1.8-8 for the 12-bit MIT frame, firmware.py)
    emulator_firmware: str = ""
    control_rate_hz: float = 200.0
    # position backend with the node's inputs: a target goes out when it arrives (at most control_rate_hz);
    # without new targets the loop ticks at this rate (keepalives, holds, homing steps, CAN-silence checks)
    hold_rate_hz: float = 50.0
    # /arm/joint_states and /arm/eef_pose rate (Hz): every complete feedback set of the arm (~200 Hz) is
    # read, every other one published. No consumer needs 200 Hz (rows at 30 Hz hold the newest sample,
    # <= 10 ms old at 100 Hz; teleop ticks at 100 Hz) and every subscriber pays for every message.
    # >= the arm's rate publishes every set.
    feedback_publish_hz: float = 100.0
    # MotionCtrl_2 speed percentage: caps the firmware's joint speeds. Streamed EndPoseCtrl targets need
    # full speed (as piper_sdk's end-pose demo sends): near the ready pose a 5 cm sideways hand move
    # counter-rotates joints 4 and 6 by ~0.8 rad, and a lower cap lags the path. Teleop already caps
    # the target's speed and tethers it to the measured pose.
    speed: int = 100
    kp: list[float] = field(default_factory=lambda: [5.0, 25.0, 5.0, 8.0, 8.0, 5.0])
    kd: list[float] = field(default_factory=lambda: [0.3, 1.2, 0.3, 0.45, 0.45, 0.3])
    t_ff: list[float] = field(default_factory=lambda: [0.0] * 6)
    gravity_ff: bool = True
    gravity_ff_max: float = 4.0  # N m clip of the sampled gravity torque
    gravity_sample_s: float = 0.25
    gravity_adapt_s: float = 0.5  # in MIT mode, low-pass the ff toward the holding torque
    # measured while nearly still (0 = keep the entry sample)
    gain_ramp_s: float = 0.8
    max_joint_step: float = 0.02  # rad per control tick (impedance)
    velocity_ff_tau: float = 0.03  # s, low-pass of the joint-reference velocity sent as v_ref
    # (0 = send v_ref 0; the PD then lags by kd/kp seconds)
    keepalive_s: float = 0.04
    stale_target_s: float = 0.5
    can_silence_s: float = 0.2
    joint_min: list[float] = field(default_factory=lambda: kin.SDK_JOINT_MIN.tolist())
    joint_max: list[float] = field(default_factory=lambda: kin.SDK_JOINT_MAX.tolist())
    # The acceptance box (ROS parameters ``workspace_min/max``): a target outside it is refused
    # (``limits.TargetLimits``). Not teleop's clamp box (``limits.workspace_min/max``, ``LimitsConfig.clamp_box``).
    workspace_min: list[float] = field(default_factory=lambda: [-0.05, -0.45, 0.0])
    workspace_max: list[float] = field(default_factory=lambda: [0.65, 0.45, 0.65])
    # A target past a joint limit becomes the nearest pose the limited joints reach when that pose is within
    # these of it (``limits.TargetLimits``): the arm slides along the limit. 0 and 0: refused.
    limit_slide_m: float = 0.1
    limit_slide_rad: float = 0.5
    home_joints: list[float] = field(default_factory=lambda: [0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    home_speed: float = 0.6  # rad/s of the go_home joint trajectory
    gripper_max: float = 0.07  # m
    gripper_effort: float = 1.0  # N m

    @property
    def accept_box(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) corners of the box a flange target must lie in to be accepted (m, arm base)."""
        return np.array(self.workspace_min, dtype=float), np.array(self.workspace_max, dtype=float)

    def validate(self) -> None:
        """ValueError naming the first parameter out of range (the JointMitCtrl ranges for the gains)."""
        if self.backend not in ("position", "impedance"):
            raise ValueError(f"backend must be 'position' or 'impedance', got {self.backend!r}")
        for name in ("kp", "kd", "t_ff", "joint_min", "joint_max", "home_joints", "emulator_start_joints"):
            v = getattr(self, name)
            if len(v) != 6 or not all(np.isfinite(v)):
                raise ValueError(f"{name} must be 6 finite numbers, got {v!r}")
        for name in ("workspace_min", "workspace_max"):
            if len(getattr(self, name)) != 3:
                raise ValueError(f"{name} must have 3 numbers")
        if not all(0.0 <= k <= 500.0 for k in self.kp) or not all(-5.0 <= k <= 5.0 for k in self.kd):
            raise ValueError("kp must lie in [0, 500] and kd in [-5, 5] (JointMitCtrl ranges)")
        if not all(abs(t) <= 8.0 for t in self.t_ff):
            raise ValueError("t_ff must lie in [-8, 8] N m (JointMitCtrl range)")
        if not 1 <= self.speed <= 100:
            raise ValueError(f"speed must be 1..100 %, got {self.speed}")
        if not 1.0 <= self.feedback_publish_hz <= 1000.0:
            raise ValueError(f"feedback_publish_hz must be 1..1000, got {self.feedback_publish_hz}")
        if not 10.0 <= self.control_rate_hz <= 1000.0:
            raise ValueError(f"control_rate_hz must be 10..1000, got {self.control_rate_hz}")
        if not 1.0 / self.keepalive_s <= self.hold_rate_hz <= self.control_rate_hz:
            raise ValueError(
                f"hold_rate_hz must lie between 1 / keepalive_s ({1.0 / self.keepalive_s:g}) and "
                f"control_rate_hz ({self.control_rate_hz:g}), got {self.hold_rate_hz}"
            )
        if any(lo >= hi for lo, hi in zip(self.joint_min, self.joint_max)):
            raise ValueError("joint_min must be below joint_max")
        if any(lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max)):
            raise ValueError("workspace_min must be below workspace_max")
        if not (0.0 <= self.limit_slide_m <= 0.2 and 0.0 <= self.limit_slide_rad <= 1.0):
            raise ValueError(
                f"limit_slide_m must lie in [0, 0.2] m and limit_slide_rad in [0, 1] rad, "
                f"got {self.limit_slide_m}, {self.limit_slide_rad}"
            )
        for name in (
            "stale_target_s",
            "can_silence_s",
            "emulator_can_silence_s",
            "keepalive_s",
            "gain_ramp_s",
            "max_joint_step",
            "home_speed",
            "gripper_max",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")


class PositionBackend:
    """Streams EndPoseCtrl targets in MOVE P; the firmware solves IK and servoes."""

    name = "position"
    uses_feedback = False  # the firmware servoes to the pose: ``command`` reads no feedback (passed None)

    def __init__(self, cfg: ArmConfig, link: PiperLink):
        self.cfg, self.link = cfg, link
        self._last_sent: bytes | None = None  # the last pose sent, as ``command``'s key
        self._last_t = -1e9

    def activate(self, fb: Feedback, now: float) -> None:
        """Enter MOVE P at the configured speed; the next ``command`` sends its pose."""
        self.link.mode_position(self.cfg.speed)
        self._last_sent, self._last_t = None, -1e9

    def ready(self) -> bool:
        """Always ready once activated."""
        return True

    def command(self, pose: np.ndarray, q: np.ndarray, fb: Feedback | None, now: float) -> np.ndarray | None:
        """Send ``pose`` (4x4, arm base) unless it was sent within ``keepalive_s``; the pose sent, or None."""
        # the pose's bytes as the key, cheaper than comparing and copying 4x4 arrays in the live loop;
        # equal bytes are equal values (a -0.0 for a 0.0 only sends again)
        key = pose.tobytes()
        if key == self._last_sent and now - self._last_t < self.cfg.keepalive_s:
            return None
        _, sent = self.link.position_command(self.cfg.speed, pose)
        self._last_sent, self._last_t = key, now
        return sent

    def deactivate(self, fb: Feedback | None) -> None:
        """Forget the last pose sent (the next activation sends afresh)."""
        self._last_sent = None


class ImpedanceBackend:
    """Joint impedance over JointMitCtrl from the host's IK solution, in the firmware's MIT dialect (module doc)."""

    name = "impedance"
    uses_feedback = True

    def __init__(self, cfg: ArmConfig, link: PiperLink):
        self.cfg, self.link = cfg, link
        self.kp, self.kd, self.t_ff = (np.array(v, dtype=float) for v in (cfg.kp, cfg.kd, cfg.t_ff))
        self.q_min, self.q_max = np.array(cfg.joint_min), np.array(cfg.joint_max)
        self.gravity: np.ndarray = np.zeros(6)
        self.q_cmd: np.ndarray = np.zeros(6)
        self.v_cmd = np.zeros(6)
        self._phase = "idle"  # idle -> sampling -> mit
        self._samples: list[np.ndarray] = []
        self._last_effort_stamp = 0.0
        self._t_phase = 0.0
        self._last_t = -1e9
        self.dialect: MitDialect | None = None  # set by configure() before anything is sent

    def configure(self, dialect: MitDialect) -> None:
        """Take the firmware's MIT dialect (``PiperLink.dialect`` once it read the firmware).

        Raises ``FirmwareRefused`` for a firmware this backend does not drive.
        """
        if dialect.refusal is not None:
            raise FirmwareRefused(dialect.refusal)
        self.dialect = dialect

    def ready(self) -> bool:
        """Whether the gravity sample is taken and MIT mode entered."""
        return self._phase == "mit"

    def activate(self, fb: Feedback, now: float) -> None:
        """Hold the measured joints in joint-position mode and sample the holding torques."""
        if self.dialect is None:
            raise FirmwareRefused("impedance backend: not configured with the arm's firmware (configure())")
        self.q_cmd = fb.joints.copy()
        self._samples, self._last_effort_stamp = [], fb.effort_stamp
        self._phase, self._t_phase = "sampling", now
        self.link.mode_joint(self.cfg.speed)
        self.link.joint_ctrl(self.q_cmd)

    def _enter_mit(self, now: float) -> None:
        if self.cfg.gravity_ff and self._samples:
            g = np.mean(self._samples, axis=0)
            self.gravity = np.clip(g, -self.cfg.gravity_ff_max, self.cfg.gravity_ff_max)
        else:
            self.gravity = np.zeros(6)
        self._phase, self._t_phase = "mit", now
        self.v_cmd = np.zeros(6)
        self.link.mode_mit(self.cfg.speed)

    def gain_scale(self, now: float) -> float:
        """The gains' ramp factor, 0 to 1 over ``gain_ramp_s`` after entering MIT mode (0 before)."""
        return min(1.0, max(0.0, (now - self._t_phase) / self.cfg.gain_ramp_s)) if self._phase == "mit" else 0.0

    def command(self, pose: np.ndarray, q: np.ndarray, fb: Feedback | None, now: float) -> np.ndarray | None:
        """Step the joint reference toward ``q`` and send it; the pose of the references sent, or None."""
        assert fb is not None  # uses_feedback: the controller passes every tick's snapshot
        if self._phase == "sampling":
            if fb.effort_stamp != self._last_effort_stamp:
                self._samples.append(fb.effort.copy())
                self._last_effort_stamp = fb.effort_stamp
            if now - self._t_phase < self.cfg.gravity_sample_s:
                if now - self._last_t >= self.cfg.keepalive_s:
                    self.link.mode_joint(self.cfg.speed)
                    self.link.joint_ctrl(self.q_cmd)
                    self._last_t = now
                return None
            self._enter_mit(now)
        if self._phase == "mit" and self.cfg.gravity_ff and self.cfg.gravity_adapt_s > 0:
            self._adapt_gravity(fb)
        step = np.clip(q - self.q_cmd, -self.cfg.max_joint_step, self.cfg.max_joint_step)
        s = self.gain_scale(now)
        if not np.any(step) and s >= 1.0 and now - self._last_t < self.cfg.keepalive_s:
            return None
        self.q_cmd = self.q_cmd + step
        dt = now - self._last_t
        if self.cfg.velocity_ff_tau > 0 and 0.0 < dt < 0.1:
            self.v_cmd += (step / dt - self.v_cmd) * min(1.0, dt / self.cfg.velocity_ff_tau)
        else:
            self.v_cmd = np.zeros(6)
        self.link.mode_mit(self.cfg.speed)
        assert self.dialect is not None  # activate() checked it
        # the torque field as this firmware reads it: it multiplies joints 1-3 by 4 on S-V1.7-3..1.8-2
        torque = np.clip((self.t_ff + self.gravity) / np.array(self.dialect.torque_gain), *self.dialect.t_range)
        sent = np.array(
            [
                self.link.mit(i + 1, self.q_cmd[i], self.v_cmd[i], self.kp[i] * s, self.kd[i] * s, torque[i])
                for i in range(6)
            ]
        )
        self._last_t = now
        return kin.fk(sent)  # the pose of the 16-bit joint references actually on the wire

    def _adapt_gravity(self, fb: Feedback) -> None:
        """Holding torque = measured motor torque while still; follow it slowly (integral-like action)."""
        if fb.effort_stamp == self._last_effort_stamp:
            return
        dt = fb.effort_stamp - self._last_effort_stamp
        self._last_effort_stamp = fb.effort_stamp
        if not 0.0 < dt < 0.1 or self.gain_scale(time.monotonic()) < 1.0:
            return
        # only joints that are nearly still and off their limits: a joint resting on a stop carries
        # gravity in the stop, not in the motor
        still = np.abs(fb.velocity) < 0.5
        free = (fb.joints > self.q_min + 0.05) & (fb.joints < self.q_max - 0.05)
        a = dt / self.cfg.gravity_adapt_s
        g = self.gravity + a * (fb.effort - self.t_ff - self.gravity)
        self.gravity = np.where(
            still & free, np.clip(g, -self.cfg.gravity_ff_max, self.cfg.gravity_ff_max), self.gravity
        )

    def deactivate(self, fb: Feedback | None) -> None:
        """Clean return to a joint-position hold at the measured joints."""
        if self._phase != "idle" and fb is not None:
            self.link.mode_joint(self.cfg.speed)
            self.link.joint_ctrl(fb.joints)
        self._phase = "idle"


def make_backend(cfg: ArmConfig, link: PiperLink) -> PositionBackend | ImpedanceBackend:
    """The backend ``cfg.backend`` names, on ``link``."""
    return PositionBackend(cfg, link) if cfg.backend == "position" else ImpedanceBackend(cfg, link)

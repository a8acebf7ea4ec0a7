"""The arm control loop (no ROS): targets in, validated goals to a backend at the control rate.

Safety rules, in the order the tick applies them:
1. CAN silence: no joint feedback for ``can_silence_s`` -> send nothing, state "can_silent"; when
   feedback returns the backend re-enters from the measured pose and a new target is required.
2. Disabled -> send nothing.
3. Goal = go-home trajectory if one runs; else the latest accepted target while it is fresh; else
   hold (the last pose actually commanded). A target older than ``stale_target_s`` counts one
   stale event and is dropped.
Targets are validated on arrival (``set_target``): non-finite, non-unit quaternion, outside the
workspace box, or without a joint-limited IK solution -> refused and counted by reason; one past a
joint limit becomes the nearest pose the limited joints reach (``limits.TargetLimits``).

``ArmController(cfg, link)``: ``start()``, ``stop()``, ``set_target(pos, quat_xyzw) -> bool``,
``set_gripper(width) -> bool``, ``enable()``, ``disable()``, ``go_home()``, ``feedback()``,
``status()``; ``on_command(stamp_s, pose4x4 | None, gripper_m | None)`` is called from the control
thread with exactly what was sent.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kinematics as kin
from .backends import ArmConfig, ImpedanceBackend, make_backend
from .limits import Rejection, TargetLimits
from .link import SDK_VERSION, Feedback, PiperLink


@dataclass
class _Target:
    pose: np.ndarray
    q: np.ndarray
    received: float  # monotonic


class ArmController:
    """The arm's control loop on a thread of its own, with the safety rules of the module docstring.

    Inputs (``set_target``, ``set_gripper``, ``enable``, ...) may come from any thread; one lock guards the
    state the loop reads.
    """

    def __init__(
        self,
        cfg: ArmConfig,
        link: PiperLink,
        on_command: Callable[[float, np.ndarray | None, float | None], None] | None = None,
        take_inputs: Callable[[], object] | None = None,
        wait_inputs: Callable[[float], bool] | None = None,
        interrupt: Callable[[], None] | None = None,
    ):
        """Build the controller on ``link``; ``cfg`` is validated here.

        ``take_inputs``: called at the start of every tick on the control thread, outside the lock (the
        node's polled target subscriptions: they call ``set_target``/``set_gripper``). ``wait_inputs(s)``:
        block until inputs are waiting (True) or ``s`` passed; with it the position backend's loop runs on
        its targets (``_run_on_inputs``); ``interrupt`` ends such a wait (``stop``).
        """
        cfg.validate()
        self.take_inputs, self.wait_inputs, self.interrupt = take_inputs, wait_inputs, interrupt
        self.cfg, self.link = cfg, link
        self.backend = make_backend(cfg, link)
        self.limits = TargetLimits(
            np.array(cfg.joint_min),
            np.array(cfg.joint_max),
            *cfg.accept_box,
            slide_pos_tol=cfg.limit_slide_m,
            slide_rot_tol=cfg.limit_slide_rad,
        )
        self.on_command = on_command
        self._lock = threading.Lock()
        self._target: _Target | None = None
        self._gripper_target: float | None = None
        self._gripper_sent: tuple[float, float] | None = None  # (width, monotonic)
        self._hold: tuple[np.ndarray, np.ndarray] | None = None  # last commanded (pose, q)
        self._home: tuple[np.ndarray, np.ndarray, float, float] | None = None  # q0, q1, t0, duration
        self._active = False
        self._enabled = False
        self.state = "starting"
        self.firmware: str | None = None
        self.refused: Counter[str] = Counter()
        self.last_refusal = ""
        self.accepted = 0
        self.stale_events = 0
        self.silence_events = 0
        self.sent_commands = 0
        self.overruns = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------ lifecycle
    def start(self, enable: bool = True, feedback_timeout: float = 3.0) -> None:
        """Read the firmware version, wait for feedback, enable (optional) and hold the current pose.

        Raises ``FirmwareRefused`` (before enabling) if the impedance backend does not drive this firmware.
        """
        self.firmware = self.link.firmware()
        if isinstance(self.backend, ImpedanceBackend):
            self.backend.configure(self.link.dialect)
        deadline = time.monotonic() + feedback_timeout
        while time.monotonic() < deadline and time.time() - self.link.feedback().stamp > self.cfg.can_silence_s:
            time.sleep(0.02)
        if enable:
            self.enable()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="arm-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop; the backend returns to a position hold (the arm stays enabled)."""
        self._stop.set()
        if self.interrupt is not None:
            self.interrupt()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            if self._active:
                self.backend.deactivate(self.link.feedback())  # hold where the arm is now
                self._active = False

    # ------------------------------------------------------------ inputs
    def set_target(self, pos: Any, quat_xyzw: Any) -> bool:
        """Validate a flange target (m, quaternion xyzw, arm base) and make it the goal; False if refused."""
        with self._lock:
            if not self._enabled:
                return self._refuse(Rejection("disabled", "arm disabled"))
            if self._home is not None:
                return self._refuse(Rejection("homing", "go_home in progress"))
            seed = self._target.q if self._target is not None else self._hold[1] if self._hold is not None else None
            now = time.monotonic()
        if seed is None:  # no target or hold yet: from the measured joints
            fb = self.feedback()
            seed = fb.joints if fb is not None else np.zeros(6)
        res = self.limits.check(
            np.asarray(pos, dtype=float), np.asarray(quat_xyzw, dtype=float), seed, self._fallback_seeds()
        )
        with self._lock:
            if isinstance(res, Rejection):
                return self._refuse(res)
            self._target = _Target(res[0], res[1], now)
            self.accepted += 1
            return True

    def _fallback_seeds(self) -> Iterator[np.ndarray]:
        """IK seeds when the last solution fails, built only then: the measured joints, home."""
        fb = self.feedback()
        if fb is not None:
            yield fb.joints
        yield np.array(self.cfg.home_joints)

    def set_gripper(self, width: float) -> bool:
        """Set the gripper's target width (m, clipped to [0, gripper_max]); False when out of range."""
        w, top = float(width), self.cfg.gripper_max
        with self._lock:  # scalar math: numpy's isfinite / clip on one float cost more, once per teleop tick
            if not math.isfinite(w) or w < -1e-4 or w > top + 1e-4:
                return self._refuse(Rejection("gripper_out_of_range", f"width={w}"))
            self._gripper_target = min(max(w, 0.0), top)
            return True

    def refuse(self, reason: str, detail: str) -> bool:
        """Count a target the caller refused before it got here (e.g. a wrong frame_id)."""
        with self._lock:
            return self._refuse(Rejection(reason, detail))

    def _refuse(self, r: Rejection) -> bool:
        self.refused[r.reason] += 1
        self.last_refusal = f"{r.reason}: {r.detail}"
        return False

    def enable(self, timeout: float = 2.0) -> bool:
        """EnableArm, re-sent every 0.2 s until the drivers confirm it (as the SDK demos loop); True if confirmed."""
        deadline = time.monotonic() + timeout
        confirmed = False
        while not confirmed and time.monotonic() < deadline:
            sent = time.time()
            self.link.enable()
            end = min(deadline, time.monotonic() + 0.2)
            while not (confirmed := self.link.enabled(since=sent)) and time.monotonic() < end:
                time.sleep(0.01)
        with self._lock:
            self._enabled = True
            self._target = None
        return confirmed

    def disable(self) -> None:
        """Leave control (the backend's clean hold), drop target and homing, then disable the drivers."""
        with self._lock:
            if self._active:
                self.backend.deactivate(self.link.feedback())
                self._active = False
            self._enabled = False
            self._target, self._home = None, None
        self.link.disable()

    def go_home(self) -> bool:
        """Start a joint trajectory to ``home_joints`` at ``home_speed``; False when disabled or without feedback."""
        fb = self.feedback()
        with self._lock:
            if not self._enabled or fb is None:
                return False
            q0 = self._hold[1] if self._hold is not None else fb.joints
            q1 = np.clip(np.array(self.cfg.home_joints), self.limits.q_min, self.limits.q_max)
            duration = max(float(np.max(np.abs(q1 - q0))) / self.cfg.home_speed, 0.1)
            self._home = (q0.copy(), q1, time.monotonic(), duration)
            self._target = None
            return True

    # ------------------------------------------------------------ outputs
    def feedback(self) -> Feedback | None:
        """The newest feedback snapshot (``PiperLink.feedback``); None until joint feedback arrived."""
        fb = self.link.feedback()
        return fb if fb.stamp > 0 else None

    def homing(self) -> bool:
        """Whether a go-home trajectory is running."""
        return self._home is not None

    def status(self) -> dict[str, Any]:
        """The controller's counters, state and link health, for the node's ``~/status``."""
        fb = self.feedback()
        age = time.time() - fb.stamp if fb else None
        hold = self._hold
        err = float(np.linalg.norm(hold[0][:3, 3] - fb.pose[:3, 3])) if (hold is not None and fb) else None
        return {
            "state": self.state,
            "backend": self.backend.name,
            "enabled": self._enabled,
            "firmware": self.firmware,
            "mit_dialect": self.link.dialect.describe(),
            "sdk_version": SDK_VERSION,
            "can_channel": self.link.channel,
            "targets_accepted": self.accepted,
            "targets_refused": dict(self.refused),
            "targets_at_joint_limit": self.limits.at_joint_limit,
            "last_refusal": self.last_refusal,
            "stale_events": self.stale_events,
            "can_silence_events": self.silence_events,
            "commands_sent": self.sent_commands,
            "loop_overruns": self.overruns,
            "feedback_age_s": age,
            "tracking_error_m": err,
            "arm_status": fb.arm_status if fb else None,
            "err_code": fb.err_code if fb else None,
            "gravity_ff": getattr(self.backend, "gravity", np.zeros(6)).tolist(),
            "feedback_listener_errors": self.link.listener_errors,
            "can_send_errors": self.link.send_errors,
        }

    # ------------------------------------------------------------ loop
    def _run(self) -> None:
        if self.wait_inputs is not None and self.backend.name == "position":
            self._run_on_inputs(self.wait_inputs)
        else:
            self._run_fixed_rate()

    def _tick_safely(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # keep the loop alive; report in status  # noqa: BLE001
            self.state = f"error: {exc!r}"

    def _run_on_inputs(self, wait: Callable[[float], bool]) -> None:
        """Position control: a target goes out as soon as it arrives; without one, ticks at ``hold_rate_hz``.

        The firmware interpolates between end-pose targets, so nothing is gained by a fixed-rate loop, which
        would idle between targets and hold each up to a period. At most ``control_rate_hz`` ticks a second
        (a burst is taken together); the hold ticks send keepalives, holds, homing steps and check CAN
        silence.
        """
        hold, gap = 1.0 / self.cfg.hold_rate_hz, 1.0 / self.cfg.control_rate_hz
        clock = time.monotonic
        last = clock() - hold
        while not self._stop.is_set():
            left = last + hold - clock()
            if left > 0:
                wait(left)
                if self._stop.is_set():
                    break
            early = last + gap - clock()
            if early > 0:
                time.sleep(early)
            last = clock()
            self._tick_safely()

    def _run_fixed_rate(self) -> None:
        period = 1.0 / self.cfg.control_rate_hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._tick_safely()
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -period:
                self.overruns += 1
                next_t = time.monotonic()
            elif delay > 0:
                # time.sleep, not Event.wait: at most one period (the loop then sees the stop flag), and
                # without the Python-level Condition/lock per tick that Event.wait costs 200 times a second
                time.sleep(delay)

    def tick(self) -> None:
        """One control step.

        The feedback snapshot is built only when the step reads it (entering control, the impedance
        backend): a position tick needs only the newest joint frame's stamp.
        """
        if self.take_inputs is not None:
            self.take_inputs()
        stamp = self.link.feedback_stamp()
        now = time.monotonic()
        with self._lock:
            if time.time() - stamp > self.cfg.can_silence_s:
                if self.state != "can_silent":
                    self.silence_events += 1
                self.state = "can_silent"
                self._active = False  # re-enter from the measured pose when feedback returns
                self._target, self._home = None, None
                return
            if not self._enabled:
                self.state = "disabled"
                return
            fb = self.link.feedback() if self.backend.uses_feedback or not self._active else None
            if not self._active:
                assert fb is not None
                self.backend.activate(fb, now)
                self._active = True
                self._hold = (fb.pose.copy(), fb.joints.copy())
            goal = self._goal(now)
            sent = self.backend.command(goal[0], goal[1], fb, now)
            if sent is not None:
                held = self.backend.q_cmd if isinstance(self.backend, ImpedanceBackend) else goal[1]
                self._hold = (sent, held.copy())
                self.sent_commands += 1
            gripper_sent = self._gripper_tick(now)
        if (sent is not None or gripper_sent is not None) and self.on_command is not None:
            self.on_command(time.time(), sent, gripper_sent)

    def _goal(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        if self._home is not None:
            q0, q1, t0, dur = self._home
            a = min(1.0, (now - t0) / dur)
            q = q0 + (q1 - q0) * a
            if a >= 1.0:
                self._home = None
            self.state = "homing"
            return kin.fk(q), q
        t = self._target
        if t is not None and now - t.received > self.cfg.stale_target_s:
            self.stale_events += 1
            self._target = t = None
        if t is not None:
            self.state = "tracking"
            return t.pose, t.q
        self.state = "holding" if self.backend.ready() or self.backend.name == "position" else "entering"
        assert self._hold is not None
        return self._hold

    def _gripper_tick(self, now: float) -> float | None:
        w = self._gripper_target
        if w is None:
            return None
        last = self._gripper_sent
        if last is not None and last[0] == w and now - last[1] < self.cfg.keepalive_s * 5:
            return None
        sent = self.link.gripper(w, self.cfg.gripper_effort)
        self._gripper_sent = (w, now)
        return sent

"""Safety limits on the commanded pose: workspace box, tether to the measured pose, per-tick speed caps.

Applied in this order each tick: tether (pull the target to within ``tether_m`` of where the arm
really is), workspace clamp (project into the box), then the speed caps relative to the previously
published target. Because the box is convex and the previous target was inside it, the capped
step stays inside the box, so the two hard guarantees (inside the box, step within the caps) hold
for every published target; ``check`` asserts exactly those.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .rotations import Quat, angle_between, angle_between_t, as_floats, is_finite, normalize, slerp, slerp_t, unit_t


@dataclass
class LimitsConfig:
    """Teleop's safety limits: speeds, the clamp box and the tether to the measured pose."""

    max_linear_speed: float = 0.8  # m/s
    max_angular_speed: float = 2.5  # rad/s
    # The clamp box: teleop moves a target that leaves it back onto its surface (ROS parameters
    # ``limits.workspace_min/max``). Not the arm's acceptance box (piper_arm's ``workspace_min/max``,
    # ``ArmConfig.accept_box``), which refuses a target outside it and is wider, so a clamped target is accepted.
    workspace_min: list[float] = field(default_factory=lambda: [0.05, -0.35, 0.03])  # m, arm base
    workspace_max: list[float] = field(default_factory=lambda: [0.55, 0.35, 0.50])
    tether_m: float = 0.12  # max distance target <-> measured EEF; <= 0 disables

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in ("max_linear_speed", "max_angular_speed"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        if len(self.workspace_min) != 3 or len(self.workspace_max) != 3:
            raise ValueError("workspace_min / workspace_max need 3 values (x, y, z)")
        if not is_finite(self.workspace_min, self.workspace_max) or any(
            lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max)
        ):
            raise ValueError(f"workspace box is empty: {self.workspace_min} .. {self.workspace_max}")
        if not math.isfinite(self.tether_m):
            raise ValueError(f"tether_m must be finite, got {self.tether_m}")

    @property
    def clamp_box(self) -> tuple[list[float], list[float]]:
        """(low, high) corners of the box targets are clamped into (m, arm base)."""
        return list(self.workspace_min), list(self.workspace_max)


class LimitViolation(AssertionError):
    """A target about to be published breaks a hard limit (a bug: the node refuses to publish it)."""


LIMIT_NAMES = ("tether", "workspace", "linear_speed", "angular_speed")


class Limits:
    """The safety limits applied to each target before it is handed out."""

    EPS = 1e-9

    def __init__(self, cfg: LimitsConfig):
        cfg.validate()
        self.cfg = cfg
        self._lo, self._hi = cfg.clamp_box
        self.clamp_lo, self.clamp_hi = np.array(self._lo, dtype=float), np.array(self._hi, dtype=float)
        self.acted: tuple[str, ...] = ()  # LIMIT_NAMES that changed the target at the last ``apply``

    def inside(self, p: np.ndarray | Sequence[float], margin: float = 0.0) -> bool:
        """Whether ``p`` is inside the clamp box grown by ``margin``."""
        return all(lo - margin <= v <= hi + margin for v, lo, hi in zip(as_floats(p), self._lo, self._hi))

    def clamp_workspace(self, p: np.ndarray) -> np.ndarray:
        """``p`` moved onto the clamp box."""
        return np.array([min(max(v, lo), hi) for v, lo, hi in zip(as_floats(p), self._lo, self._hi)])

    def tether(self, p: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """``p`` pulled to within ``tether_m`` of the measured position (unchanged when off)."""
        if self.cfg.tether_m <= 0:
            return np.asarray(p, dtype=float)
        pl, ml = as_floats(p), as_floats(measured)
        n = math.dist(pl, ml)
        if n <= self.cfg.tether_m:
            return np.asarray(p, dtype=float)
        k = self.cfg.tether_m / n
        return np.array([m + (v - m) * k for v, m in zip(pl, ml)])

    def cap_step(
        self,
        prev_p: np.ndarray,
        prev_q: np.ndarray,
        p: np.ndarray,
        q: np.ndarray,
        dt: float,
        acted: list[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(p, q) with the step from (prev_p, prev_q) capped at the speed limits over ``dt``; names what acted."""
        max_lin = self.cfg.max_linear_speed * dt
        pl, prev = as_floats(p), as_floats(prev_p)
        n = math.dist(pl, prev)
        if n > max_lin:
            p = np.array([b + (v - b) * (max_lin / n) for v, b in zip(pl, prev)])
            if acted is not None:
                acted.append("linear_speed")
        max_ang = self.cfg.max_angular_speed * dt
        ang = angle_between(prev_q, q)
        if ang > max_ang:
            q = slerp(prev_q, q, max_ang / ang)
            if acted is not None:
                acted.append("angular_speed")
        return p, normalize(q)

    def apply(
        self, p: np.ndarray, q: np.ndarray, prev_p: np.ndarray, prev_q: np.ndarray, measured_p: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The target (p, q) after tether, clamp box and speed caps; ``self.acted`` names the limits that shaped it."""
        acted: list[str] = []
        tethered = self.tether(p, measured_p)
        if tethered.tolist() != as_floats(p):
            acted.append("tether")
        clamped = self.clamp_workspace(tethered)
        if clamped.tolist() != tethered.tolist():
            acted.append("workspace")
        out = self.cap_step(prev_p, prev_q, clamped, q, dt, acted)
        self.acted = tuple(acted)
        return out

    def apply_t(
        self,
        p: list[float],
        q: Sequence[float],
        prev_p: Sequence[float],
        prev_q: Sequence[float],
        measured_p: Sequence[float],
        dt: float,
    ) -> tuple[list[float], Quat]:
        """``apply`` on float sequences (the control tick's path): the same steps, the same ``acted``."""
        acted: list[str] = []
        tethered = p
        tm = self.cfg.tether_m
        if tm > 0:
            n = math.dist(p, measured_p)
            if n > tm:
                k = tm / n
                tethered = [m + (v - m) * k for v, m in zip(p, measured_p)]
                if tethered != p:
                    acted.append("tether")
        clamped = [min(max(v, lo), hi) for v, lo, hi in zip(tethered, self._lo, self._hi)]
        if clamped != tethered:
            acted.append("workspace")
        max_lin = self.cfg.max_linear_speed * dt
        n = math.dist(clamped, prev_p)
        if n > max_lin:
            clamped = [b + (v - b) * (max_lin / n) for v, b in zip(clamped, prev_p)]
            acted.append("linear_speed")
        max_ang = self.cfg.max_angular_speed * dt
        ang = angle_between_t(prev_q, q)
        if ang > max_ang:
            q = slerp_t(prev_q, q, max_ang / ang)
            acted.append("angular_speed")
        self.acted = tuple(acted)
        return clamped, unit_t(q)

    def check_t(
        self, p: Sequence[float], q: Sequence[float], prev_p: Sequence[float], prev_q: Sequence[float], dt: float
    ) -> None:
        """``check`` on float sequences (the control tick's path; ``check`` converts arrays to these)."""
        if not all(math.isfinite(v) for v in p) or not all(math.isfinite(v) for v in q):
            raise LimitViolation(f"non-finite target {np.array(p)} {np.array(q)}")
        x, y, z, w = q
        if abs(math.sqrt(x * x + y * y + z * z + w * w) - 1.0) > 1e-6:
            raise LimitViolation(f"non-unit quaternion {np.array(q)}")
        m = 1e-9
        if not all(lo - m <= v <= hi + m for v, lo, hi in zip(p, self._lo, self._hi)):
            raise LimitViolation(f"target {np.array(p)} outside the clamp box {self.clamp_lo}..{self.clamp_hi}")
        step = math.dist(p, prev_p)
        if step > self.cfg.max_linear_speed * dt * (1 + 1e-6) + self.EPS:
            raise LimitViolation(f"linear step {step:.6f} m exceeds cap over dt={dt}")
        ang = angle_between_t(prev_q, q)
        if ang > self.cfg.max_angular_speed * dt * (1 + 1e-6) + 1e-7:
            raise LimitViolation(f"angular step {ang:.6f} rad exceeds cap over dt={dt}")

    def check(self, p: np.ndarray, q: np.ndarray, prev_p: np.ndarray, prev_q: np.ndarray, dt: float) -> None:
        """Raise LimitViolation unless (p, q) is finite, unit, in the box and within the caps of prev."""
        self.check_t(as_floats(p), as_floats(q), as_floats(prev_p), as_floats(prev_q), dt)

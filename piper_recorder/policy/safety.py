"""Every policy target through teleop's envelope (teleop/limits.py), with hit counts by reason.

The steps are teleop's: tether to the measured pose, workspace box, linear and angular speed caps
relative to the previous target, then the hard ``Limits.check``. What differs is only what a policy
adds: its rows may be non-finite or carry a non-unit quaternion (rejected, the arm holds), and the
gripper width is clamped into ``[0, gripper_max_width]``. Quaternions are ROS order (x, y, z, w)
here, as published; policy rows are wxyz and converted once in ``from_row``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from piper_recorder.teleop.limits import Limits, LimitsConfig, LimitViolation
from piper_recorder.teleop.rotations import angle_between, normalize

F64 = npt.NDArray[np.float64]
QUAT_NORM_TOL = 0.1  # the same tolerance teleop applies to headset quaternions


@dataclass(frozen=True)
class Target:
    """One arm target: position (m, arm base), quaternion (x, y, z, w) and gripper width (m)."""

    p: F64  # m, arm base
    q: F64  # x, y, z, w
    gripper: float  # m

    def finite(self) -> bool:
        """Whether every value is finite."""
        return bool(np.all(np.isfinite(self.p)) and np.all(np.isfinite(self.q)) and np.isfinite(self.gripper))


@dataclass
class Envelope:
    """Teleop's envelope around policy targets, counting hits by reason."""

    limits_cfg: LimitsConfig
    gripper_max: float
    period_s: float
    hits: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.limits = Limits(self.limits_cfg)
        self._prev: Target | None = None

    @property
    def prev(self) -> Target | None:
        """The previous target (None before the first)."""
        return self._prev

    def reset(self, p: F64, q_xyzw: F64, gripper: float) -> None:
        """Anchor on the measured pose (start, resume): the first target cannot jump."""
        p = self.limits.clamp_workspace(np.asarray(p, dtype=np.float64))
        g = float(np.clip(gripper, 0.0, self.gripper_max)) if np.isfinite(gripper) else 0.0
        self._prev = Target(p, normalize(np.asarray(q_xyzw, dtype=np.float64)), g)

    def _hit(self, reason: str) -> None:
        self.hits[reason] = self.hits.get(reason, 0) + 1

    def hold(self) -> Target | None:
        """The previous target again (inside the envelope by construction)."""
        return self._prev

    def apply(self, row: F64, measured_p: F64) -> Target | None:
        """The envelope's target for a policy row (x y z qw qx qy qz gripper), or None: the caller holds.

        None when the row is unusable: non-finite, a non-unit quaternion, or it would break a hard limit.
        """
        prev = self._prev
        if prev is None:
            raise RuntimeError("Envelope.apply before reset")
        row = np.asarray(row, dtype=np.float64)
        if row.shape != (8,) or not np.all(np.isfinite(row)) or not np.all(np.isfinite(measured_p)):
            self._hit("non_finite")
            return None
        q = np.array([row[4], row[5], row[6], row[3]])
        if abs(float(np.linalg.norm(q)) - 1.0) > QUAT_NORM_TOL:
            self._hit("bad_quaternion")
            return None
        q = normalize(q)
        lim, dt = self.limits, self.period_s
        p = row[:3]
        pt = lim.tether(p, np.asarray(measured_p, dtype=np.float64))
        if not np.allclose(pt, p, atol=1e-12, rtol=0):
            self._hit("tether")
        pw = lim.clamp_workspace(pt)
        if not np.allclose(pw, pt, atol=1e-12, rtol=0):
            self._hit("workspace")
        if float(np.linalg.norm(pw - prev.p)) > lim.cfg.max_linear_speed * dt:
            self._hit("linear_speed")
        if angle_between(prev.q, q) > lim.cfg.max_angular_speed * dt:
            self._hit("angular_speed")
        pc, qc = lim.cap_step(prev.p, prev.q, pw, q, dt)
        try:
            lim.check(pc, qc, prev.p, prev.q, dt)
        except LimitViolation:
            self._hit("violation")
            return None
        g = float(row[7])
        gc = min(max(g, 0.0), self.gripper_max)
        if gc != g:
            self._hit("gripper")
        out = Target(pc, qc, gc)
        self._prev = out
        return out

"""Every policy target through teleop's envelope (teleop/limits.py), with hit counts by reason.

The steps are teleop's: tether to the measured pose, workspace box, linear and angular speed caps
relative to the previous target, then the hard ``Limits.check``. What differs is only what a policy
adds: its rows may be non-finite or carry a non-unit quaternion (rejected, the arm holds), and the
gripper width is clamped into ``[0, gripper_max_width]``. Quaternions are ROS order (x, y, z, w)
here, as published; policy rows are wxyz and converted here.

Several arms (``ArmsEnvelope``): each arm's part of the row (``ActionLayout``) goes through its own
``Envelope``, with its own previous target, its own measured pose for the tether and its own hit counts;
every arm takes the one ``limits`` config, each in its own base frame, as teleop applies it to two arms. A
row is one decision of the policy for every arm, so when one arm's part is unusable (non-finite, a
non-unit quaternion, past a hard limit) that arm holds its previous target and so does every other arm,
for that tick (counted as ``other_arm`` on them); the next usable row moves them all again. Holding only
the refused arm would let the other go on alone, and the two-handed tasks a bimanual policy learns
(carrying one thing with both grippers, handing it over, holding while the other hand works) do not
survive one hand stopping while the other moves away. What only clamps (tether, workspace, speed caps,
gripper range) clamps that arm alone and never stops the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from piper_recorder.lerobot.format.action_layout import ActionLayout
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
        out = self.propose(row, measured_p)
        if out is not None:
            self.commit(out)
        return out

    def commit(self, target: Target) -> None:
        """Take ``target`` (from ``propose``) as the previous target: the next one is capped from it."""
        self._prev = target

    def propose(self, row: F64, measured_p: F64) -> Target | None:
        """What ``apply`` would return, counting the hits, without taking it as the previous target."""
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
        return Target(pc, qc, gc)


Arm = str | None  # an arm's name, None for one arm


class ArmsEnvelope:
    """Each arm's part of a policy row through its own ``Envelope`` (the module's rules for several arms).

    One arm: exactly ``Envelope``, and ``hits`` its counts. Several: ``hits`` maps each arm to its counts.
    """

    def __init__(self, layout: ActionLayout, limits_cfg: LimitsConfig, gripper_max: float, period_s: float):
        self.layout = layout
        self.envelopes = {a: Envelope(limits_cfg, gripper_max, period_s) for a in layout.keys}

    @property
    def hits(self) -> dict[str, int] | dict[str, dict[str, int]]:
        """Hits by reason: one arm's, or each arm's under its name."""
        if not self.layout.arm_names:
            return dict(self.envelopes[None].hits)
        return {str(a): dict(e.hits) for a, e in self.envelopes.items()}

    def reset(self, measured: Mapping[Arm, tuple[F64, F64, float]]) -> None:
        """Anchor each arm on its measured (position, quaternion xyzw, gripper) at a start or resume."""
        for a, env in self.envelopes.items():
            p, q, g = measured[a]
            env.reset(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), float(g))

    def hold(self) -> dict[Arm, Target] | None:
        """Every arm's previous target (None before a reset)."""
        prev = {a: env.prev for a, env in self.envelopes.items()}
        return None if any(t is None for t in prev.values()) else {a: t for a, t in prev.items() if t is not None}

    def apply(self, row: F64, measured_p: Mapping[Arm, F64]) -> dict[Arm, Target] | None:
        """Each arm's target for a policy row, or None when any arm's part is unusable: every arm holds."""
        row = np.asarray(row, dtype=np.float64).reshape(-1)
        if row.shape != (self.layout.dim,):
            for env in self.envelopes.values():
                env._hit("non_finite")
            return None
        proposed = {
            s.arm: self.envelopes[s.arm].propose(s.part(row), np.asarray(measured_p[s.arm], dtype=np.float64))
            for s in self.layout.arms
        }
        if any(t is None for t in proposed.values()):
            for a, t in proposed.items():
                if t is not None:
                    self.envelopes[a]._hit("other_arm")
            return None
        out = {a: t for a, t in proposed.items() if t is not None}
        for a, t in out.items():
            self.envelopes[a].commit(t)
        return out

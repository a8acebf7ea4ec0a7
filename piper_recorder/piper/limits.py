"""Target validation: finite numbers, unit quaternion, the acceptance box, joint-limited reachability.

A target past a joint limit is not refused: it becomes the nearest pose the limited joints reach (the
damped iteration from the last solution with that joint held at its limit, ``kinematics.solve_ik``'s
``hold_limits``), so the arm slides along the limit as the operator's hand goes past it. A refusal there
would stop the arm until the target came back in reach, and then jump it to wherever the target had gone
meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from . import kinematics as kin


@dataclass
class Rejection:
    """Why a target was refused: a reason code and a detail for the log."""

    reason: str  # "non_finite" | "bad_quaternion" | "out_of_workspace" | "unreachable"
    detail: str


@dataclass
class TargetLimits:
    """What piper_arm accepts of a target: a flange position in the acceptance box and a joint-limited IK solution.

    The box is ``accept_min`` .. ``accept_max`` (m, arm base; ``ArmConfig.accept_box``): refused outside,
    never clamped. The joint limits are ``q_min`` .. ``q_max`` (rad). A target whose nearest joint-limited
    solution from the seed misses it by at most ``slide_pos_tol`` / ``slide_rot_tol``, with a joint at its
    limit and no joint more than ``slide_max_jump`` from the seed, is accepted as that solution's pose
    (counted in ``at_joint_limit``); one missed by more is refused as unreachable.
    """

    q_min: np.ndarray
    q_max: np.ndarray
    accept_min: np.ndarray
    accept_max: np.ndarray
    ik_pos_tol: float = 1e-3  # the emulator's firmware IK accepts the same residuals
    ik_rot_tol: float = 1e-2
    slide_pos_tol: float = 0.1  # m; 0 with slide_rot_tol 0: refuse every target past a limit
    slide_rot_tol: float = 0.5  # rad
    slide_max_jump: float = 0.25  # rad, kinematics.ik's max_jump: a continuation of the last solution
    at_joint_limit: int = field(default=0, init=False)  # targets accepted as their joint-limited pose

    def __post_init__(self) -> None:
        self._box = (
            np.asarray(self.accept_min, dtype=float).tolist(),
            np.asarray(self.accept_max, dtype=float).tolist(),
        )
        self._q_lo = np.asarray(self.q_min, dtype=float).tolist()
        self._q_hi = np.asarray(self.q_max, dtype=float).tolist()

    def check(
        self, pos: np.ndarray, quat_xyzw: np.ndarray, q_seed: np.ndarray, fallback_seeds: Iterable[np.ndarray] = ()
    ) -> tuple[np.ndarray, np.ndarray] | Rejection:
        """Validate an absolute flange target; returns (4x4 pose, joint solution) or a Rejection.

        IK (``kin.ik``: closed form near the seed, else damped steps) starts from ``q_seed`` (the previous
        solution); only if that fails are the ``fallback_seeds`` (e.g. measured joints, home) tried before the
        target counts as unreachable, each taken from the iterable only after the solve before it failed (a
        generator builds them only then).
        """
        pos, quat = np.asarray(pos, dtype=float), np.asarray(quat_xyzw, dtype=float)
        # scalar math on the 3 + 4 numbers: numpy's per-call dispatch (norm, all, any) cost more than the
        # work, for every target at the teleop rate
        if pos.shape != (3,) or quat.shape != (4,):
            return Rejection("non_finite", f"pos={pos.tolist()} quat={quat.tolist()}")
        p, qv = pos.tolist(), quat.tolist()
        if not all(math.isfinite(v) for v in p + qv):
            return Rejection("non_finite", f"pos={p} quat={qv}")
        n = math.sqrt(qv[0] * qv[0] + qv[1] * qv[1] + qv[2] * qv[2] + qv[3] * qv[3])
        if abs(n - 1.0) > 0.05:
            return Rejection("bad_quaternion", f"|q|={n:.3f}")
        lo, hi = self._box
        if not all(a <= v <= b for v, a, b in zip(p, lo, hi)):
            return Rejection("out_of_workspace", f"pos={np.round(pos, 4).tolist()}")
        x, y, z, w = qv[0] / n, qv[1] / n, qv[2] / n, qv[3] / n
        target = kin.frame_matrix(kin.quat_rot(x, y, z, w) + (p[0], p[1], p[2]))
        slides = self.slide_pos_tol > 0.0 or self.slide_rot_tol > 0.0
        # from a seed at a limit (the last target slid) only the closed form is tried before the held solve:
        # the plain damped steps push that joint past its limit and stall
        at_limit = slides and self._at_limit(np.asarray(q_seed, dtype=float).tolist())
        res = kin.ik(target, q_seed, self.q_min, self.q_max, max_iter=0 if at_limit else 40)
        if not res.ok(self.ik_pos_tol, self.ik_rot_tol) and slides:
            held = kin.solve_ik(target, q_seed, self.q_min, self.q_max, max_iter=40, hold_limits=True)
            if held.ok(self.ik_pos_tol, self.ik_rot_tol):
                return target, held.q
            if self._slides(held, q_seed):
                self.at_joint_limit += 1
                return kin.fk(held.q), held.q
        seeds = iter(fallback_seeds)  # the next seed is built only after a failed solve
        while not res.ok(self.ik_pos_tol, self.ik_rot_tol) and (seed := next(seeds, None)) is not None:
            res = kin.ik(target, seed, self.q_min, self.q_max, max_iter=60)
        if not res.ok(self.ik_pos_tol, self.ik_rot_tol):
            return Rejection(
                "unreachable", f"IK residual {res.pos_err * 1000:.1f} mm / {np.degrees(res.rot_err):.1f} deg"
            )
        return target, res.q

    def _slides(self, res: kin.IkResult, q_seed: np.ndarray) -> bool:
        """Whether ``res`` (the solve from ``q_seed`` that missed) is the target's pose at a joint limit."""
        if res.pos_err > self.slide_pos_tol or res.rot_err > self.slide_rot_tol:
            return False
        q = res.q.tolist()
        return self._at_limit(q) and max(abs(v - s) for v, s in zip(q, np.asarray(q_seed, dtype=float).tolist())) <= (
            self.slide_max_jump
        )

    def _at_limit(self, q: list[float]) -> bool:
        """Whether a joint of ``q`` is at its limit (solve_ik clamps to the limits exactly: it equals it)."""
        return any(v in (a, b) for v, a, b in zip(q, self._q_lo, self._q_hi))

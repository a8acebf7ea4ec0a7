"""Piper forward kinematics, damped-least-squares IK and rotation conversions (numpy, no ROS).

The DH table is read from piper_sdk's own ``C_PiperForwardKinematics`` (modified/Craig DH,
``dh_is_offset=1``, the default of ``C_PiperInterface_V2`` and of current firmware), so our FK is the
SDK's FK by construction; tests check it numerically against ``CalFK``.

Euler convention of the SDK and firmware (EndPoseCtrl, end-pose feedback 0x2A2-0x2A4, ``CalFK``):
``R = Rz(rz) @ Ry(ry) @ Rx(rx)``, i.e. extrinsic XYZ (roll about base x, then pitch about base y,
then yaw about base z) == intrinsic ZYX. Units on the wire: 0.001 mm and 0.001 deg.
Everything here is SI (m, rad); quaternions are xyzw (ROS order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from piper_sdk.kinematics.piper_fk import C_PiperForwardKinematics

_SDK_FK = C_PiperForwardKinematics(dh_is_offset=0x01)
DH_ALPHA = np.array(_SDK_FK._alpha, dtype=float)
DH_A = np.array(_SDK_FK._a, dtype=float) / 1000.0  # mm -> m
DH_THETA_OFFSET = np.array(_SDK_FK._theta, dtype=float)
DH_D = np.array(_SDK_FK._d, dtype=float) / 1000.0

# piper_sdk C_PiperParamManager joint limits (rad); the firmware's own limits are the same figures.
SDK_JOINT_MIN = np.array([-2.6179, 0.0, -2.967, -1.745, -1.22, -2.09439])
SDK_JOINT_MAX = np.array([2.6179, 3.14, 0.0, 1.745, 1.22, 2.09439])


def _link(alpha: float, a: float, theta: float, d: float) -> np.ndarray:
    ca, sa, ct, st = np.cos(alpha), np.sin(alpha), np.cos(theta), np.sin(theta)
    return np.array([[ct, -st, 0.0, a],
                     [st * ca, ct * ca, -sa, -sa * d],
                     [st * sa, ct * sa, ca, ca * d],
                     [0.0, 0.0, 0.0, 1.0]])


def link_frames(q: np.ndarray) -> list[np.ndarray]:
    """Base->frame i transforms for i = 1..6 (frame 6 = flange), metres."""
    frames = []
    t = np.eye(4)
    for i in range(6):
        t = t @ _link(DH_ALPHA[i], DH_A[i], float(q[i]) + DH_THETA_OFFSET[i], DH_D[i])
        frames.append(t)
    return frames


def fk(q: np.ndarray) -> np.ndarray:
    """Flange pose as a 4x4 homogeneous transform in the arm base frame (m)."""
    return link_frames(np.asarray(q, dtype=float))[-1]


def jacobian(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(6x6 geometric Jacobian [v; w] of the flange, flange transform)."""
    frames = link_frames(np.asarray(q, dtype=float))
    p_e = frames[-1][:3, 3]
    jac = np.empty((6, 6))
    for i, f in enumerate(frames):  # modified DH: joint i turns about z of frame i
        z, p = f[:3, 2], f[:3, 3]
        jac[:3, i] = np.cross(z, p_e - p)
        jac[3:, i] = z
    return jac, frames[-1]


# ---------------------------------------------------------------- rotations
def euler_to_matrix(rx: float, ry: float, rz: float) -> np.ndarray:
    """SDK/firmware convention: R = Rz(rz) Ry(ry) Rx(rx) (radians)."""
    cx, sx, cy, sy, cz, sz = np.cos(rx), np.sin(rx), np.cos(ry), np.sin(ry), np.cos(rz), np.sin(rz)
    return np.array([[cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx],
                     [sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx],
                     [-sy, cy * sx, cy * cx]])


def matrix_to_euler(r: np.ndarray) -> np.ndarray:
    """Inverse of ``euler_to_matrix``, same branch choices as the SDK's ``CalFK`` (radians)."""
    if r[2, 0] < -1 + 1e-4:
        return np.array([np.arctan2(r[0, 1], r[1, 1]), np.pi / 2, 0.0])
    if r[2, 0] > 1 - 1e-4:
        return np.array([-np.arctan2(r[0, 1], r[1, 1]), -np.pi / 2, 0.0])
    ry = np.arctan2(-r[2, 0], np.hypot(r[0, 0], r[1, 0]))
    c = np.cos(ry)
    return np.array([np.arctan2(r[2, 1] / c, r[2, 2] / c), ry, np.arctan2(r[1, 0] / c, r[0, 0] / c)])


def quat_to_matrix(q_xyzw: np.ndarray) -> np.ndarray:
    x, y, z, w = np.asarray(q_xyzw, dtype=float) / np.linalg.norm(q_xyzw)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion xyzw with w >= 0."""
    tr = r[0, 0] + r[1, 1] + r[2, 2]
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = np.array([(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s])
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = np.array([0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s, (r[2, 1] - r[1, 2]) / s])
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = np.array([(r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s, (r[0, 2] - r[2, 0]) / s])
    else:
        s = 2.0 * np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = np.array([(r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s, (r[1, 0] - r[0, 1]) / s])
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def rotation_error(r_target: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Axis-angle vector (base frame) rotating r onto r_target."""
    re = r_target @ r.T
    cos = np.clip((np.trace(re) - 1.0) / 2.0, -1.0, 1.0)
    angle = np.arccos(cos)
    v = np.array([re[2, 1] - re[1, 2], re[0, 2] - re[2, 0], re[1, 0] - re[0, 1]])
    if angle < 1e-9:
        return 0.5 * v
    if np.pi - angle < 1e-6:  # 180 deg: axis from the symmetric part
        axis = np.sqrt(np.clip((np.diag(re) + 1.0) / 2.0, 0.0, None))
        i = int(np.argmax(axis))
        axis = (re[:, i] + np.eye(3)[:, i]) / np.sqrt(2.0 * (1.0 + re[i, i]))
        return angle * axis / np.linalg.norm(axis)
    return angle * v / (2.0 * np.sin(angle))


def pose_to_matrix(pos: np.ndarray, quat_xyzw: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    t[:3, :3] = quat_to_matrix(quat_xyzw)
    t[:3, 3] = pos
    return t


# ---------------------------------------------------------------- IK
@dataclass
class IkResult:
    q: np.ndarray
    pos_err: float  # m
    rot_err: float  # rad
    iterations: int

    def ok(self, pos_tol: float = 1e-3, rot_tol: float = 1e-2) -> bool:
        return self.pos_err <= pos_tol and self.rot_err <= rot_tol


def solve_ik(target: np.ndarray, q_seed: np.ndarray, q_min: np.ndarray = SDK_JOINT_MIN,
             q_max: np.ndarray = SDK_JOINT_MAX, max_iter: int = 50, damping: float = 0.02,
             max_step: float = 0.25, pos_tol: float = 2e-5, rot_tol: float = 2e-4) -> IkResult:
    """Damped least squares on the flange pose, warm-started from ``q_seed``, clamped to limits.

    dq = J^T (J J^T + lambda^2 I)^-1 e; a streaming target (small motion per call) converges in
    a few iterations. The result is the best iterate; check ``ok()`` before using it.
    """
    q = np.clip(np.asarray(q_seed, dtype=float), q_min, q_max)
    p_t, r_t = target[:3, 3], target[:3, :3]
    lam2 = damping * damping * np.eye(6)
    best = None
    for it in range(max_iter + 1):
        jac, t = jacobian(q)
        e = np.concatenate([p_t - t[:3, 3], rotation_error(r_t, t[:3, :3])])
        pe, re = float(np.linalg.norm(e[:3])), float(np.linalg.norm(e[3:]))
        if best is None or pe + 0.1 * re < best.pos_err + 0.1 * best.rot_err:
            best = IkResult(q.copy(), pe, re, it)
        if (pe <= pos_tol and re <= rot_tol) or it == max_iter:
            break
        dq = jac.T @ np.linalg.solve(jac @ jac.T + lam2, e)
        n = np.max(np.abs(dq))
        if n > max_step:
            dq *= max_step / n
        q = np.clip(q + dq, q_min, q_max)
    assert best is not None
    best.iterations = it
    return best

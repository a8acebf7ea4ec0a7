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

import math
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


# Constant entries of each link transform (modified DH): only cos/sin of theta change with q. The IK runs
# twice per streamed target (the controller's reachability check, the emulator's firmware IK) at ~100 Hz,
# so FK and the Jacobian are vectorised over the six joints instead of built from per-joint 4x4 arrays.
_CA, _SA = np.cos(DH_ALPHA), np.sin(DH_ALPHA)
_LINK_TEMPLATE = np.zeros((6, 4, 4))
_LINK_TEMPLATE[:, 0, 3] = DH_A
_LINK_TEMPLATE[:, 1, 2], _LINK_TEMPLATE[:, 1, 3] = -_SA, -_SA * DH_D
_LINK_TEMPLATE[:, 2, 2], _LINK_TEMPLATE[:, 2, 3] = _CA, _CA * DH_D
_LINK_TEMPLATE[:, 3, 3] = 1.0


def frames_array(q: np.ndarray) -> np.ndarray:
    """Base->frame i transforms for i = 1..6 as one (6, 4, 4) array (frame 6 = flange), metres."""
    th = np.asarray(q, dtype=float)[:6] + DH_THETA_OFFSET
    ct, st = np.cos(th), np.sin(th)
    lk = _LINK_TEMPLATE.copy()
    lk[:, 0, 0], lk[:, 0, 1] = ct, -st
    lk[:, 1, 0], lk[:, 1, 1] = st * _CA, ct * _CA
    lk[:, 2, 0], lk[:, 2, 1] = st * _SA, ct * _SA
    for i in range(1, 6):
        np.matmul(lk[i - 1], lk[i], out=lk[i])
    return lk


def link_frames(q: np.ndarray) -> list[np.ndarray]:
    """Base->frame i transforms for i = 1..6 (frame 6 = flange), metres."""
    return list(frames_array(q))


def fk(q: np.ndarray) -> np.ndarray:
    """Flange pose as a 4x4 homogeneous transform in the arm base frame (m)."""
    return frames_array(q)[-1].copy()


def jacobian(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(6x6 geometric Jacobian [v; w] of the flange, flange transform)."""
    f = frames_array(q)
    z, d = f[:, :3, 2], f[-1, :3, 3] - f[:, :3, 3]   # modified DH: joint i turns about z of frame i
    jac = np.empty((6, 6))
    jac[0] = z[:, 1] * d[:, 2] - z[:, 2] * d[:, 1]
    jac[1] = z[:, 2] * d[:, 0] - z[:, 0] * d[:, 2]
    jac[2] = z[:, 0] * d[:, 1] - z[:, 1] * d[:, 0]
    jac[3:] = z.T
    return jac, f[-1].copy()


# ---------------------------------------------------------------- rotations
def euler_to_matrix(rx: float, ry: float, rz: float) -> np.ndarray:
    """SDK/firmware convention: R = Rz(rz) Ry(ry) Rx(rx) (radians)."""
    cx, sx, cy, sy = math.cos(rx), math.sin(rx), math.cos(ry), math.sin(ry)
    cz, sz = math.cos(rz), math.sin(rz)
    return np.array([[cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx],
                     [sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx],
                     [-sy, cy * sx, cy * cx]])


def matrix_to_euler(r: np.ndarray) -> np.ndarray:
    """Inverse of ``euler_to_matrix``, same branch choices as the SDK's ``CalFK`` (radians)."""
    (r00, r01, _), (r10, r11, _), (r20, r21, r22) = np.asarray(r)[:3, :3].tolist()
    if r20 < -1 + 1e-4:
        return np.array([math.atan2(r01, r11), math.pi / 2, 0.0])
    if r20 > 1 - 1e-4:
        return np.array([-math.atan2(r01, r11), -math.pi / 2, 0.0])
    ry = math.atan2(-r20, math.hypot(r00, r10))
    c = math.cos(ry)
    return np.array([math.atan2(r21 / c, r22 / c), ry, math.atan2(r10 / c, r00 / c)])


def quat_to_matrix(q_xyzw: np.ndarray) -> np.ndarray:
    x, y, z, w = np.asarray(q_xyzw, dtype=float) / np.linalg.norm(q_xyzw)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion xyzw with w >= 0 (scalar math: ~400 calls/s in the arm node)."""
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = np.asarray(r)[:3, :3].tolist()
    tr = r00 + r11 + r22
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        x, y, z, w = (r21 - r12) / s, (r02 - r20) / s, (r10 - r01) / s, 0.25 * s
    elif r00 > r11 and r00 > r22:
        s = 2.0 * math.sqrt(1.0 + r00 - r11 - r22)
        x, y, z, w = 0.25 * s, (r01 + r10) / s, (r02 + r20) / s, (r21 - r12) / s
    elif r11 > r22:
        s = 2.0 * math.sqrt(1.0 + r11 - r00 - r22)
        x, y, z, w = (r01 + r10) / s, 0.25 * s, (r12 + r21) / s, (r02 - r20) / s
    else:
        s = 2.0 * math.sqrt(1.0 + r22 - r00 - r11)
        x, y, z, w = (r02 + r20) / s, (r12 + r21) / s, 0.25 * s, (r10 - r01) / s
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if w < 0:
        n = -n
    return np.array([x / n, y / n, z / n, w / n])


def rotation_error(r_target: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Axis-angle vector (base frame) rotating r onto r_target (scalar math: it runs in every IK iteration)."""
    re = r_target @ r.T
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = re.tolist()
    angle = math.acos(min(1.0, max(-1.0, (r00 + r11 + r22 - 1.0) / 2.0)))
    vx, vy, vz = r21 - r12, r02 - r20, r10 - r01
    if angle < 1e-9:
        return np.array([0.5 * vx, 0.5 * vy, 0.5 * vz])
    if math.pi - angle < 1e-6:  # 180 deg: axis from the symmetric part
        axis = np.sqrt(np.clip((np.diag(re) + 1.0) / 2.0, 0.0, None))
        i = int(np.argmax(axis))
        axis = (re[:, i] + np.eye(3)[:, i]) / np.sqrt(2.0 * (1.0 + re[i, i]))
        return angle * axis / np.linalg.norm(axis)
    k = angle / (2.0 * math.sin(angle))
    return np.array([k * vx, k * vy, k * vz])


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
    q = np.minimum(np.maximum(np.asarray(q_seed, dtype=float), q_min), q_max)
    p_t, r_t = target[:3, 3], target[:3, :3]
    lam2 = damping * damping * np.eye(6)
    best = None
    e = np.empty(6)
    for it in range(max_iter + 1):
        jac, t = jacobian(q)
        e[:3] = p_t - t[:3, 3]
        e[3:] = rotation_error(r_t, t[:3, :3])
        ex, ey, ez, wx, wy, wz = e.tolist()
        pe, re = math.sqrt(ex * ex + ey * ey + ez * ez), math.sqrt(wx * wx + wy * wy + wz * wz)
        if best is None or pe + 0.1 * re < best.pos_err + 0.1 * best.rot_err:
            best = IkResult(q, pe, re, it)
        if (pe <= pos_tol and re <= rot_tol) or it == max_iter:
            break
        dq = jac.T @ np.linalg.solve(jac @ jac.T + lam2, e)
        n = float(np.abs(dq).max())
        if n > max_step:
            dq *= max_step / n
        q = np.minimum(np.maximum(q + dq, q_min), q_max)   # a new array: best keeps its own
    assert best is not None
    best.iterations = it
    return best

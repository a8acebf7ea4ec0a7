"""Piper forward kinematics, IK (closed form, damped least squares) and rotation conversions (no ROS).

``ik`` is what callers use: the exact closed-form solution nearest the seed (``closed_form_ik``) when one lies
near it, else damped least squares from the seed (``solve_ik``).

The hot paths (``chain``, the IK, the ``Rot`` helpers) are scalar float math: on 3-6 numbers numpy's
per-call dispatch costs more than the arithmetic; the ndarray functions wrap them for everyone else.

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
from collections.abc import Iterable
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


# The IK runs twice per streamed target (the controller's reachability check, the emulator's firmware IK)
# at ~100 Hz and the emulator builds the link frames every 200 Hz tick: on six joints numpy's per-call
# dispatch costs more than the arithmetic, so the chain is composed in scalar floats (``chain``).
# Per joint: cos/sin of alpha (0 or +-pi/2 on the Piper, kept as computed so the product equals the
# 4x4 matrix product to rounding), a, d, theta offset.
_DH = tuple(
    (math.cos(al), math.sin(al), a, d, off)
    for al, a, d, off in zip(DH_ALPHA.tolist(), DH_A.tolist(), DH_D.tolist(), DH_THETA_OFFSET.tolist())
)

Frame = tuple[float, float, float, float, float, float, float, float, float, float, float, float]
"""A transform as 12 floats: the rotation row-major (r00 r01 r02 r10 .. r22), then the position (x y z)."""


def _floats(v: np.ndarray | Iterable[float], n: int) -> list[float]:
    """The first n numbers of v as Python floats (scalar math on np.float64 costs more than on float)."""
    if isinstance(v, np.ndarray):
        return [float(x) for x in v.ravel()[:n].tolist()]
    return [float(x) for x in list(v)[:n]]


def chain(q: list[float]) -> list[Frame]:
    """Base->frame i for i = 1..6 as ``Frame`` tuples.

    Modified DH: frame i = frame i-1 Rx(alpha) Tx(a) Rz(theta) Tz(d). With the columns x, y, z of frame
    i-1: u = ca y + sa z; frame i has x' = ct x + st u, y' = ct u - st x, z' = ca z - sa y, and origin
    p + a x + d z'.
    """
    xx, xy, xz, yx, yy, yz, zx, zy, zz = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0  # columns x, y, z
    px = py = pz = 0.0
    cos, sin = math.cos, math.sin
    out: list[Frame] = []
    for qi, (ca, sa, a, d, off) in zip(q, _DH):
        th = qi + off
        try:
            ct, st = cos(th), sin(th)
        except ValueError:  # an infinite angle: NaN, as numpy's cos and sin give
            ct = st = math.nan
        ux, uy, uz = ca * yx + sa * zx, ca * yy + sa * zy, ca * yz + sa * zz
        zx, zy, zz = ca * zx - sa * yx, ca * zy - sa * yy, ca * zz - sa * yz
        px, py, pz = px + a * xx + d * zx, py + a * xy + d * zy, pz + a * xz + d * zz
        xx, xy, xz, yx, yy, yz = (
            ct * xx + st * ux,
            ct * xy + st * uy,
            ct * xz + st * uz,
            ct * ux - st * xx,
            ct * uy - st * xy,
            ct * uz - st * xz,
        )
        out.append((xx, yx, zx, xy, yy, zy, xz, yz, zz, px, py, pz))
    return out


def frame_matrix(f: Frame) -> np.ndarray:
    """A ``Frame`` as its 4x4 homogeneous matrix."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22, x, y, z = f
    return np.array([[r00, r01, r02, x], [r10, r11, r12, y], [r20, r21, r22, z], [0.0, 0.0, 0.0, 1.0]])


def frames_array(q: np.ndarray) -> np.ndarray:
    """Base->frame i transforms for i = 1..6 as one (6, 4, 4) array (frame 6 = flange), metres."""
    c = np.array(chain(_floats(q, 6)))
    out = np.zeros((6, 4, 4))
    out[:, :3, :3] = c[:, :9].reshape(6, 3, 3)
    out[:, :3, 3] = c[:, 9:]
    out[:, 3, 3] = 1.0
    return out


def link_frames(q: np.ndarray) -> list[np.ndarray]:
    """Base->frame i transforms for i = 1..6 (frame 6 = flange), metres."""
    return list(frames_array(q))


def fk(q: np.ndarray) -> np.ndarray:
    """Flange pose as a 4x4 homogeneous transform in the arm base frame (m)."""
    return frame_matrix(chain(_floats(q, 6))[-1])


def _jacobian_rows(frames: list[Frame]) -> list[list[float]]:
    """Rows of the 6x6 geometric Jacobian [v; w] of the flange.

    Column i is z_i x (p_6 - p_i), z_i (modified DH: joint i turns about z of frame i).
    """
    ex, ey, ez = frames[-1][9:12]
    vx, vy, vz, wx, wy, wz = [], [], [], [], [], []
    for f in frames:
        zx, zy, zz = f[2], f[5], f[8]
        dx, dy, dz = ex - f[9], ey - f[10], ez - f[11]
        vx.append(zy * dz - zz * dy)
        vy.append(zz * dx - zx * dz)
        vz.append(zx * dy - zy * dx)
        wx.append(zx)
        wy.append(zy)
        wz.append(zz)
    return [vx, vy, vz, wx, wy, wz]


def jacobian(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(6x6 geometric Jacobian [v; w] of the flange, flange transform)."""
    f = chain(_floats(q, 6))
    return np.array(_jacobian_rows(f)), frame_matrix(f[-1])


# ---------------------------------------------------------------- rotations
Rot = tuple[float, float, float, float, float, float, float, float, float]
"""A rotation as 9 floats, row-major (the first 9 of a ``Frame``)."""


def euler_rot(rx: float, ry: float, rz: float) -> Rot:
    """``euler_to_matrix`` as a ``Rot`` (scalar: the emulator and the link convert every end pose)."""
    cx, sx, cy, sy = math.cos(rx), math.sin(rx), math.cos(ry), math.sin(ry)
    cz, sz = math.cos(rz), math.sin(rz)
    return (
        cz * cy,
        cz * sy * sx - sz * cx,
        cz * sy * cx + sz * sx,
        sz * cy,
        sz * sy * sx + cz * cx,
        sz * sy * cx - cz * sx,
        -sy,
        cy * sx,
        cy * cx,
    )


def euler_quat(rx: float, ry: float, rz: float) -> tuple[float, float, float, float]:
    """The quaternion xyzw (w >= 0, as ``matrix_to_quat``) of ``euler_rot``: qz(rz) qy(ry) qx(rx).

    Without building the matrix: the arm node converts every end-pose feedback it publishes.
    """
    cx, sx = math.cos(rx / 2.0), math.sin(rx / 2.0)
    cy, sy = math.cos(ry / 2.0), math.sin(ry / 2.0)
    cz, sz = math.cos(rz / 2.0), math.sin(rz / 2.0)
    x, y = cz * cy * sx - sz * sy * cx, cz * sy * cx + sz * cy * sx
    z, w = sz * cy * cx - cz * sy * sx, cz * cy * cx + sz * sy * sx
    return (-x, -y, -z, -w) if w < 0 else (x, y, z, w)


def euler_to_matrix(rx: float, ry: float, rz: float) -> np.ndarray:
    """SDK/firmware convention: R = Rz(rz) Ry(ry) Rx(rx) (radians)."""
    return np.array(euler_rot(rx, ry, rz)).reshape(3, 3)


def rot_euler(r: Rot | Frame) -> tuple[float, float, float]:
    """``matrix_to_euler`` of a ``Rot`` (or a ``Frame``'s rotation)."""
    r00, r01, _, r10, r11, _, r20, r21, r22 = r[:9]
    if r20 < -1 + 1e-4:
        return math.atan2(r01, r11), math.pi / 2, 0.0
    if r20 > 1 - 1e-4:
        return -math.atan2(r01, r11), -math.pi / 2, 0.0
    ry = math.atan2(-r20, math.hypot(r00, r10))
    c = math.cos(ry)
    return math.atan2(r21 / c, r22 / c), ry, math.atan2(r10 / c, r00 / c)


def matrix_to_euler(r: np.ndarray) -> np.ndarray:
    """Inverse of ``euler_to_matrix``, same branch choices as the SDK's ``CalFK`` (radians)."""
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = np.asarray(r)[:3, :3].tolist()
    return np.array(rot_euler((r00, r01, r02, r10, r11, r12, r20, r21, r22)))


def quat_rot(x: float, y: float, z: float, w: float) -> Rot:
    """Rotation of the quaternion xyzw (normalised here)."""
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return (
        1 - 2 * (y * y + z * z),
        2 * (x * y - z * w),
        2 * (x * z + y * w),
        2 * (x * y + z * w),
        1 - 2 * (x * x + z * z),
        2 * (y * z - x * w),
        2 * (x * z - y * w),
        2 * (y * z + x * w),
        1 - 2 * (x * x + y * y),
    )


def quat_to_matrix(q_xyzw: np.ndarray) -> np.ndarray:
    """The 3x3 rotation of a quaternion xyzw (normalised here)."""
    x, y, z, w = _floats(q_xyzw, 4)
    return np.array(quat_rot(x, y, z, w)).reshape(3, 3)


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion xyzw with w >= 0 (scalar math: the arm node's hot path)."""
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


def rot_error_of(t: Rot | Frame, r: Rot | Frame) -> tuple[float, float, float]:
    """``rotation_error`` on ``Rot`` tuples (scalar math: it runs in every IK iteration)."""
    t00, t01, t02, t10, t11, t12, t20, t21, t22 = t[:9]
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = r[:9]
    # re = t @ r.T: only its trace and antisymmetric part are needed off the 180 deg case
    r00 = t00 * a00 + t01 * a01 + t02 * a02
    r11 = t10 * a10 + t11 * a11 + t12 * a12
    r22 = t20 * a20 + t21 * a21 + t22 * a22
    r01, r10 = t00 * a10 + t01 * a11 + t02 * a12, t10 * a00 + t11 * a01 + t12 * a02
    r02, r20 = t00 * a20 + t01 * a21 + t02 * a22, t20 * a00 + t21 * a01 + t22 * a02
    r12, r21 = t10 * a20 + t11 * a21 + t12 * a22, t20 * a10 + t21 * a11 + t22 * a12
    angle = math.acos(min(1.0, max(-1.0, (r00 + r11 + r22 - 1.0) / 2.0)))
    vx, vy, vz = r21 - r12, r02 - r20, r10 - r01
    if angle < 1e-9:
        return 0.5 * vx, 0.5 * vy, 0.5 * vz
    if math.pi - angle < 1e-6:  # 180 deg: axis from the symmetric part
        re = np.array([[r00, r01, r02], [r10, r11, r12], [r20, r21, r22]])
        axis = np.sqrt(np.clip((np.diag(re) + 1.0) / 2.0, 0.0, None))
        i = int(np.argmax(axis))
        axis = (re[:, i] + np.eye(3)[:, i]) / np.sqrt(2.0 * (1.0 + re[i, i]))
        ax, ay, az = (angle * axis / np.linalg.norm(axis)).tolist()
        return ax, ay, az
    k = angle / (2.0 * math.sin(angle))
    return k * vx, k * vy, k * vz


def _rot(r: np.ndarray) -> Rot:
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = np.asarray(r, dtype=float)[:3, :3].tolist()
    return r00, r01, r02, r10, r11, r12, r20, r21, r22


def rotation_error(r_target: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Axis-angle vector (base frame) rotating r onto r_target."""
    return np.array(rot_error_of(_rot(r_target), _rot(r)))


def pose_to_matrix(pos: np.ndarray, quat_xyzw: np.ndarray) -> np.ndarray:
    """A 4x4 homogeneous transform from a position (m) and a quaternion xyzw."""
    x, y, z = _floats(pos, 3)
    return frame_matrix(quat_rot(*_floats(quat_xyzw, 4)) + (x, y, z))


# ---------------------------------------------------------------- IK
def _dls_step(rows: list[list[float]], e: list[float], lam2: float) -> list[float]:
    """Dq = J^T (J J^T + lam2 I)^-1 e for the 6x6 J given by its rows: Cholesky of the SPD matrix in floats.

    Scalar, because in a live process numpy's 6x6 matmuls and ``linalg.solve`` (its wrapper's Python-level
    checks and errstate) cost more than this loop. lam2 > 0 keeps the matrix positive definite; NaN input
    gives NaN out.
    """
    a = [[0.0] * 6 for _ in range(6)]
    for i in range(6):
        ri, ai = rows[i], a[i]
        r0, r1, r2, r3, r4, r5 = ri
        for j in range(i + 1):
            rj = rows[j]
            ai[j] = r0 * rj[0] + r1 * rj[1] + r2 * rj[2] + r3 * rj[3] + r4 * rj[4] + r5 * rj[5]
        ai[i] += lam2
    for j in range(6):  # a = L L^T, L written over a's lower triangle
        lj = a[j]
        s = lj[j]
        for k in range(j):
            s -= lj[k] * lj[k]
        d = lj[j] = math.sqrt(s) if s >= 0.0 else math.nan
        for i in range(j + 1, 6):
            li = a[i]
            s = li[j]
            for k in range(j):
                s -= li[k] * lj[k]
            li[j] = s / d
    z = [0.0] * 6
    for i in range(6):  # L z = e
        li = a[i]
        s = e[i]
        for k in range(i):
            s -= li[k] * z[k]
        z[i] = s / li[i]
    y = [0.0] * 6
    for i in range(5, -1, -1):  # L^T y = z
        s = z[i]
        for k in range(i + 1, 6):
            s -= a[k][i] * y[k]
        y[i] = s / a[i][i]
    y0, y1, y2, y3, y4, y5 = y
    v0, v1, v2, v3, v4, v5 = rows
    return [v0[c] * y0 + v1[c] * y1 + v2[c] * y2 + v3[c] * y3 + v4[c] * y4 + v5[c] * y5 for c in range(6)]


@dataclass
class IkResult:
    """An IK answer: joints (rad), its residuals and how it was found; check ``ok()`` before using it."""

    q: np.ndarray
    pos_err: float  # m
    rot_err: float  # rad
    iterations: int
    closed_form: bool = False  # solved by ``closed_form_ik`` (``ik``), not by damped steps

    def ok(self, pos_tol: float = 1e-3, rot_tol: float = 1e-2) -> bool:
        """Whether the residuals are within ``pos_tol`` (m) and ``rot_tol`` (rad)."""
        return self.pos_err <= pos_tol and self.rot_err <= rot_tol


_CONVERGED = (2e-5, 2e-4)  # m, rad: where the damped iteration stops (``solve_ik``'s pos_tol, rot_tol)
_ROT_WEIGHT = 0.1  # m per rad: how the damped iteration's best iterate weighs a rotation error against a position one


def solve_ik(
    target: np.ndarray,
    q_seed: np.ndarray,
    q_min: np.ndarray = SDK_JOINT_MIN,
    q_max: np.ndarray = SDK_JOINT_MAX,
    max_iter: int = 50,
    damping: float = 0.02,
    max_step: float = 0.25,
    pos_tol: float = _CONVERGED[0],
    rot_tol: float = _CONVERGED[1],
    hold_limits: bool = False,
) -> IkResult:
    """Damped least squares on the flange pose, warm-started from ``q_seed``, clamped to limits.

    dq = J^T (J J^T + lambda^2 I)^-1 e; a streaming target (small motion per call) converges in
    a few iterations. The result is the best iterate; check ``ok()`` before using it. All in scalar
    floats (``_dls_step``).

    ``hold_limits``: a joint at a limit that the step would push past is taken out of the step (its
    Jacobian column zeroed) and the others solve for the rest, and the iteration ends when it stops
    improving. For a target past a limit this finds the nearest pose with that joint at its limit; the plain
    clamped step spends itself on the clamped joint and can stall at its seed.
    """
    lo, hi = _floats(q_min, 6), _floats(q_max, 6)
    # min(max(v, lo), hi) keeps a NaN (as np.minimum/np.maximum do): such a seed never converges
    q = [min(max(v, a), b) for v, a, b in zip(_floats(q_seed, 6), lo, hi)]
    t_rows = np.asarray(target, dtype=float)[:3].tolist()
    tx, ty, tz = t_rows[0][3], t_rows[1][3], t_rows[2][3]
    r_t = (*t_rows[0][:3], *t_rows[1][:3], *t_rows[2][:3])
    lam2 = damping * damping
    best_q, best_pe, best_re, best_cost = q, math.inf, math.inf, math.inf
    prev_cost = math.inf
    it = 0
    for it in range(max_iter + 1):
        frames = chain(q)
        f = frames[-1]
        ex, ey, ez = tx - f[9], ty - f[10], tz - f[11]
        wx, wy, wz = rot_error_of(r_t, f)
        pe, re = math.sqrt(ex * ex + ey * ey + ez * ez), math.sqrt(wx * wx + wy * wy + wz * wz)
        # the cost the steps lower: with hold_limits their own (weighted squares), else the sum of the residuals
        cost = math.hypot(pe, _ROT_WEIGHT * re) if hold_limits else pe + _ROT_WEIGHT * re
        if it == 0 or cost < best_cost:
            best_q, best_pe, best_re, best_cost = q, pe, re, cost
        if (pe <= pos_tol and re <= rot_tol) or it == max_iter:
            break
        if hold_limits and prev_cost - cost < 1e-7:
            break  # at the limit's nearest pose (or stuck): no better iterate is coming
        prev_cost = cost
        rows = _jacobian_rows(frames)
        if not hold_limits:
            dq = _dls_step(rows, [ex, ey, ez, wx, wy, wz], lam2)
        else:
            # the rotation weighted as the best iterate's cost weighs it (0.1 m per rad): a target the limited
            # joints cannot reach trades position against rotation, and each step must lower that cost
            rows = rows[:3] + [[_ROT_WEIGHT * v for v in r] for r in rows[3:]]
            err = [ex, ey, ez, _ROT_WEIGHT * wx, _ROT_WEIGHT * wy, _ROT_WEIGHT * wz]
            dq = _dls_step(rows, err, lam2)
            held = [j for j in range(6) if (dq[j] < 0.0 and q[j] <= lo[j]) or (dq[j] > 0.0 and q[j] >= hi[j])]
            if held:
                rows = [[0.0 if j in held else v for j, v in enumerate(r)] for r in rows]
                dq = _dls_step(rows, err, lam2)
        n = max(abs(v) for v in dq)
        if n > max_step:
            s = max_step / n
            dq = [v * s for v in dq]
        q = [min(max(v + d, a), b) for v, d, a, b in zip(q, dq, lo, hi)]  # a new list: best keeps its own
    return IkResult(np.array(best_q), best_pe, best_re, it)


# ---------------------------------------------------------------- closed-form IK
# The Piper's wrist is spherical (joints 4-6 turn about axes through one point, the wrist centre, d6 behind the
# flange) and its arm is planar (no shoulder or elbow offset across the arm's plane), so a pose has at most 8
# exact solutions in closed form: shoulder (joint 1 facing the wrist centre or away) x elbow x wrist flip. AgileX
# describes the firmware's IK as analytic too. Modified DH, theta_i = q_i + offset_i:
# - wrist centre W = p - d6 z (z: the target's third column); joint 1 faces it: theta_1 = atan2(Wy, Wx) (+ pi);
# - in the arm's plane (r along frame 1's x, h up from the shoulder at d1), frame 2's x axis is at angle
#   -theta_2 and frame 3's at -theta_2 - theta_3; the forearm (a3 along x3, d4 along z4 = -y3) is one link of
#   length L at beta = atan2(d4, a3) from x3: W = a2 u(-theta_2) + L u(-theta_2 - theta_3 + beta);
# - the wrist: R3^T R Rx(-pi/2) = Ry(-theta_4) Rz(theta_5) Ry(-theta_6), read off as a Y-Z-Y Euler triple.
_DH_ALPHA_PIPER = (0.0, -math.pi / 2, 0.0, math.pi / 2, -math.pi / 2, math.pi / 2)
_CLOSED_FORM = (
    all(abs(a - b) < 1e-12 for a, b in zip(DH_ALPHA.tolist(), _DH_ALPHA_PIPER))
    and DH_A[0] == DH_A[1] == DH_A[4] == DH_A[5] == 0.0
    and DH_D[1] == DH_D[2] == DH_D[4] == 0.0
)
_D1, _A2, _A3, _D4, _D6 = (float(DH_D[0]), float(DH_A[2]), float(DH_A[3]), float(DH_D[3]), float(DH_D[5]))
_L = math.hypot(_A3, _D4)
_BETA = math.atan2(_D4, _A3)
_OFFSETS = tuple(DH_THETA_OFFSET.tolist())
_TWO_PI = 2.0 * math.pi


def _turns_to(v: float, ref: float) -> float:
    """V moved by whole turns to within pi of ref (the joints' ranges are each under a turn)."""
    return v - _TWO_PI * round((v - ref) / _TWO_PI)


def closed_form_ik(
    target: np.ndarray,
    q_seed: np.ndarray | Iterable[float],
    q_min: np.ndarray = SDK_JOINT_MIN,
    q_max: np.ndarray = SDK_JOINT_MAX,
    max_jump: float = math.inf,
) -> list[float] | None:
    """The exact joint solution of a flange pose nearest ``q_seed`` (max over the joints), or None.

    Within the limits and no joint more than ``max_jump`` from the seed; None if there is none (out of
    reach, beyond a limit, a NaN) or the arm's DH table is not the Piper's geometry. At the wrist
    singularity (joint 5 at 0, where only q4 + q6 is determined) joints 4 and 6 share the turn from the
    seed equally, as far as their limits allow.
    """
    if not _CLOSED_FORM:
        return None
    return _closed_form(
        np.asarray(target, dtype=float)[:3].tolist(), _floats(q_seed, 6), _floats(q_min, 6), _floats(q_max, 6), max_jump
    )


def _closed_form(
    rows: list[list[float]], seed: list[float], lo: list[float], hi: list[float], max_jump: float
) -> list[float] | None:
    """``closed_form_ik`` on the target's top three rows and the seed and limits as floats."""
    (r00, r01, r02, px), (r10, r11, r12, py), (r20, r21, r22, pz) = rows
    if not all(map(math.isfinite, seed)):  # a NaN target fails the reach test below; a NaN seed would not
        return None
    s0, s1, s2, s3, s4, s5 = seed
    o1, o2, o3, o4, o5, o6 = _OFFSETS
    wx, wy, wz = px - _D6 * r02, py - _D6 * r12, pz - _D6 * r22
    r, h = math.hypot(wx, wy), wz - _D1
    c = (r * r + h * h - _A2 * _A2 - _L * _L) / (2.0 * _A2 * _L)
    if not -1.0 <= c <= 1.0:  # out of reach (False for a NaN too)
        return None
    g0 = math.acos(c)
    heading = math.atan2(wy, wx)
    best: tuple[float, list[float]] | None = None
    for q1, rp in ((_turns_to(heading - o1, s0), r), (_turns_to(heading + math.pi - o1, s0), -r)):
        if not lo[0] <= q1 <= hi[0] or abs(q1 - s0) > max_jump:
            continue
        th1 = q1 + o1
        c1, n1 = math.cos(th1), math.sin(th1)
        toward = math.atan2(h, rp)
        for g in (g0, -g0):  # the elbow's two sides
            q3 = _turns_to(_BETA - g - o3, s2)
            if not lo[2] <= q3 <= hi[2] or abs(q3 - s2) > max_jump:
                continue
            q2 = _turns_to(math.atan2(_L * math.sin(g), _A2 + _L * math.cos(g)) - toward - o2, s1)
            if not lo[1] <= q2 <= hi[1] or abs(q2 - s1) > max_jump:
                continue
            th23 = q2 + o2 + q3 + o3
            c23, n23 = math.cos(th23), math.sin(th23)
            # frame 3's axes in the base: x3, y3, z3; the wrist's matrix N = R3^T R Rx(-pi/2) from their dot products
            x3x, x3y, x3z = c1 * c23, n1 * c23, -n23
            y3x, y3y, y3z = -c1 * n23, -n1 * n23, -c23
            n01 = -(x3x * r02 + x3y * r12 + x3z * r22)
            n11 = -(y3x * r02 + y3y * r12 + y3z * r22)
            n21 = n1 * r02 - c1 * r12
            sb = math.hypot(n01, n21)
            th5 = math.atan2(sb, n11)
            if sb < 1e-9:  # wrist straight: only theta_4 + theta_6 counts (Ry(-(theta_4 + theta_6)))
                ac = math.atan2(x3x * r01 + x3y * r11 + x3z * r21, x3x * r00 + x3y * r10 + x3z * r20)
                q46 = _turns_to(-ac - o4 - o6, s3 + s5)
                q4 = s3 + 0.5 * (q46 - s3 - s5)  # the turn shared by joints 4 and 6, as a damped step shares it
                q4 = min(max(q4, lo[3], q46 - hi[5]), hi[3], q46 - lo[5])
                wrists: tuple[tuple[float, float, float], ...] = ((q4 + o4, th5, q46 - q4 + o6),)
            else:
                a = math.atan2(n21, -n01)
                cc = math.atan2(y3x * r01 + y3y * r11 + y3z * r21, y3x * r00 + y3y * r10 + y3z * r20)
                wrists = ((-a, th5, -cc), (-a - math.pi, -th5, -cc - math.pi))  # the wrist's two flips
            for th4, th5_, th6 in wrists:
                q4, q5, q6 = _turns_to(th4 - o4, s3), th5_ - o5, _turns_to(th6 - o6, s5)
                if not (lo[3] <= q4 <= hi[3] and lo[4] <= q5 <= hi[4] and lo[5] <= q6 <= hi[5]):
                    continue
                jump = max(abs(q1 - s0), abs(q2 - s1), abs(q3 - s2), abs(q4 - s3), abs(q5 - s4), abs(q6 - s5))
                if jump <= max_jump and (best is None or jump < best[0]):
                    best = (jump, [q1, q2, q3, q4, q5, q6])
    return None if best is None else best[1]


def ik(
    target: np.ndarray,
    q_seed: np.ndarray,
    q_min: np.ndarray = SDK_JOINT_MIN,
    q_max: np.ndarray = SDK_JOINT_MAX,
    max_iter: int = 50,
    max_jump: float = 0.25,
) -> IkResult:
    """The flange pose's joints near ``q_seed``; check ``ok()``.

    The closed-form solution when one lies within ``max_jump`` of the seed in every joint, else
    ``solve_ik`` (damped least squares from the seed). Why both: along a target stream the closed form,
    checked against ``chain``, is cheaper than the damped steps and exact; where no exact solution is near
    the seed (a jump, the wrist near its singularity, a target just past a limit or out of reach) the
    damped iteration settles within the callers' tolerance or fails. Within ``max_jump`` (``solve_ik``'s
    ``max_step``, one damped step) the nearest exact solution is the one the damped iteration converges
    to from that seed, to its tolerance (test_ik_closed_form).
    """
    if _CLOSED_FORM:
        rows = np.asarray(target, dtype=float)[:3].tolist()
        q = _closed_form(rows, _floats(q_seed, 6), _floats(q_min, 6), _floats(q_max, 6), max_jump)
        if q is not None:
            f = chain(q)[-1]
            ex, ey, ez = rows[0][3] - f[9], rows[1][3] - f[10], rows[2][3] - f[11]
            wx, wy, wz = rot_error_of((*rows[0][:3], *rows[1][:3], *rows[2][:3]), f)
            pe, re = math.sqrt(ex * ex + ey * ey + ez * ez), math.sqrt(wx * wx + wy * wy + wz * wz)
            if pe <= _CONVERGED[0] and re <= _CONVERGED[1]:  # exact but for rounding (acos's, near the elbow's fold)
                return IkResult(np.array(q), pe, re, 0, closed_form=True)
    return solve_ik(target, q_seed, q_min, q_max, max_iter=max_iter)

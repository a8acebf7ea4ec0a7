"""Quaternion and rotation-matrix helpers for the teleop math (no ROS).

Quaternions are ``[x, y, z, w]`` (the ROS / OpenXR order) everywhere in teleop; datasets convert
to wxyz at the writer. Every function takes and returns plain float arrays so the same code runs in
unit tests against hand-computed values and in the node; inside, the arithmetic is on Python floats
(``as_floats``), much cheaper than numpy calls on 3-4 element vectors. The ``*_t`` variants
take float sequences and return tuples (or nested lists): the control tick's path, which keeps its
poses as floats and makes arrays only for what it hands out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Quat = tuple[float, float, float, float]


def as_floats(v: np.ndarray | Sequence[float]) -> list[float]:
    """The elements as Python floats.

    The teleop math runs on 3-4 element vectors, where each numpy call's dispatch costs more than the
    arithmetic it does.
    """
    return v.tolist() if isinstance(v, np.ndarray) else [float(x) for x in v]


def is_finite(*arrays: np.ndarray | list[float]) -> bool:
    """Whether every element of every array is finite."""
    for a in arrays:
        try:
            values = a.ravel().tolist() if isinstance(a, np.ndarray) else [float(x) for x in a]
        except TypeError:  # nested sequences: numpy flattens them
            values = np.asarray(a, dtype=float).ravel().tolist()
        for x in values:
            if not math.isfinite(x):
                return False
    return True


def _unit(x: float, y: float, z: float, w: float, what: object) -> tuple[float, float, float, float]:
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(n) or n < 1e-9:
        raise ValueError(f"cannot normalise quaternion {what!r}")
    if w < 0:
        n = -n
    return x / n, y / n, z / n, w / n


def normalize(q: np.ndarray | list[float]) -> np.ndarray:
    """Unit quaternion with w >= 0 (one canonical sign, so differences and filters never see a flip)."""
    x, y, z, w = as_floats(q)
    return np.array(_unit(x, y, z, w, q))


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a*b (apply b, then a)."""
    ax, ay, az, aw = as_floats(a)
    bx, by, bz, bw = as_floats(b)
    return np.array(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def quat_conj(q: np.ndarray) -> np.ndarray:
    """The conjugate of ``q`` (xyzw): the inverse of a unit quaternion."""
    x, y, z, w = as_floats(q)
    return np.array([-x, -y, -z, w])


def _matrix(x: float, y: float, z: float, w: float) -> list[list[float]]:
    return [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """The 3x3 rotation matrix of ``q`` (xyzw, normalised first)."""
    x, y, z, w = as_floats(q)
    return np.array(_matrix(*_unit(x, y, z, w, q)))


def _quat(m: list[list[float]]) -> tuple[float, float, float, float]:
    """Shepperd's method on a nested list: numerically stable for every angle; unit, w >= 0."""
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = m
    tr = m00 + m11 + m22
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = ((m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s)
    elif m00 > m11 and m00 > m22:
        s = 2.0 * math.sqrt(1.0 + m00 - m11 - m22)
        q = (0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s)
    elif m11 > m22:
        s = 2.0 * math.sqrt(1.0 + m11 - m00 - m22)
        q = ((m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + m22 - m00 - m11)
        q = ((m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s)
    return _unit(*q, m)


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion (Shepperd's method, numerically stable for every angle)."""
    return np.array(_quat(np.asarray(m, dtype=float).tolist()))


def _matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = a
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = b
    return [
        [a00 * b00 + a01 * b10 + a02 * b20, a00 * b01 + a01 * b11 + a02 * b21, a00 * b02 + a01 * b12 + a02 * b22],
        [a10 * b00 + a11 * b10 + a12 * b20, a10 * b01 + a11 * b11 + a12 * b21, a10 * b02 + a11 * b12 + a12 * b22],
        [a20 * b00 + a21 * b10 + a22 * b20, a20 * b01 + a21 * b11 + a22 * b21, a20 * b02 + a21 * b12 + a22 * b22],
    ]


def conjugate_rotation(m: np.ndarray, q: np.ndarray) -> list[list[float]]:
    """M R(q) M^T as a nested list (a rotation expressed in another frame, M a rotation)."""
    ml = np.asarray(m, dtype=float).tolist()
    x, y, z, w = as_floats(q)
    mt = [list(r) for r in zip(*ml)]
    return _matmul(_matmul(ml, _matrix(*_unit(x, y, z, w, q))), mt)


def rotate_then(r: list[list[float]], q: np.ndarray) -> np.ndarray:
    """The unit quaternion of r R(q) (apply q, then the rotation matrix r)."""
    x, y, z, w = as_floats(q)
    return np.array(_quat(_matmul(r, _matrix(*_unit(x, y, z, w, q)))))


def axis_angle_to_quat(axis: np.ndarray, angle: float) -> np.ndarray:
    """The unit quaternion (xyzw) rotating by ``angle`` rad about ``axis``."""
    axis = np.asarray(axis, dtype=float)
    axis = axis / np.linalg.norm(axis)
    s = math.sin(angle / 2.0)
    return normalize(np.array([axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2.0)]))


def rot_z(angle: float) -> np.ndarray:
    """The 3x3 rotation by ``angle`` rad about +z."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def angle_between(a: np.ndarray, b: np.ndarray) -> float:
    """Rotation angle (rad, 0..pi) taking orientation a to orientation b."""
    ax, ay, az, aw = as_floats(a)
    bx, by, bz, bw = as_floats(b)
    ax, ay, az, aw = _unit(ax, ay, az, aw, a)
    bx, by, bz, bw = _unit(bx, by, bz, bw, b)
    ax, ay, az = -ax, -ay, -az  # conj(a) * b
    rx = aw * bx + ax * bw + ay * bz - az * by
    ry = aw * by - ax * bz + ay * bw + az * bx
    rz = aw * bz + ax * by - ay * bx + az * bw
    rw = aw * bw - ax * bx - ay * by - az * bz
    return 2.0 * math.atan2(math.sqrt(rx * rx + ry * ry + rz * rz), abs(rw))


def angle_between_t(a: Sequence[float], b: Sequence[float]) -> float:
    """``angle_between`` of two float sequences (the control tick's scalar path)."""
    ax, ay, az, aw = _unit(a[0], a[1], a[2], a[3], a)
    bx, by, bz, bw = _unit(b[0], b[1], b[2], b[3], b)
    ax, ay, az = -ax, -ay, -az  # conj(a) * b
    rx = aw * bx + ax * bw + ay * bz - az * by
    ry = aw * by - ax * bz + ay * bw + az * bx
    rz = aw * bz + ax * by - ay * bx + az * bw
    rw = aw * bw - ax * bx - ay * by - az * bz
    return 2.0 * math.atan2(math.sqrt(rx * rx + ry * ry + rz * rz), abs(rw))


def slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """Shortest-path spherical interpolation; t=0 gives a, t=1 gives b (``slerp_t`` on arrays)."""
    return np.array(slerp_t(as_floats(a), as_floats(b), t))


def slerp_t(a: Sequence[float], b: Sequence[float], t: float) -> Quat:
    """``slerp`` of two float sequences, as a tuple (the control tick's scalar path)."""
    qa = _unit(a[0], a[1], a[2], a[3], a)
    qb = _unit(b[0], b[1], b[2], b[3], b)
    d = qa[0] * qb[0] + qa[1] * qb[1] + qa[2] * qb[2] + qa[3] * qb[3]
    if d < 0:
        qb, d = (-qb[0], -qb[1], -qb[2], -qb[3]), -d
    # Half-angle via atan2: accurate for tiny angles too, so a capped step lands exactly on the cap.
    e = [vb - d * va for va, vb in zip(qa, qb)]
    theta = math.atan2(math.sqrt(e[0] * e[0] + e[1] * e[1] + e[2] * e[2] + e[3] * e[3]), d)
    s = math.sin(theta)
    if s < 1e-12:  # identical orientations: nothing to interpolate
        return qa
    ka, kb = math.sin((1 - t) * theta) / s, math.sin(t * theta) / s
    x, y, z, w = (ka * va + kb * vb for va, vb in zip(qa, qb))
    return _unit(x, y, z, w, (a, b))


def unit_t(q: Sequence[float]) -> Quat:
    """``normalize`` of a float sequence, as a tuple."""
    return _unit(q[0], q[1], q[2], q[3], q)


def quat_mul_t(a: Sequence[float], b: Sequence[float]) -> Quat:
    """``quat_mul`` of two float sequences, as a tuple."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def conjugate_rotation_t(ml: list[list[float]], mt: list[list[float]], q: Sequence[float]) -> list[list[float]]:
    """``conjugate_rotation`` with M and its transpose as nested lists made once (the remap is fixed)."""
    return _matmul(_matmul(ml, _matrix(*_unit(q[0], q[1], q[2], q[3], q))), mt)


def rotate_then_t(r: list[list[float]], q: Sequence[float]) -> Quat:
    """``rotate_then`` of a float sequence, as a tuple."""
    return _quat(_matmul(r, _matrix(*_unit(q[0], q[1], q[2], q[3], q))))

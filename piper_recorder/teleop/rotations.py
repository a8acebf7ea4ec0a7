"""Quaternion and rotation-matrix helpers for the teleop math (numpy, no ROS).

Quaternions are ``[x, y, z, w]`` (the ROS / OpenXR order) everywhere in teleop; datasets convert
to wxyz at the writer. Every function takes and returns plain float arrays so the same code runs in
unit tests against hand-computed values and in the node.
"""
from __future__ import annotations

import math

import numpy as np


def is_finite(*arrays: np.ndarray | list[float]) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(a, dtype=float)))) for a in arrays)


def normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternion with w >= 0 (one canonical sign, so differences and filters never see a flip)."""
    q = np.asarray(q, dtype=float)
    n = float(np.linalg.norm(q))
    if not math.isfinite(n) or n < 1e-9:
        raise ValueError(f"cannot normalise quaternion {q!r}")
    q = q / n
    return -q if q[3] < 0 else q


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a*b (apply b, then a)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])


def quat_conj(q: np.ndarray) -> np.ndarray:
    return np.array([-q[0], -q[1], -q[2], q[3]], dtype=float)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    x, y, z, w = normalize(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion (Shepperd's method, numerically stable for every angle)."""
    m = np.asarray(m, dtype=float)
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    return normalize(np.array(q))


def axis_angle_to_quat(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = np.asarray(axis, dtype=float)
    axis = axis / np.linalg.norm(axis)
    s = math.sin(angle / 2.0)
    return normalize(np.array([axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2.0)]))


def rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def angle_between(a: np.ndarray, b: np.ndarray) -> float:
    """Rotation angle (rad, 0..pi) taking orientation a to orientation b."""
    r = quat_mul(quat_conj(normalize(a)), normalize(b))
    return 2.0 * math.atan2(float(np.linalg.norm(r[:3])), abs(float(r[3])))


def slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """Shortest-path spherical interpolation; t=0 gives a, t=1 gives b."""
    a, b = normalize(a), normalize(b)
    d = float(np.dot(a, b))
    if d < 0:
        b, d = -b, -d
    # Half-angle via atan2: accurate for tiny angles too, so a capped step lands exactly on the cap.
    theta = math.atan2(float(np.linalg.norm(b - d * a)), d)
    s = math.sin(theta)
    if s < 1e-12:  # identical orientations: nothing to interpolate
        return a
    return normalize((math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / s)

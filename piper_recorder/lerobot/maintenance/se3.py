"""Vectorised quaternion (wxyz) and SE(3) pose helpers for 7-vectors ``[x, y, z, qw, qx, qy, qz]``.

Sign convention: ``q`` and ``-q`` are the same rotation, so every quaternion this module *returns*
is canonical: ``w >= 0``, and when ``w == 0`` the first non-zero of ``x, y, z`` is positive. Inputs
may have either sign and need not be exactly unit (they are normalised), since float32 storage
rounds them.
"""

from __future__ import annotations

import numpy as np


def normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternions along the last axis (float64); a zero quaternion is an error."""
    q = np.asarray(q, dtype=np.float64)
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(n == 0):
        raise ValueError("zero-norm quaternion")
    return q / n


def canonical(q: np.ndarray) -> np.ndarray:
    """Pick the representative of {q, -q} with w > 0 (ties broken by the first non-zero of x, y, z)."""
    q = np.asarray(q, dtype=np.float64)
    first = np.argmax(q != 0, axis=-1)[..., None]  # first non-zero component in w, x, y, z order
    sign = np.where(np.take_along_axis(q, first, axis=-1) < 0, -1.0, 1.0)
    return q * sign


def conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (the inverse of a unit quaternion)."""
    return np.asarray(q, dtype=np.float64) * np.array([1.0, -1.0, -1.0, -1.0])


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a ⊗ b of wxyz quaternions (broadcasting)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate 3-vectors v by unit quaternions q (broadcasting)."""
    v = np.asarray(v, dtype=np.float64)
    qv = np.concatenate([np.zeros(v.shape[:-1] + (1,)), v], axis=-1)
    return mul(mul(q, qv), conj(q))[..., 1:]


def relative_pose(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``T_base^-1 @ T_target`` for 7-vector poses, as 7-vectors with a canonical unit quaternion.

    Position: ``R_base^T (p_target - p_base)``; rotation: ``conj(q_base) ⊗ q_target``.
    """
    base = np.asarray(base, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    qb = normalize(base[..., 3:7])
    qt = normalize(target[..., 3:7])
    pos = rotate(conj(qb), target[..., 0:3] - base[..., 0:3])
    rot = canonical(normalize(mul(conj(qb), qt)))
    return np.concatenate([pos, rot], axis=-1)

"""Quaternion helpers against hand-computed rotations."""

import itertools
import math

import numpy as np
import pytest

from piper_recorder.teleop import rotations
from piper_recorder.teleop.rotations import (
    angle_between,
    axis_angle_to_quat,
    matrix_to_quat,
    normalize,
    quat_conj,
    quat_mul,
    quat_to_matrix,
    rot_z,
    slerp,
)

S = math.sqrt(0.5)


def test_quat_to_matrix_90_deg_about_z_by_hand():
    q = np.array([0.0, 0.0, S, S])
    np.testing.assert_allclose(quat_to_matrix(q), [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12)
    np.testing.assert_allclose(quat_to_matrix(q) @ [1, 0, 0], [0, 1, 0], atol=1e-12)


def test_quat_to_matrix_180_about_x_by_hand():
    np.testing.assert_allclose(quat_to_matrix([1, 0, 0, 0]), np.diag([1, -1, -1]), atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_matrix_round_trip_and_product(seed):
    rng = np.random.default_rng(seed)
    a, b = normalize(rng.normal(size=4)), normalize(rng.normal(size=4))
    np.testing.assert_allclose(matrix_to_quat(quat_to_matrix(a)), a, atol=1e-9)
    np.testing.assert_allclose(quat_to_matrix(quat_mul(a, b)), quat_to_matrix(a) @ quat_to_matrix(b), atol=1e-9)
    np.testing.assert_allclose(quat_to_matrix(quat_conj(a)), quat_to_matrix(a).T, atol=1e-9)


def test_matrix_to_quat_handles_180_degree_branches():
    for axis in np.eye(3):
        q = axis_angle_to_quat(axis, math.pi)
        np.testing.assert_allclose(quat_to_matrix(matrix_to_quat(quat_to_matrix(q))), quat_to_matrix(q), atol=1e-9)


def test_normalize_canonical_sign_and_rejects_zero_and_nan():
    np.testing.assert_allclose(normalize([0, 0, 0, -2]), [0, 0, 0, 1])
    for bad in ([0, 0, 0, 0], [math.nan, 0, 0, 1], [math.inf, 0, 0, 1]):
        with pytest.raises(ValueError):
            normalize(bad)


def test_angle_between_and_slerp_by_hand():
    a = np.array([0, 0, 0, 1.0])
    b = axis_angle_to_quat([0, 0, 1], math.radians(90))
    assert angle_between(a, b) == pytest.approx(math.pi / 2)
    assert angle_between(a, -b) == pytest.approx(math.pi / 2)  # q and -q are the same rotation
    mid = slerp(a, b, 0.5)
    np.testing.assert_allclose(mid, axis_angle_to_quat([0, 0, 1], math.radians(45)), atol=1e-12)
    assert angle_between(a, axis_angle_to_quat([1, 0, 0], 1e-6)) == pytest.approx(1e-6, rel=1e-6)
    np.testing.assert_allclose(rot_z(math.pi / 2) @ [1, 0, 0], [0, 1, 0], atol=1e-12)


# ---- the scalar (*_t) variants the control tick uses --------------------------------------------
def _np_unit(q):
    q = np.asarray(q, dtype=float)
    q = q / np.linalg.norm(q)
    return -q if q[3] < 0 else q


def _np_mul(a, b):
    """Hamilton product from the matrix form (numpy), the reference for quat_mul_t."""
    ax, ay, az, aw = a
    left = np.array([[aw, -az, ay, ax], [az, aw, -ax, ay], [-ay, ax, aw, az], [-ax, -ay, -az, aw]])
    return left @ np.asarray(b, dtype=float)


def _np_matrix(q):
    x, y, z, w = _np_unit(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _random_quats(rng, n):
    return [rng.normal(size=4) * rng.uniform(0.5, 2.0) for _ in range(n)]


def test_scalar_variants_equal_the_numpy_versions_on_random_inputs():
    rng = np.random.default_rng(7)
    m = rot_z(0.4) @ np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ml, mt = m.tolist(), m.T.tolist()
    qs = _random_quats(rng, 400)
    for a, b in itertools.pairwise(qs):
        al, bl = a.tolist(), b.tolist()
        # exactly what the array functions give (the tick's numbers did not change) ...
        assert rotations.unit_t(al) == tuple(normalize(a).tolist())
        assert rotations.quat_mul_t(al, bl) == tuple(quat_mul(a, b).tolist())
        assert rotations.angle_between_t(al, bl) == angle_between(a, b)
        t = float(rng.uniform())
        assert rotations.slerp_t(al, bl, t) == tuple(slerp(a, b, t).tolist())
        assert rotations.conjugate_rotation_t(ml, mt, al) == rotations.conjugate_rotation(m, a)
        r = rotations.conjugate_rotation(m, b)
        assert rotations.rotate_then_t(r, al) == tuple(rotations.rotate_then(r, a).tolist())
        # ... and what plain numpy linear algebra gives
        np.testing.assert_allclose(rotations.quat_mul_t(al, bl), _np_mul(a, b), rtol=0, atol=1e-12)
        np.testing.assert_allclose(rotations.unit_t(al), _np_unit(a), rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            rotations.conjugate_rotation_t(ml, mt, al), m @ _np_matrix(a) @ m.T, rtol=0, atol=1e-12
        )
        np.testing.assert_allclose(
            _np_matrix(rotations.rotate_then_t(r, al)), np.asarray(r) @ _np_matrix(a), rtol=0, atol=1e-12
        )
        rel = _np_mul(_np_unit(a) * [-1, -1, -1, 1], _np_unit(b))
        assert rotations.angle_between_t(al, bl) == pytest.approx(
            2 * math.atan2(np.linalg.norm(rel[:3]), abs(rel[3])), abs=1e-12
        )


def test_scalar_variants_refuse_what_the_array_versions_refuse():
    for bad in ([0.0, 0.0, 0.0, 0.0], [math.nan, 0.0, 0.0, 1.0], [math.inf, 0.0, 0.0, 1.0]):
        with pytest.raises(ValueError):
            rotations.unit_t(bad)
        with pytest.raises(ValueError):
            rotations.angle_between_t(bad, [0.0, 0.0, 0.0, 1.0])
        with pytest.raises(ValueError):
            rotations.slerp_t([0.0, 0.0, 0.0, 1.0], bad, 0.5)

"""Quaternion helpers against hand-computed rotations."""
import math

import numpy as np
import pytest

from piper_recorder.teleop.rotations import (angle_between, axis_angle_to_quat, matrix_to_quat, normalize,
                                             quat_conj, quat_mul, quat_to_matrix, rot_z, slerp)

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

"""FK equals piper_sdk's own FK; the Euler convention; DLS IK convergence and limits."""

from __future__ import annotations

import numpy as np
import pytest
from piper_sdk.kinematics.piper_fk import C_PiperForwardKinematics

from piper_recorder.piper import kinematics as kin

RNG = np.random.default_rng(1234)


def random_q(n: int) -> np.ndarray:
    return RNG.uniform(kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX, size=(n, 6))


def test_fk_matches_sdk_calfk():
    sdk = C_PiperForwardKinematics(dh_is_offset=0x01)
    for q in random_q(200):
        t = kin.fk(q)
        ours = np.r_[t[:3, 3] * 1000.0, np.degrees(kin.matrix_to_euler(t[:3, :3]))]
        theirs = np.array(sdk.CalFK(list(q))[-1])
        assert np.allclose(ours[:3], theirs[:3], atol=1e-6)
        # the same Euler branch as the SDK, compared modulo 360
        d = (ours[3:] - theirs[3:] + 180.0) % 360.0 - 180.0
        assert np.allclose(d, 0.0, atol=1e-6)


def test_zero_pose_is_sdk_init_pose():
    t = kin.fk(np.zeros(6))
    assert np.allclose(t[:3, 3] * 1000.0, [56.128, 0.0, 213.266], atol=1e-2)
    assert np.allclose(np.degrees(kin.matrix_to_euler(t[:3, :3])), [0.0, 85.0, 0.0], atol=1e-6)


def test_euler_convention_is_extrinsic_xyz():
    rx, ry, rz = 0.3, -0.4, 1.1
    cx, sx, cy, sy, cz, sz = np.cos(rx), np.sin(rx), np.cos(ry), np.sin(ry), np.cos(rz), np.sin(rz)
    rot_x = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    rot_y = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rot_z = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    expected = rot_z @ rot_y @ rot_x  # roll about base x first, then pitch about y, then yaw about z
    assert np.allclose(kin.euler_to_matrix(rx, ry, rz), expected)
    assert np.allclose(kin.matrix_to_euler(expected), [rx, ry, rz])
    # and it is the convention of the SDK's FK output: rebuild its flange rotation from its rx, ry, rz
    q = np.array([0.4, 1.1, -0.8, 0.3, -0.6, 1.2])
    _x, _y, _z, r, p, w = C_PiperForwardKinematics(0x01).CalFK(list(q))[-1]
    assert np.allclose(kin.euler_to_matrix(*np.radians([r, p, w])), kin.fk(q)[:3, :3], atol=1e-9)


def test_quaternion_round_trip():
    for q in random_q(50):
        r = kin.fk(q)[:3, :3]
        quat = kin.matrix_to_quat(r)
        assert quat[3] >= 0 and abs(np.linalg.norm(quat) - 1) < 1e-12
        assert np.allclose(kin.quat_to_matrix(quat), r, atol=1e-12)


def test_jacobian_matches_finite_differences():
    q = np.array([0.3, 1.0, -1.2, 0.4, 0.6, -0.5])
    jac, _ = kin.jacobian(q)
    eps = 1e-7
    for i in range(6):
        dq = np.zeros(6)
        dq[i] = eps
        t0, t1 = kin.fk(q), kin.fk(q + dq)
        assert np.allclose((t1[:3, 3] - t0[:3, 3]) / eps, jac[:3, i], atol=1e-5)
        assert np.allclose(kin.rotation_error(t1[:3, :3], t0[:3, :3]) / eps, jac[3:, i], atol=1e-5)


@pytest.mark.parametrize("spread", [0.05, 0.3])
def test_ik_converges_from_nearby_seed(spread):
    lo, hi = kin.SDK_JOINT_MIN + 0.2, kin.SDK_JOINT_MAX - 0.2
    ok = 0
    for q_true in RNG.uniform(lo, hi, size=(40, 6)):
        q_true[4] = np.sign(q_true[4] or 1) * max(abs(q_true[4]), 0.3)  # away from the wrist singularity
        seed = q_true + RNG.uniform(-spread, spread, 6)
        res = kin.solve_ik(kin.fk(q_true), seed)
        if res.ok(1e-4, 1e-3):
            ok += 1
            assert np.allclose(kin.fk(res.q), kin.fk(q_true), atol=1e-3)
            assert np.all(res.q >= kin.SDK_JOINT_MIN) and np.all(res.q <= kin.SDK_JOINT_MAX)
    assert ok >= 38, f"IK converged for only {ok}/40 targets"


def test_ik_reports_unreachable_and_respects_limits():
    far = np.eye(4)
    far[:3, 3] = [1.5, 0.0, 0.3]  # beyond the arm's ~0.6 m reach
    res = kin.solve_ik(far, np.array([0.0, 1.0, -1.0, 0.0, 0.5, 0.0]))
    assert not res.ok()
    assert np.all(res.q >= kin.SDK_JOINT_MIN) and np.all(res.q <= kin.SDK_JOINT_MAX)

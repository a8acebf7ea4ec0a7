"""The scalar kinematics (``chain``, the Jacobian, the rotation helpers, ``solve_ik``) against their numpy
formulation: the 4x4 modified-DH product per link, numpy's rotation matrices and the DLS iteration on arrays
(what ``kinematics`` computed before it went scalar), on random joints and targets.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from piper_recorder.piper import kinematics as kin

RNG = np.random.default_rng(7)


def ref_frames(q: np.ndarray) -> np.ndarray:
    out, t = np.empty((6, 4, 4)), np.eye(4)
    for i in range(6):
        ca, sa = math.cos(kin.DH_ALPHA[i]), math.sin(kin.DH_ALPHA[i])
        th = q[i] + kin.DH_THETA_OFFSET[i]
        ct, st = math.cos(th), math.sin(th)
        d = kin.DH_D[i]
        link = np.array(
            [
                [ct, -st, 0.0, kin.DH_A[i]],
                [st * ca, ct * ca, -sa, -sa * d],
                [st * sa, ct * sa, ca, ca * d],
                [0.0, 0.0, 0.0, 1.0],
            ]
        )
        t = out[i] = t @ link
    return out


def ref_jacobian(q: np.ndarray) -> np.ndarray:
    f = ref_frames(q)
    return np.vstack([np.cross(f[:, :3, 2], f[-1, :3, 3] - f[:, :3, 3]).T, f[:, :3, 2].T])


def ref_rotation_error(r_target: np.ndarray, r: np.ndarray) -> np.ndarray:
    re = r_target @ r.T
    angle = math.acos(min(1.0, max(-1.0, (np.trace(re) - 1.0) / 2.0)))
    v = np.array([re[2, 1] - re[1, 2], re[0, 2] - re[2, 0], re[1, 0] - re[0, 1]])
    if angle < 1e-9:
        return 0.5 * v
    return angle / (2.0 * math.sin(angle)) * v


def ref_solve_ik(target: np.ndarray, seed: np.ndarray, max_iter: int) -> kin.IkResult:
    q = np.clip(seed, kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX)
    best = None
    for it in range(max_iter + 1):
        f = ref_frames(q)[-1]
        e = np.r_[target[:3, 3] - f[:3, 3], ref_rotation_error(target[:3, :3], f[:3, :3])]
        pe, re = float(np.linalg.norm(e[:3])), float(np.linalg.norm(e[3:]))
        if best is None or pe + 0.1 * re < best.pos_err + 0.1 * best.rot_err:
            best = kin.IkResult(q, pe, re, it)
        if (pe <= 2e-5 and re <= 2e-4) or it == max_iter:
            break
        jac = ref_jacobian(q)
        dq = jac.T @ np.linalg.solve(jac @ jac.T + 0.02**2 * np.eye(6), e)
        dq *= min(1.0, 0.25 / np.abs(dq).max())
        q = np.clip(q + dq, kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX)
    assert best is not None
    best.iterations = it
    return best


def random_q(n: int, margin: float = 0.0) -> np.ndarray:
    return RNG.uniform(kin.SDK_JOINT_MIN - margin, kin.SDK_JOINT_MAX + margin, size=(n, 6))


def test_fk_and_jacobian_equal_the_matrix_products():
    for q in random_q(500, margin=1.0):
        ref = ref_frames(q)
        assert np.abs(kin.frames_array(q) - ref).max() < 1e-12
        assert np.abs(kin.fk(q) - ref[-1]).max() < 1e-12
        jac, flange = kin.jacobian(q)
        assert np.abs(jac - ref_jacobian(q)).max() < 1e-12 and np.abs(flange - ref[-1]).max() < 1e-12
        frames = kin.chain(q.tolist())
        assert len(frames) == 6 and all(len(f) == 12 for f in frames)
        assert np.abs(kin.frame_matrix(frames[2]) - ref[2]).max() < 1e-12


def test_rotation_helpers_equal_their_matrix_forms():
    for q in random_q(300):
        r = ref_frames(q)[-1, :3, :3]
        rx, ry, rz = kin.matrix_to_euler(r)
        assert np.abs(np.array(kin.euler_rot(rx, ry, rz)).reshape(3, 3) - r).max() < 1e-12
        assert kin.rot_euler(tuple(r.ravel().tolist())) == tuple(kin.matrix_to_euler(r).tolist())
        quat = kin.matrix_to_quat(r)
        assert np.abs(np.array(kin.quat_rot(*(2.0 * quat).tolist())).reshape(3, 3) - r).max() < 1e-12  # normalises
        assert np.abs(np.array(kin.euler_quat(rx, ry, rz)) - quat).max() < 1e-12  # the same sign (w >= 0)
        r2 = ref_frames(q + RNG.normal(0, 0.3, 6))[-1, :3, :3]
        assert np.abs(kin.rotation_error(r2, r) - ref_rotation_error(r2, r)).max() < 1e-12
    # the 180 degree branch still finds the axis
    flip = kin.euler_to_matrix(math.pi, 0.0, 0.0)
    assert np.allclose(np.abs(kin.rotation_error(flip, np.eye(3))), [math.pi, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("spread", [0.02, 0.3])
def test_solve_ik_takes_the_steps_of_the_numpy_iteration(spread):
    for k, q_true in enumerate(random_q(150)):
        target = ref_frames(q_true)[-1]
        if k % 5 == 0:
            target[:3, 3] += RNG.normal(0, 0.2, 3)  # some unreachable
        seed = q_true + RNG.normal(0, spread, 6)
        ours, ref = kin.solve_ik(target, seed, max_iter=40), ref_solve_ik(target, seed, 40)
        assert ours.iterations == ref.iterations and ours.ok(1e-3, 1e-2) == ref.ok(1e-3, 1e-2)
        assert isinstance(ours.q, np.ndarray) and ours.q.shape == (6,)
        assert np.abs(ours.q - ref.q).max() < 1e-7, k
        assert abs(ours.pos_err - ref.pos_err) < 1e-9 and abs(ours.rot_err - ref.rot_err) < 1e-9


def test_solve_ik_never_reports_a_nan_target_or_seed_as_solved():
    good = ref_frames(np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0]))[-1]
    bad = good.copy()
    bad[0, 3] = math.nan
    seed = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    assert not kin.solve_ik(bad, seed).ok(1e-3, 1e-2)
    assert not kin.solve_ik(good, np.r_[seed[:5], math.nan]).ok(1e-3, 1e-2)
    # an infinite joint angle gives NaN frames from that joint on (as numpy's cos/sin), not an exception
    f = kin.frames_array(np.r_[seed[:3], math.inf, seed[4:]])
    assert np.isfinite(f[:3]).all() and np.isnan(f[3:, :3]).any(axis=(1, 2)).all()


def test_dls_step_equals_the_numpy_solve():
    lam2 = 0.02**2
    for k in range(300):
        jac = RNG.normal(size=(6, 6))
        if k % 3 == 0:  # a singular Jacobian (wrist-singular poses): the damping keeps it solvable
            jac[5] = jac[4]
        e = RNG.normal(size=6)
        ref = jac.T @ np.linalg.solve(jac @ jac.T + lam2 * np.eye(6), e)
        got = np.array(kin._dls_step(jac.tolist(), e.tolist(), lam2))
        assert np.abs(got - ref).max() < 1e-9 * max(1.0, np.abs(ref).max()), k
    assert all(math.isnan(v) for v in kin._dls_step(np.full((6, 6), math.nan).tolist(), [1.0] * 6, lam2))


def test_limits_check_builds_the_normalised_target_and_refuses_what_it_must():
    from piper_recorder.piper.limits import Rejection, TargetLimits

    lim = TargetLimits(
        kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX, np.array([-0.05, -0.45, 0.0]), np.array([0.65, 0.45, 0.65])
    )
    ready = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    t = ref_frames(ready + 0.02)[-1]
    quat = kin.matrix_to_quat(t[:3, :3]) * 1.02  # 2 % off unit length: accepted, normalised
    res = lim.check(t[:3, 3], quat, ready)
    assert not isinstance(res, Rejection)
    pose, q = res
    assert np.abs(pose - kin.pose_to_matrix(t[:3, 3], quat / np.linalg.norm(quat))).max() < 1e-15
    assert np.abs(ref_frames(q)[-1][:3, 3] - t[:3, 3]).max() < 1e-3
    for pos, qu, reason in (
        ([math.nan, 0.0, 0.3], quat, "non_finite"),
        (t[:3, 3], quat * 1.2, "bad_quaternion"),
        ([0.9, 0.0, 0.3], quat, "out_of_workspace"),
        ([0.6, 0.4, 0.6], quat, "unreachable"),
    ):
        r = lim.check(np.asarray(pos), qu, ready)
        assert isinstance(r, Rejection) and r.reason == reason, (reason, r)


def test_limits_check_builds_a_fallback_seed_only_after_a_failed_solve():
    """The fallback seeds (the controller's: a feedback snapshot, home) cost a snapshot each: none is built for
    a target the last solution reaches, and they are tried in order until one reaches it.
    """
    from piper_recorder.piper.limits import Rejection, TargetLimits

    lim = TargetLimits(
        kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX, np.array([-0.05, -0.45, 0.0]), np.array([0.65, 0.45, 0.65])
    )
    ready = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    built: list[str] = []

    def seeds(*named: tuple[str, np.ndarray]):
        for name, q in named:
            built.append(name)
            yield q

    t = kin.fk(ready + 0.02)
    quat = kin.matrix_to_quat(t[:3, :3])
    assert not isinstance(lim.check(t[:3, 3], quat, ready, seeds(("measured", ready), ("home", ready))), Rejection)
    assert built == []
    # a seed on the other side of joint 1's range: no solution near it, none from the first fallback either
    far = np.array([2.5, 0.3, -0.3, 1.5, -1.0, 2.0])
    res = lim.check(t[:3, 3], quat, far, seeds(("measured", far), ("home", ready), ("unused", ready)))
    assert not isinstance(res, Rejection) and np.allclose(kin.fk(res[1]), t, atol=1e-6)
    assert built == ["measured", "home"]


def _past_joint5_limit() -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Joint 5's upper limit 0.1 rad above the ready pose's, and a target stream from ready that would turn
    joint 5 0.15 rad past it (moving joints 1 and 3 too) and back: (q_max, ready, joint 5 offsets).
    """
    q_max = kin.SDK_JOINT_MAX.copy()
    q_max[4] = 0.6
    ready = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])
    return q_max, ready, list(np.r_[np.linspace(0.0, 0.25, 26), np.linspace(0.25, 0.0, 26)])


def test_a_target_just_past_a_joint_limit_moves_the_arm_along_the_limit_and_back_without_a_jump():
    from piper_recorder.piper.limits import Rejection, TargetLimits

    q_max, ready, offsets = _past_joint5_limit()
    lim = TargetLimits(kin.SDK_JOINT_MIN, q_max, np.array([-0.05, -0.45, 0.0]), np.array([0.65, 0.45, 0.65]))
    seed, prev, past = ready, None, 0
    for d in offsets:
        t = kin.fk(ready + np.array([0.02 * d, 0.0, 0.1 * d, 0.0, d, 0.0]))
        res = lim.check(t[:3, 3], kin.matrix_to_quat(t[:3, :3]), seed)
        assert not isinstance(res, Rejection), (d, res)
        pose, q = res
        assert q[4] <= 0.6
        err = np.linalg.norm(pose[:3, 3] - t[:3, 3])
        if d <= 0.1 + 1e-9:  # within the limit: the target itself
            assert np.allclose(pose, t, atol=1e-9) and np.allclose(
                q, ready + [0.02 * d, 0, 0.1 * d, 0, d, 0], atol=1e-6
            )
        elif err > 1e-3:  # past it: joint 5 at its limit, the others as near the target as they reach
            past += 1
            assert q[4] == 0.6 and err < 5e-3 and np.allclose(pose, kin.fk(q), atol=1e-12), (d, q, err)
        if prev is not None and d != prev[0]:
            # the target moves 1.2 mm a step: so does the arm, never frozen and never jumping
            step = np.linalg.norm(pose[:3, 3] - prev[1][:3, 3])
            assert 2e-4 < step < 3e-3, (d, step)
        seed, prev = q, (d, pose)
    assert past >= 20 and lim.at_joint_limit >= past


@pytest.mark.parametrize("slide", [True, False])
def test_a_target_far_past_a_joint_limit_or_any_past_it_without_sliding_is_refused(slide):
    from piper_recorder.piper.limits import Rejection, TargetLimits

    q_max, ready, _ = _past_joint5_limit()
    tol = {} if slide else {"slide_pos_tol": 0.0, "slide_rot_tol": 0.0}
    lim = TargetLimits(kin.SDK_JOINT_MIN, q_max, np.array([-0.05, -0.45, 0.0]), np.array([0.65, 0.45, 0.65]), **tol)
    at_limit = ready + np.array([0.0, 0.0, 0.0, 0.0, 0.1, 0.0])
    for extra, refused in ((0.05, not slide), (0.8, True)):
        t = kin.fk(at_limit + np.array([0.0, 0.0, 0.0, 0.0, extra, 0.0]))
        res = lim.check(t[:3, 3], kin.matrix_to_quat(t[:3, :3]), at_limit)
        assert isinstance(res, Rejection) == refused, (extra, res)
        if refused:
            assert res.reason == "unreachable"
    assert lim.at_joint_limit == (1 if slide else 0)

"""``kinematics.closed_form_ik`` and ``kinematics.ik``: the exact solutions of the Piper's spherical-wrist
geometry, checked against the forward kinematics (itself checked against piper_sdk's ``CalFK``), and ``ik``
giving the damped iteration's answer wherever the closed form does not apply.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from piper_recorder.piper import kinematics as kin

RNG = np.random.default_rng(20261205)
LO, HI = kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX
READY = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])


def residual(target: np.ndarray, q: np.ndarray | list[float]) -> tuple[float, float]:
    t = kin.fk(np.asarray(q, dtype=float))
    return (
        float(np.linalg.norm(t[:3, 3] - target[:3, 3])),
        float(np.linalg.norm(kin.rotation_error(target[:3, :3], t[:3, :3]))),
    )


def test_every_joint_configuration_is_found_again_from_its_pose():
    """For poses made by FK from random joints, the closed form finds an exact solution within the limits, and
    the one it picks is no farther from the seed than the joints the pose was made from.
    """
    for _ in range(3000):
        q = RNG.uniform(LO, HI)
        seed = q + RNG.normal(0.0, 0.03, 6)
        target = kin.fk(q)
        sol = kin.closed_form_ik(target, seed)
        assert sol is not None, q
        pe, re = residual(target, sol)
        assert pe < 1e-12 and re < 1e-9, (q, sol, pe, re)
        assert np.all(np.array(sol) >= LO) and np.all(np.array(sol) <= HI)
        assert np.max(np.abs(np.array(sol) - seed)) <= np.max(np.abs(q - seed)) + 1e-9


def test_it_picks_the_branch_the_seed_is_on():
    """The Piper has up to 8 solutions (shoulder x elbow x wrist flip): seeded on any one of them, that one comes back."""
    found = 0
    for _ in range(40):
        q = RNG.uniform(LO, HI)
        target = kin.fk(q)
        sols = {tuple(np.round(s, 6)) for s in all_solutions(target)}
        assert tuple(np.round(q, 6)) in sols
        for s in sols:
            back = kin.closed_form_ik(target, np.array(s))
            assert back is not None and np.allclose(back, s, atol=1e-6), (s, back)
        found += len(sols) > 1
    assert found > 5  # the limits leave a second branch for a share of poses


def all_solutions(target: np.ndarray) -> list[list[float]]:
    """Every exact solution within the limits, found by seeding on a grid and keeping the distinct exact answers."""
    out: list[list[float]] = []
    for seed in np.array(np.meshgrid(*[np.linspace(a, b, 3) for a, b in zip(LO, HI)])).reshape(6, -1).T:
        s = kin.closed_form_ik(target, seed)
        if s is not None and not any(np.allclose(s, o, atol=1e-6) for o in out):
            out.append(s)
    return out


def test_at_the_wrist_singularity_joints_4_and_6_share_the_turn():
    """With joint 5 at 0 only q4 + q6 is set by the pose: each takes half the turn from the seed (the minimum-norm
    step a damped iteration takes), or what its limit leaves.
    """
    straight = shared = 0
    for _ in range(300):
        q = RNG.uniform(LO, HI)
        q[4] = 0.0
        target = kin.fk(q)
        seed = q + RNG.normal(0.0, 0.03, 6)
        seed[3] = q[3] + RNG.uniform(-0.4, 0.4)
        sol = kin.closed_form_ik(target, seed)
        assert sol is not None
        pe, re = residual(target, sol)
        assert pe < 1e-12 and re < 1e-9
        assert LO[3] <= sol[3] <= HI[3] and LO[5] <= sol[5] <= HI[5]
        if abs(sol[4]) > 1e-9:  # another branch (the elbow near its fold) lies nearer the seed
            continue
        straight += 1
        assert sol[3] + sol[5] == pytest.approx(q[3] + q[5], abs=1e-9)
        if LO[3] < sol[3] < HI[3] and LO[5] < sol[5] < HI[5]:
            shared += 1
            assert sol[3] - seed[3] == pytest.approx(sol[5] - seed[5], abs=1e-9)
    assert straight > 250 and shared > 200


def test_no_solution_out_of_reach_past_a_limit_far_from_the_seed_or_for_a_nan():
    far = np.eye(4)
    far[:3, 3] = [1.5, 0.0, 0.3]  # beyond the arm's ~0.6 m reach
    assert kin.closed_form_ik(far, READY) is None
    q = READY.copy()
    q[4] = 1.0
    target = kin.fk(q)
    assert kin.closed_form_ik(target, READY, LO, np.r_[HI[:4], 0.9, HI[5]]) is None  # q5 = 1.0 past its limit
    assert kin.closed_form_ik(target, READY, max_jump=0.4) is None  # q5 0.5 from the seed
    assert np.allclose(kin.closed_form_ik(target, READY, max_jump=0.6), q, atol=1e-9)
    bad = target.copy()
    bad[0, 3] = math.nan
    assert kin.closed_form_ik(bad, READY) is None
    assert kin.closed_form_ik(target, np.r_[READY[:5], math.nan]) is None


def test_ik_is_the_closed_form_near_the_seed_and_the_damped_iteration_elsewhere():
    q = READY + 0.05
    target = kin.fk(q)
    res = kin.ik(target, READY)
    assert res.closed_form and res.ok(1e-12, 1e-9) and np.allclose(res.q, q, atol=1e-9)
    # a jump of 0.6 rad in joint 1: no exact solution within max_jump of the seed, so solve_ik's answer
    jumped = READY.copy()
    jumped[0] += 0.6
    target = kin.fk(jumped)
    res, dls = kin.ik(target, READY, max_iter=60), kin.solve_ik(target, READY, max_iter=60)
    assert not res.closed_form
    assert np.array_equal(res.q, dls.q) and res.iterations == dls.iterations and res.ok() == dls.ok()
    # out of reach: the damped iteration's best effort, reported unreachable as before
    far = np.eye(4)
    far[:3, 3] = [1.5, 0.0, 0.3]
    res, dls = kin.ik(far, READY), kin.solve_ik(far, READY)
    assert not res.closed_form and not res.ok() and np.array_equal(res.q, dls.q)
    nan = kin.fk(READY)
    nan[2, 3] = math.nan
    assert not kin.ik(nan, READY).ok(1e-3, 1e-2)


@pytest.mark.parametrize("speed", [1.0, 3.0])
def test_a_streamed_target_gets_the_damped_iterations_solutions(speed):
    """Along a teleop-like stream (figure-eight with a wrist swing, 100 Hz) every target is solved in closed form,
    on the branch the damped iteration follows, to within that iteration's tolerance.
    """
    t0, q_cf, q_dls = kin.fk(READY), READY, READY
    for k in range(600):
        t = k * 0.01 * speed
        target = t0.copy()
        target[:3, 3] += [0.05 * math.sin(t), 0.08 * math.sin(0.7 * t), 0.04 * math.sin(1.3 * t)]
        target[:3, :3] = t0[:3, :3] @ kin.euler_to_matrix(
            0.2 * math.sin(0.5 * t), 0.1 * math.sin(0.9 * t), 0.2 * math.sin(1.1 * t)
        )
        cf, dls = kin.ik(target, q_cf, max_iter=40), kin.solve_ik(target, q_dls, max_iter=40)
        assert cf.closed_form and cf.ok(1e-12, 1e-9), k
        assert dls.ok(2e-5, 2e-4), k
        assert np.max(np.abs(cf.q - dls.q)) < 2e-3, k
        q_cf, q_dls = cf.q, dls.q

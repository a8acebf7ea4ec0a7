"""``kinematics.SeedPredictor``: the IK's warm start along a streamed target (the controller's reachability
check and the emulator's firmware IK use it). It must only move the start: the same solutions, in fewer
steps, and no prediction where the stream is not continuous."""
from __future__ import annotations

import math

import numpy as np

from piper_recorder.piper import kinematics as kin

READY = np.array([0.0, 0.9, -0.9, 0.0, 0.5, 0.0])


def figure_eight(n: int, speed: float = 1.0) -> list[np.ndarray]:
    """Flange targets 10 ms apart: a figure-eight with a wrist swing around the ready pose (teleop-like)."""
    t0, out = kin.fk(READY), []
    for k in range(n):
        t = k * 0.01 * speed
        target = t0.copy()
        target[:3, 3] += [0.05 * math.sin(t), 0.08 * math.sin(0.7 * t), 0.04 * math.sin(1.3 * t)]
        target[:3, :3] = t0[:3, :3] @ kin.euler_to_matrix(0.2 * math.sin(0.5 * t), 0.1 * math.sin(0.9 * t),
                                                           0.2 * math.sin(1.1 * t))
        out.append(target)
    return out


def stream(targets: list[np.ndarray], predict: bool) -> tuple[list[np.ndarray], list[int]]:
    pred, q, sols, steps = kin.SeedPredictor(), READY, [], []
    for k, target in enumerate(targets):
        now = k * 0.01
        seed = pred.seed(q, now) if predict else q
        res = kin.solve_ik(target, seed, max_iter=40)
        assert res.ok(2e-5, 2e-4), k
        q = res.q
        pred.add(q, now)
        sols.append(q)
        steps.append(res.iterations)
    return sols, steps


def test_a_predicted_seed_reaches_the_same_solutions_in_fewer_steps():
    for speed in (1.0, 3.0):
        targets = figure_eight(600, speed)
        plain, plain_steps = stream(targets, predict=False)
        predicted, predicted_steps = stream(targets, predict=True)
        # the same branch, the same joints to within what the tolerance allows (20 um / 0.2 mrad at the flange)
        worst = max(float(np.abs(a - b).max()) for a, b in zip(plain, predicted))
        assert worst < 2e-3, worst
        assert sum(predicted_steps) < 0.7 * sum(plain_steps), (speed, sum(predicted_steps), sum(plain_steps))


def test_no_prediction_unless_the_stream_is_continuous():
    q0, q1 = READY, READY + 0.01
    pred = kin.SeedPredictor(max_gap_s=0.05, max_step=0.1)
    assert pred.seed(q0, 0.0) is q0                     # nothing recorded yet
    pred.add(q0, 0.0)
    assert pred.seed(q0, 0.01) is q0                    # one solution: no step to go on
    pred.add(q1, 0.01)
    s = pred.seed(q1, 0.02)                             # moved on by the last step, scaled to the time since
    assert np.allclose(s, q1 + 0.01, atol=1e-15)
    assert np.allclose(pred.seed(q1, 0.015), q1 + 0.005, atol=1e-15)
    assert np.allclose(pred.seed(q1, 0.06), q1 + 0.015, atol=1e-15)   # at most 1.5 steps ahead
    assert pred.seed(q1, 0.07) is q1                    # the stream paused
    other = READY - 0.2
    assert pred.seed(other, 0.02) is other              # re-seeded from elsewhere (a hold, the measured joints)
    jump = q1 + 0.3
    pred.add(jump, 0.02)                                # a jump (> max_step): no step recorded
    assert pred.seed(jump, 0.03) is jump
    late = jump + 0.01
    pred.add(late, 0.1)                                 # after a gap: no step recorded either
    assert pred.seed(late, 0.11) is late

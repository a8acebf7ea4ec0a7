"""One-euro filters: exact first steps by hand, convergence, speed adaptation, orientation."""

import math

import numpy as np
import pytest

from piper_recorder.teleop.filters import FilterConfig, OneEuroOrientation, OneEuroPosition
from piper_recorder.teleop.rotations import angle_between, axis_angle_to_quat


def test_position_first_step_by_hand():
    f = OneEuroPosition(FilterConfig(min_cutoff=1.0, beta=0.0, d_cutoff=1.0))
    np.testing.assert_allclose(f(np.zeros(3), 0.01), 0.0)
    tau = 1 / (2 * math.pi * 1.0)
    a = 1 / (1 + tau / 0.01)
    np.testing.assert_allclose(f(np.array([1.0, 0, 0]), 0.01), [a, 0, 0])


def test_position_converges_and_beta_reduces_lag():
    slow = OneEuroPosition(FilterConfig(min_cutoff=1.2, beta=0.0))
    fast = OneEuroPosition(FilterConfig(min_cutoff=1.2, beta=5.0))
    for f in (slow, fast):
        f.reset(np.zeros(3))
    xs = [np.array([0.5 * k * 0.01, 0, 0]) for k in range(1, 101)]  # 0.5 m/s ramp
    for x in xs:
        ys, yf = slow(x, 0.01), fast(x, 0.01)
    assert abs(xs[-1][0] - yf[0]) < abs(xs[-1][0] - ys[0])
    for _ in range(500):
        ys = slow(np.array([1.0, 2.0, 3.0]), 0.01)
    np.testing.assert_allclose(ys, [1, 2, 3], atol=1e-6)


def test_disabled_filter_passes_through():
    f = OneEuroPosition(FilterConfig(enabled=False))
    f(np.zeros(3), 0.01)
    np.testing.assert_allclose(f(np.ones(3), 0.01), np.ones(3))


def test_orientation_first_step_by_hand_and_convergence():
    f = OneEuroOrientation(FilterConfig(min_cutoff=1.0, beta=0.0))
    f.reset(np.array([0, 0, 0, 1.0]))
    target = axis_angle_to_quat([0, 0, 1], 0.5)
    a = 1 / (1 + (1 / (2 * math.pi)) / 0.01)
    assert angle_between(f(target, 0.01), [0, 0, 0, 1.0]) == pytest.approx(0.5 * a, rel=1e-9)
    for _ in range(600):
        q = f(target, 0.01)
    assert angle_between(q, target) < 1e-6


def test_config_validated():
    with pytest.raises(ValueError):
        FilterConfig(min_cutoff=0.0).validate()


def test_step_equals_the_array_call():
    """``step`` (floats, the control tick's path) gives exactly what ``__call__`` (arrays) gives."""
    rng = np.random.default_rng(11)
    pa, pb = OneEuroPosition(FilterConfig()), OneEuroPosition(FilterConfig())
    qa, qb = OneEuroOrientation(FilterConfig()), OneEuroOrientation(FilterConfig())
    x, q = np.array([0.3, 0.0, 0.2]), np.array([0.0, 0.0, 0.0, 1.0])
    for i in range(300):
        dt = 0.0 if i % 50 == 7 else float(rng.uniform(0.002, 0.05))
        x = x + rng.normal(scale=0.01, size=3)
        q = axis_angle_to_quat(rng.normal(size=3), float(rng.uniform(0, 0.3)))
        assert pb.step(x.tolist(), dt) == pa(x, dt).tolist()
        assert qb.step(q.tolist(), dt) == tuple(qa(q, dt).tolist())

"""Workspace clamp, tether, per-tick speed caps and the final hard check."""

import math

import numpy as np
import pytest

from piper_recorder.teleop.limits import Limits, LimitsConfig, LimitViolation
from piper_recorder.teleop.rotations import angle_between, axis_angle_to_quat

I = np.array([0, 0, 0, 1.0])  # noqa: E741 - the identity quaternion
DT = 0.01


def test_workspace_clamp_by_hand():
    lim = Limits(LimitsConfig())
    np.testing.assert_allclose(lim.clamp_workspace([1.0, -1.0, 0.0]), [0.55, -0.35, 0.03])
    np.testing.assert_allclose(lim.clamp_workspace([0.3, 0.1, 0.2]), [0.3, 0.1, 0.2])
    assert lim.inside([0.05, 0.35, 0.5]) and not lim.inside([0.049, 0, 0.2])


def test_tether_by_hand():
    lim = Limits(LimitsConfig(tether_m=0.12))
    np.testing.assert_allclose(lim.tether([0.5, 0, 0.2], np.array([0.3, 0, 0.2])), [0.42, 0, 0.2])
    np.testing.assert_allclose(lim.tether([0.35, 0, 0.2], np.array([0.3, 0, 0.2])), [0.35, 0, 0.2])


def test_linear_and_angular_caps_by_hand():
    lim = Limits(LimitsConfig(max_linear_speed=0.8, max_angular_speed=2.5))
    p, q = lim.cap_step(np.array([0.3, 0, 0.2]), I, np.array([0.4, 0, 0.2]), axis_angle_to_quat([0, 0, 1], 1.0), DT)
    np.testing.assert_allclose(p, [0.308, 0, 0.2])  # 0.8 m/s * 10 ms = 8 mm
    assert angle_between(I, q) == pytest.approx(0.025)  # 2.5 rad/s * 10 ms


def test_apply_keeps_every_step_inside_box_and_caps():
    rng = np.random.default_rng(0)
    lim = Limits(LimitsConfig())
    prev_p, prev_q = np.array([0.3, 0.0, 0.2]), I
    for _ in range(2000):
        raw_p = rng.uniform(-1, 1, 3)
        raw_q = axis_angle_to_quat(rng.normal(size=3), rng.uniform(0, math.pi))
        measured = rng.uniform(-0.5, 0.8, 3)
        p, q = lim.apply(raw_p, raw_q, prev_p, prev_q, measured, DT)
        lim.check(p, q, prev_p, prev_q, DT)  # raises on any violation
        prev_p, prev_q = p, q


@pytest.mark.parametrize(
    "p,q",
    [
        ([math.nan, 0, 0.2], I),
        ([0.3, 0, 0.2], [0, 0, 0, math.inf]),
        ([0.6, 0, 0.2], I),
        ([0.3, 0, 0.2], [0, 0, 0, 2.0]),
        ([0.32, 0, 0.2], I),
        ([0.3, 0, 0.2], axis_angle_to_quat([1, 0, 0], 0.1)),
    ],
)
def test_check_rejects(p, q):
    with pytest.raises(LimitViolation):
        Limits(LimitsConfig()).check(np.array(p, float), np.array(q, float), np.array([0.3, 0, 0.2]), I, DT)


def test_config_validated():
    with pytest.raises(ValueError):
        LimitsConfig(workspace_min=[0.6, -0.35, 0.03]).validate()
    with pytest.raises(ValueError):
        LimitsConfig(max_linear_speed=0).validate()


def test_apply_names_the_limits_that_acted():
    lim = Limits(LimitsConfig(max_linear_speed=0.8, max_angular_speed=2.5, tether_m=0.12))
    prev, arm = np.array([0.3, 0, 0.2]), np.array([0.3, 0, 0.2])
    lim.apply(np.array([0.301, 0, 0.2]), I, prev, I, arm, DT)
    assert lim.acted == ()
    lim.apply(np.array([0.3, 0, 0.9]), I, prev, I, arm, DT)  # 70 cm up: tether, then the speed cap
    assert lim.acted == ("tether", "linear_speed")
    lim.apply(np.array([0.3, 0, 0.55]), I, prev, I, np.array([0.3, 0, 0.5]), DT)  # above the box, near the arm
    assert "workspace" in lim.acted and "tether" not in lim.acted
    lim.apply(prev, axis_angle_to_quat([0, 0, 1], 1.0), prev, I, arm, DT)
    assert lim.acted == ("angular_speed",)


@pytest.mark.parametrize("tether_m", [0.12, 0.0])
def test_scalar_apply_and_check_equal_the_array_versions(tether_m):
    """``apply_t``/``check_t`` (the control tick's path) give exactly ``apply``/``check``'s targets,
    the same ``acted``, and refuse what they refuse.
    """
    lim, ref = Limits(LimitsConfig(tether_m=tether_m)), Limits(LimitsConfig(tether_m=tether_m))
    rng = np.random.default_rng(3)
    prev_p, prev_q = np.array([0.3, 0.0, 0.2]), I
    seen = set()
    for _ in range(500):
        raw_p = prev_p + rng.normal(scale=rng.choice([0.001, 0.05, 0.4]), size=3)
        raw_q = axis_angle_to_quat(rng.normal(size=3), rng.uniform(0, math.pi))
        measured = prev_p + rng.normal(scale=0.05, size=3)
        p, q = ref.apply(raw_p, raw_q, prev_p, prev_q, measured, DT)
        pt, qt = lim.apply_t(raw_p.tolist(), raw_q.tolist(), prev_p.tolist(), prev_q.tolist(), measured.tolist(), DT)
        assert pt == p.tolist() and qt == tuple(q.tolist()) and lim.acted == ref.acted
        seen.update(ref.acted)
        lim.check_t(pt, qt, prev_p.tolist(), prev_q.tolist(), DT)
        prev_p, prev_q = p, q
    assert seen == ({"tether"} if tether_m else set()) | {"workspace", "linear_speed", "angular_speed"}
    for bad_p, bad_q in (
        ([0.3, math.nan, 0.2], I),
        ([0.9, 0.0, 0.2], I),
        ([0.3, 0.0, 0.2], 2 * I),
        ([0.35, 0.0, 0.2], I),
        ([0.3, 0.0, 0.2], axis_angle_to_quat([0, 0, 1], 0.5)),
    ):
        with pytest.raises(LimitViolation) as a:
            lim.check(np.array(bad_p), np.asarray(bad_q), np.array([0.3, 0.0, 0.2]), I, DT)
        with pytest.raises(LimitViolation) as b:
            lim.check_t(list(bad_p), list(np.asarray(bad_q).tolist()), [0.3, 0.0, 0.2], I.tolist(), DT)
        assert str(a.value) == str(b.value)

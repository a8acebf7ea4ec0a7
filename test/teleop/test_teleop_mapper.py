"""TeleopCore end to end on synthetic streams: mapping by hand, no jump on (re-)engage, limits,
watchdog, interlocks, gripper, buttons, and garbage input never producing an output.
"""

import math

import numpy as np
import pytest

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.frames import FrameConfig
from piper_recorder.teleop.limits import Limits, LimitsConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig, TeleopCore
from piper_recorder.teleop.rotations import angle_between, axis_angle_to_quat, quat_mul

from support.teleop_mapper import ARM_P, ARM_Q, DT, HAND_P, I, Rig, exact


def test_engage_target_is_measured_pose_exactly():
    rig = Rig()
    res = rig.engage()
    np.testing.assert_allclose(res.target.p, ARM_P, rtol=0, atol=1e-12)
    assert angle_between(res.target.q, ARM_Q) < 1e-12


def test_position_mapping_by_hand():
    rig = Rig(**exact(pos_scale=0.5))
    rig.engage()
    rig.hand_p = HAND_P + [0.04, 0.02, -0.06]  # 4 cm right, 2 cm up, 6 cm forward (xr -z)
    (res,) = rig.step()
    # robot dx = -xr_dz = 0.06, dy = -xr_dx = -0.04, dz = xr_dy = 0.02, times pos_scale 0.5
    np.testing.assert_allclose(res.target.p, ARM_P + [0.03, -0.02, 0.01], atol=1e-12)


def test_rotation_mapping_by_hand():
    rig = Rig(**exact())
    rig.hand_q = axis_angle_to_quat([1, 0, 0], 0.3)  # an arbitrary latched controller orientation
    rig.engage()
    # controller turns 30 deg about XR +y (up), in the world frame: c.R = Ry(30) c0.R
    rig.hand_q = quat_mul(axis_angle_to_quat([0, 1, 0], math.radians(30)), rig.hand_q)
    (res,) = rig.step()
    expected = quat_mul(axis_angle_to_quat([0, 0, 1], math.radians(30)), ARM_Q)  # robot +z = xr +y
    assert angle_between(res.target.q, expected) < 1e-9
    np.testing.assert_allclose(res.target.p, ARM_P, atol=1e-12)  # rotation alone does not move the flange


def test_yaw_offset_applies_to_mapping():
    rig = Rig(**exact(frame=FrameConfig(yaw_offset_deg=-90.0)))
    rig.engage()
    rig.hand_p = HAND_P + [0, 0, -0.05]  # forward
    (res,) = rig.step()
    np.testing.assert_allclose(res.target.p, ARM_P + [0, -0.05, 0], atol=1e-12)  # yawed -90: forward -> -y


def test_speed_caps_and_filter_limit_every_step():
    rig = Rig()
    rig.engage()
    rig.hand_p = HAND_P + [0.0, 0.0, -0.3]  # a 30 cm jump forward
    rig.hand_q = axis_angle_to_quat([0, 1, 0], 2.0)
    prev = ARM_P
    limits = Limits(LimitsConfig())
    for res in rig.step(50):
        assert np.linalg.norm(res.target.p - prev) <= 0.8 * DT + 1e-9
        prev = res.target.p
        limits.check(res.target.p, res.target.q, prev, res.target.q, DT)


def test_workspace_clamp_holds_targets_inside_box():
    rig = Rig(**exact())
    rig.engage()
    rig.hand_p = HAND_P + [0.0, 1.0, 0.0]  # 1 m up: robot z would be 1.2 m
    rig.arm_p = np.array([0.30, 0.0, 0.45])  # arm follows (no tether pull-down)
    (res,) = rig.step()
    np.testing.assert_allclose(res.target.p, [0.30, 0.0, 0.50])


def test_tether_keeps_target_near_measured_pose():
    rig = Rig(filter=FilterConfig(enabled=False))
    rig.engage()
    rig.hand_p = HAND_P + [0.0, 0.0, -0.25]  # 25 cm forward, but the arm does not move
    for res in rig.step(100):
        assert np.linalg.norm(res.target.p - ARM_P) <= 0.12 + 1e-9
    np.testing.assert_allclose(res.target.p, ARM_P + [0.12, 0, 0], atol=1e-9)


def test_stale_headset_disengages_within_watchdog():
    rig = Rig()
    rig.engage()
    rig.step(10)
    rig.headset_alive = False
    results = rig.step(40)
    published = [r for r in results if r.target is not None]
    assert 0.24 <= len(published) * DT <= 0.26  # targets for the 0.25 s watchdog window only
    forced = [r for r in results if r.clutch is ClutchEvent.FORCED_RELEASE]
    assert len(forced) == 1 and "stale" in forced[0].reason
    assert not rig.core.engaged
    rig.headset_alive = True  # stream resumes with the grip still closed: must not re-engage by itself
    assert all(r.target is None for r in rig.step(20))
    rig.joy.squeeze = 0.0
    rig.step()
    rig.engage()


def test_own_stall_is_not_a_stale_stream():
    """The teleop process itself frozen for 0.4 s (overloaded host): the first ticks after it resumes
    must not trip the watchdog before the queued messages are delivered.
    """
    rig = Rig()
    rig.engage()
    rig.step(5)
    rig.t += 0.4  # no ticks and no deliveries for 0.4 s
    (res,) = [rig.core.tick(rig.t)]  # the control thread runs first ...
    assert rig.core.engaged and res.target is not None
    rig.step(3)  # ... then the messages arrive
    assert rig.core.engaged
    rig.headset_alive = False  # a real stale stream still trips
    results = rig.step(40)
    assert any(r.clutch is ClutchEvent.FORCED_RELEASE for r in results)


def test_lost_arm_feedback_and_fault_release():
    rig = Rig()
    rig.engage()
    rig.arm_alive = False
    results = rig.step(60)
    assert any(r.clutch is ClutchEvent.FORCED_RELEASE and "arm" in r.reason for r in results)
    assert results[-1].target is None
    rig.arm_alive = True
    rig.joy.squeeze = 0.0
    rig.step()
    rig.engage()
    rig.core.on_arm_fault("joint 3 over temperature")
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.FORCED_RELEASE and "fault" in res.reason and res.target is None


@pytest.mark.parametrize(
    "setup,reason",
    [
        (lambda r: setattr(r, "arm_alive", False), "arm"),
        (lambda r: r.core.on_arm_fault("overcurrent"), "fault"),
        (lambda r: setattr(r, "arm_p", np.array([0.7, 0.0, 0.2])), "workspace"),
        (lambda r: setattr(r, "hand_p", np.array([math.nan, 0, 0])), "tracked"),
    ],
)
def test_engage_refused_then_allowed(setup, reason):
    rig = Rig()
    setup(rig)
    rig.joy.squeeze = 1.0
    results = rig.step(5)
    assert all(r.target is None for r in results)
    assert results[-1].clutch is ClutchEvent.REFUSED and reason in results[-1].reason
    assert rig.core.counters.refused_engages == 5
    rig.arm_alive, rig.arm_p, rig.hand_p = True, ARM_P.copy(), HAND_P.copy()
    rig.core.on_arm_fault(None)
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.ENGAGED  # grip still held: engages once the interlock clears
    np.testing.assert_allclose(res.target.p, ARM_P, rtol=0, atol=1e-12)


def test_reengage_causes_no_jump():
    rig = Rig()
    rig.engage()
    rig.hand_p = HAND_P + [0.05, 0.0, -0.05]
    for res in rig.step(100):
        rig.arm_p = res.target.p.copy()  # a perfect arm follows
    rig.joy.squeeze = 0.1
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.RELEASED and res.target is None
    rig.hand_p = HAND_P + [-0.2, 0.1, 0.1]  # operator repositions the hand while released
    rig.arm_p = rig.arm_p + [0.0, 0.0, -0.01]  # and the arm sagged a little
    res = rig.engage()
    np.testing.assert_allclose(res.target.p, rig.arm_p, rtol=0, atol=1e-12)
    (nxt,) = rig.step()
    assert np.linalg.norm(nxt.target.p - rig.arm_p) < 1e-12  # controller still: target stays put


def test_menu_forces_release():
    rig = Rig()
    rig.engage()
    rig.joy.menu = True
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.FORCED_RELEASE and res.target is None


def test_gripper_from_trigger():
    rig = Rig()
    rig.engage()
    for trig, width in ((0.0, 0.07), (0.25, 0.0525), (1.0, 0.0), (3.0, 0.0)):
        rig.joy.trigger = trig
        (res,) = rig.step()
        assert res.gripper == pytest.approx(width)


def test_buttons_start_stop_discard_and_hold_to_delete():
    rig = Rig()
    actions = []

    def press(attr, hand_joy, ticks=3):
        setattr(hand_joy, attr, True)
        actions.extend(a for r in rig.step(ticks) for a in r.actions)
        setattr(hand_joy, attr, False)
        actions.extend(a for r in rig.step(3) for a in r.actions)

    press("primary", rig.joy)
    press("primary", rig.joy)
    assert actions == [Action.START, Action.STOP]
    press("primary", rig.joy)
    press("secondary", rig.joy)
    assert actions[2:] == [Action.START, Action.DISCARD]
    actions.clear()
    press("primary", rig.other, ticks=50)  # 0.5 s: too short
    assert actions == []
    press("primary", rig.other, ticks=250)  # 2.5 s: exactly one delete
    assert actions == [Action.DELETE_LAST]
    rig.core.on_recording(True)  # the recorders say an episode is running
    actions.clear()
    press("primary", rig.joy)
    assert actions == [Action.STOP]


@pytest.mark.slow
def test_garbage_input_never_produces_a_bad_target():
    rng = np.random.default_rng(1)
    rig = Rig()
    rig.engage()
    limits = Limits(LimitsConfig())
    bad = [math.nan, math.inf, -math.inf, 1e308]
    prev = None
    for _k in range(3000):
        t = rig.t = rig.t + DT
        p = HAND_P + rng.normal(scale=0.05, size=3)
        q = axis_angle_to_quat([0, 1, 0], rng.normal(scale=0.3)) + rng.normal(scale=0.02, size=4)
        if rng.random() < 0.3:
            p[rng.integers(3)] = rng.choice(bad)
        if rng.random() < 0.3:
            q[rng.integers(4)] = rng.choice(bad)
        rig.core.on_hand_pose(t, p, q)
        rig.core.on_joy(
            t,
            "right",
            Joy(trigger=rng.choice([0.5, math.nan]), squeeze=rng.choice([1.0, 1.0, 1.0, math.nan, 0.8, 0.0])),
        )
        ap = ARM_P + rng.normal(scale=0.01, size=3)
        if rng.random() < 0.2:
            ap[rng.integers(3)] = rng.choice(bad)
        rig.core.on_arm_pose(t, ap, ARM_Q)
        rig.core.on_joint_states(t, [rng.choice([0.0, math.nan])] * 7)
        res = rig.core.tick(t)
        if res.target is not None:
            assert np.all(np.isfinite(res.target.p)) and np.all(np.isfinite(res.target.q))
            assert math.isfinite(res.gripper) and 0.0 <= res.gripper <= 0.07
            if prev is not None:
                limits.check(res.target.p, res.target.q, prev.p, prev.q, DT)
            prev = res.target
        else:
            prev = None
    c = rig.core.counters
    assert c.rejected_inputs > 1000 and c.published > 100 and c.unsafe_targets == 0


def test_nan_only_input_never_engages():
    rig = Rig()
    rig.hand_p = np.array([math.nan] * 3)
    rig.arm_q = np.array([0, 0, 0, math.nan])
    rig.joy.squeeze = 1.0
    assert all(r.target is None for r in rig.step(50))


def test_config_validation():
    with pytest.raises(ValueError):
        TeleopCore(TeleopConfig(hand="both"))
    with pytest.raises(ValueError):
        TeleopCore(TeleopConfig(stale_timeout_s=math.nan))
    with pytest.raises(ValueError):
        TeleopCore(TeleopConfig(limits=LimitsConfig(tether_m=math.inf)))


def test_left_hand_drives_and_right_a_deletes():
    core = TeleopCore(TeleopConfig(hand="left"))
    t = 0.0
    actions = []
    for k in range(150):
        t += DT
        core.on_hand_pose(t, HAND_P, I)
        core.on_arm_pose(t, ARM_P, ARM_Q)
        core.on_joint_states(t, [0.0] * 7)
        core.on_joy(t, "left", Joy(squeeze=1.0, primary=5 <= k < 10))  # X on the driving hand: start
        core.on_joy(t, "right", Joy(squeeze=1.0, primary=k >= 20))  # A on the other hand, held
        res = core.tick(t)
        actions += res.actions
        assert res.target is not None  # the right grip does not matter, the left one engaged
    assert actions == [Action.START, Action.DELETE_LAST]


def test_release_in_a_backlog_acts_before_a_later_regrip():
    """A backlog delivered between two ticks: grip opened, then closed again. The release wins."""
    rig = Rig()
    rig.engage()
    rig.step(5)
    core, t = rig.core, rig.t + DT / 2
    core.on_joy(t, "right", Joy(squeeze=0.0))  # released in the backlog ...
    core.on_joy(t, "right", Joy(squeeze=1.0))  # ... closed again later in the same backlog
    res = core.tick(rig.t + DT)
    assert res.clutch is ClutchEvent.RELEASED and res.target is None
    assert not core.engaged


def test_menu_in_a_stale_message_still_releases():
    rig = Rig()
    rig.engage()
    core = rig.core
    core.on_joy(rig.t - 5.0, "right", Joy(squeeze=1.0, menu=True))  # captured 5 s ago, delivered now
    res = core.tick(rig.t + DT)
    assert res.clutch is ClutchEvent.FORCED_RELEASE and res.target is None


def test_staleness_is_judged_by_capture_time_not_arrival():
    """The node passes capture times: a bridge falling 0.4 s behind still delivers a message every
    tick, but none newer than the last fresh one, so the arm stops once that is stale_timeout_s old.
    """
    rig = Rig(stale_timeout_s=0.25)
    rig.engage()
    core, t_fresh = rig.core, rig.t
    targets = []
    for _ in range(60):
        rig.t += DT
        core.on_hand_pose(rig.t - 0.4, rig.hand_p, rig.hand_q)
        core.on_joy(rig.t - 0.4, "right", Joy(squeeze=1.0))
        core.on_arm_pose(rig.t, rig.arm_p, rig.arm_q)
        core.on_joint_states(rig.t, [0.0] * 7)
        if core.tick(rig.t).target is not None:
            targets.append(rig.t)
    assert targets and max(targets) <= t_fresh + 0.25 + 1e-9
    assert not core.engaged and core.counters.forced_releases == 1


def test_pose_older_than_the_one_held_is_ignored():
    rig = Rig(**exact())
    rig.engage()
    core = rig.core
    core.on_hand_pose(rig.t + DT, HAND_P + [0.0, 0.0, -0.02], I)  # newest: 2 cm forward
    assert not core.on_hand_pose(rig.t, HAND_P + [0.0, 0.0, -0.10], I)  # an older one, delivered late
    res = core.tick(rig.t + DT)
    np.testing.assert_allclose(res.target.p, ARM_P + [0.02, 0.0, 0.0], atol=1e-12)
    assert core.counters.out_of_order_inputs == 1


def test_limit_hits_count_each_onset_and_limits_seen_collects():
    rig = Rig(**exact())
    rig.engage()
    rig.step(3)
    assert rig.core.counters.limit_hits == {} and rig.core.limits_seen == set()
    rig.hand_p = HAND_P + [0.0, 1.0, 0.0]  # far above the box: the workspace clamp holds every tick
    rig.arm_p = np.array([0.30, 0.0, 0.45])
    rig.step(5)
    assert rig.core.counters.limit_hits == {"workspace": 1} and rig.core.limits_seen == {"workspace"}
    rig.core.limits_seen.clear()
    rig.hand_p = HAND_P.copy()  # back inside: not acting, then a second onset
    rig.step(5)
    assert rig.core.limits_seen == set()
    rig.hand_p = HAND_P + [0.0, 1.0, 0.0]
    rig.step(2)
    assert rig.core.counters.limit_hits == {"workspace": 2}


# ---- what the hand feels about the clutch: the core's haptic output ----------------
def _felt(results, scheduler, t):
    """Feed the core's haptic output to the real scheduler as the node does; the pulses due by ``t``."""
    for i, r in enumerate(results):
        for name in r.haptics:
            scheduler.play(i * DT, name)
    return scheduler.due(t)


@pytest.mark.parametrize(
    "setup,reason",
    [
        (lambda r: setattr(r, "arm_alive", False), "arm"),
        (lambda r: setattr(r, "arm_p", np.array([0.7, 0.0, 0.2])), "workspace"),
    ],
)
def test_refused_grip_gives_the_refused_pattern_once_per_grip(setup, reason):
    """The clutch retries a refused grip every tick; the old core returned no haptic at all, so the
    operator felt nothing and thought the arm followed. Now: the refused pattern, once per attempt.
    """
    from piper_recorder.teleop.haptics import HapticConfig, HapticScheduler

    rig = Rig()
    setup(rig)
    rig.joy.squeeze = 1.0
    results = rig.step(200)  # 2 s of a held, refused grip
    assert all(r.clutch is ClutchEvent.REFUSED and reason in r.reason for r in results)
    assert [n for r in results for n in r.haptics] == ["refused"]
    pulses = _felt(results, HapticScheduler(HapticConfig()), 3.0)
    assert [(p.amp, p.ms, p.pattern) for p in pulses] == [(1.0, 700, "refused")]
    rig.joy.squeeze = 0.0
    rig.step(3)
    rig.joy.squeeze = 1.0
    again = rig.step(5)
    assert [n for r in again for n in r.haptics] == ["refused"]  # a new grip attempt is told again


def test_forced_release_gives_the_release_pattern_and_its_reason():
    """A stall releases the clutch (as before) and now says so: ``release`` pattern, reason kept."""
    rig = Rig(stale_timeout_s=0.25)
    rig.engage()
    rig.headset_alive = False
    results = rig.step(40)
    forced = [r for r in results if r.clutch is ClutchEvent.FORCED_RELEASE]
    assert len(forced) == 1 and forced[0].haptics == ["release"]
    assert [n for r in results for n in r.haptics] == ["release"]
    assert rig.core.last_release is not None and rig.core.last_release.startswith("headset stream stale")
    assert rig.core.counters.forced_releases == 1
    rig.headset_alive = True
    assert all(r.clutch is ClutchEvent.NONE for r in rig.step(20))  # still gripped: no re-engage ...
    rig.joy.squeeze = 0.0
    rig.step(2)
    rig.joy.squeeze = 1.0
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.ENGAGED  # ... until the grip opens and closes again
    rig.joy.menu = True
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.FORCED_RELEASE and res.haptics == [] and rig.core.last_release == "menu"


def test_the_stop_chord_labels_the_stopped_episode():
    """docs/curation.md: A stops as success, A with the thumbstick held in as failure; a start carries none;
    with outcome_on_stop off a plain A stops unlabelled and the chord still says failure.
    """
    for on_stop, plain in ((True, "success"), (False, None)):
        rig = Rig(outcome_on_stop=on_stop)
        got = []

        def press(stick=False):
            rig.joy.stick_click = stick
            rig.joy.primary = True
            got.extend((a, r.outcome) for r in rig.step(3) for a in r.actions)
            rig.joy.primary = False
            got.extend((a, r.outcome) for r in rig.step(3) for a in r.actions)
            rig.joy.stick_click = False

        press()  # start: no label
        press()  # plain stop
        press(stick=True)  # start with the stick held: still just a start
        press(stick=True)  # the chord
        assert got == [(Action.START, None), (Action.STOP, plain), (Action.START, None), (Action.STOP, "failure")]


def test_inputs_as_float_lists_and_as_arrays_drive_the_same_targets():
    """The node passes lists of floats (checked without numpy); arrays, ints and other sequences go
    through numpy: both must give the same targets, and the same rejections.
    """
    rng = np.random.default_rng(5)
    a, b = Rig(), Rig()
    for rig in (a, b):
        rig.engage()
    for _ in range(200):
        dp = rng.normal(scale=0.004, size=3)
        dq = axis_angle_to_quat(rng.normal(size=3), float(rng.uniform(0, 0.05)))
        for rig, as_list in ((a, True), (b, False)):
            rig.hand_p = rig.hand_p + dp
            rig.hand_q = quat_mul(dq, rig.hand_q)
            rig.t += DT
            hp, hq = (rig.hand_p.tolist(), rig.hand_q.tolist()) if as_list else (rig.hand_p, rig.hand_q)
            assert rig.core.on_hand_pose(rig.t, hp, hq)
            rig.core.on_joy(rig.t, "right", Joy(trigger=0.3, squeeze=1.0))
            ap, aq = (rig.arm_p.tolist(), rig.arm_q.tolist()) if as_list else (rig.arm_p, rig.arm_q)
            assert rig.core.on_arm_pose(rig.t, ap, aq)
            assert rig.core.on_joint_states(rig.t, [0.0] * 6 if as_list else np.zeros(6))
        ra, rb = a.core.tick(a.t), b.core.tick(b.t)
        assert ra.target is not None and rb.target is not None
        assert ra.target.p.tolist() == rb.target.p.tolist() and ra.target.q.tolist() == rb.target.q.tolist()
        assert isinstance(ra.target.p, np.ndarray) and isinstance(ra.target.q, np.ndarray)
    core = a.core
    for p, q in (
        ([0.1, math.nan, 0.0], [0.0, 0.0, 0.0, 1.0]),
        ([0.1, 0.0], [0.0, 0.0, 0.0, 1.0]),
        ([0.1, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]),
        ([0.1, 0.0, 0.0], ["x", 0.0, 0.0, 1.0]),
        ((1, 0, 0), (0, 0, 0, 1)),
    ):
        before = core.counters.rejected_inputs
        ok = core.on_hand_pose(a.t + 1.0, p, q)
        assert ok == (p == (1, 0, 0)) and core.counters.rejected_inputs == before + (not ok)
    assert not core.on_joint_states(a.t, [0.0, math.inf]) and not core.on_joint_states(a.t, np.array([math.nan]))

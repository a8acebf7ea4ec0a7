"""BimanualCore on synthetic streams: each hand drives its own arm (one still while the other moves, mirrored
motion), each arm's base calibration (turned, facing the operator, hanging), one clutch per arm (a grip, a
fault, stale feedback, a source change), the episode buttons as with one arm, and the calibration's checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from piper_recorder.teleop.bimanual import BimanualConfig, BimanualCore
from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.frames import ArmBaseConfig, FrameConfig
from piper_recorder.teleop.limits import LimitsConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig, TeleopCore
from piper_recorder.teleop.rotations import angle_between, axis_angle_to_quat, quat_mul

from support.teleop_bimanual import ARM_P, ARM_Q, HAND_P, HANDS, Rig, bases

EXACT = {  # no filter, no tether, generous caps: targets equal the mapping formula
    "filter": FilterConfig(enabled=False),
    "limits": LimitsConfig(max_linear_speed=100.0, max_angular_speed=100.0, tether_m=0.0),
}
REASON = "input source changed"


# ---- (a) one hand still, the other moving ------------------------------------------------------------------
@pytest.mark.parametrize("moving", HANDS)
def test_a_still_hand_keeps_its_arm_on_its_anchor_while_the_other_arm_follows_its_hand(moving):
    still = "right" if moving == "left" else "left"
    rig = Rig()  # the default filter and limits: what an operator drives with
    first = rig.grip("left", "right")
    np.testing.assert_allclose(first.arms[still].target.p, ARM_P[still], rtol=0, atol=1e-12)
    travelled = 0.0
    for k in range(1, 101):  # one second of a 10 cm circle, turning the wrist as it goes
        a = 2 * math.pi * k / 100
        rig.hand_p[moving] = HAND_P[moving] + [0.05 * math.sin(a), 0.02 * math.sin(a), 0.05 * (math.cos(a) - 1)]
        rig.hand_q[moving] = axis_angle_to_quat([0, 1, 0], 0.3 * math.sin(a))
        rig.joy[moving].trigger = 0.5 * (1 - math.cos(a))
        (res,) = rig.step()
        s, m = res.arms[still], res.arms[moving]
        assert s.target is not None and m.target is not None
        np.testing.assert_allclose(s.target.p, ARM_P[still], rtol=0, atol=1e-9)
        assert angle_between(s.target.q, ARM_Q[still]) < 1e-9
        assert s.gripper == pytest.approx(0.07, abs=1e-12)
        travelled = max(travelled, float(np.linalg.norm(m.target.p - ARM_P[moving])))
    assert travelled > 0.03, "the moving hand's arm must follow it"
    assert rig.core.arms[still].counters.limit_hits == {}


# ---- (b) mirrored motion -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("right_yaw", "right_delta"),
    [
        (0.0, [0.0, -0.04, 0.0]),
        (180.0, [0.0, 0.04, 0.0]),
    ],  # the right base facing the operator: its +y is the world's -y
)
def test_mirrored_hands_move_each_arm_its_own_way(right_yaw, right_delta):
    rig = Rig(arm_bases=bases(right=(right_yaw, 0.0, 0.0)), **EXACT)
    rig.grip("left", "right")
    rig.hand_p["left"] = HAND_P["left"] + [-0.04, 0.0, 0.0]  # the left hand 4 cm to the left (XR -x: world +y)
    rig.hand_p["right"] = HAND_P["right"] + [0.04, 0.0, 0.0]  # the right hand 4 cm to the right (world -y)
    (res,) = rig.step()
    np.testing.assert_allclose(res.arms["left"].target.p, ARM_P["left"] + [0.0, 0.04, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.arms["right"].target.p, ARM_P["right"] + right_delta, atol=1e-12)


# ---- (c) a base calibration maps the operator's directions into that base --------------------------------------
@pytest.mark.parametrize(
    ("ypr", "hand_xr", "base_delta"),
    [
        # the right arm facing the operator: forward (XR -z) is its base's -x, left its -y, up still +z
        ((180.0, 0.0, 0.0), [0.0, 0.0, -0.05], [-0.05, 0.0, 0.0]),
        ((180.0, 0.0, 0.0), [-0.05, 0.0, 0.0], [0.0, -0.05, 0.0]),
        ((180.0, 0.0, 0.0), [0.0, 0.05, 0.0], [0.0, 0.0, 0.05]),
        # turned to face the operator's left: forward is its -y
        ((90.0, 0.0, 0.0), [0.0, 0.0, -0.05], [0.0, -0.05, 0.0]),
        # hanging upside down (roll 180): up is its -z, left its -y, forward still +x
        ((0.0, 0.0, 180.0), [0.0, 0.05, 0.0], [0.0, 0.0, -0.05]),
        ((0.0, 0.0, 180.0), [-0.05, 0.0, 0.0], [0.0, -0.05, 0.0]),
        ((0.0, 0.0, 180.0), [0.0, 0.0, -0.05], [0.05, 0.0, 0.0]),
        # pitched 90 degrees (its +x pointing down, its +z forward): forward is its +z, up its -x
        ((0.0, 90.0, 0.0), [0.0, 0.0, -0.05], [0.0, 0.0, 0.05]),
        ((0.0, 90.0, 0.0), [0.0, 0.05, 0.0], [-0.05, 0.0, 0.0]),
        # on a wall: turned to the left, then pitched (its +z to the operator's left, its +x down): forward is its -y
        ((90.0, 90.0, 0.0), [0.0, 0.0, -0.05], [0.0, -0.05, 0.0]),
        # pitched, then rolled (its +x down, its +y forward, its +z to the right): forward is its +y, up its -x
        ((0.0, 90.0, 90.0), [0.0, 0.0, -0.05], [0.0, 0.05, 0.0]),
        ((0.0, 90.0, 90.0), [0.0, 0.05, 0.0], [-0.05, 0.0, 0.0]),
    ],
)
def test_a_calibrated_base_moves_its_flange_the_way_the_hand_moves_in_the_world(ypr, hand_xr, base_delta):
    rig = Rig(arm_bases=bases(right=ypr), **EXACT)
    rig.grip("left", "right")
    rig.hand_p["right"] = HAND_P["right"] + hand_xr
    rig.hand_p["left"] = HAND_P["left"] + hand_xr  # the left base is not calibrated: the plain remap
    (res,) = rig.step()
    np.testing.assert_allclose(res.arms["right"].target.p, ARM_P["right"] + base_delta, atol=1e-12)
    plain = [-hand_xr[2], -hand_xr[0], hand_xr[1]]  # robot x = -xr z, y = -xr x, z = xr y
    np.testing.assert_allclose(res.arms["left"].target.p, ARM_P["left"] + plain, atol=1e-12)


@pytest.mark.parametrize(("ypr", "about_base_z_deg"), [((180.0, 0.0, 0.0), 30.0), ((0.0, 0.0, 180.0), -30.0)])
def test_a_calibrated_base_turns_its_flange_the_way_the_hand_turns_in_the_world(ypr, about_base_z_deg):
    rig = Rig(arm_bases=bases(right=ypr), **EXACT)
    rig.grip("right")
    rig.hand_q["right"] = axis_angle_to_quat([0, 1, 0], math.radians(30))  # 30 deg about the world's up (XR +y)
    (res,) = rig.step()
    expected = quat_mul(axis_angle_to_quat([0, 0, 1], math.radians(about_base_z_deg)), ARM_Q["right"])
    assert angle_between(res.arms["right"].target.q, expected) < 1e-9
    np.testing.assert_allclose(res.arms["right"].target.p, ARM_P["right"], atol=1e-12)


def test_the_stage_yaw_offset_turns_both_arms_before_their_bases():
    """frame.yaw_offset_deg turns the headset's stage into the operator's frame; each base turns on from there."""
    rig = Rig(arm_bases=bases(right=(180.0, 0.0, 0.0)), frame=FrameConfig(yaw_offset_deg=-90.0), **EXACT)
    rig.grip("left", "right")
    for hand in HANDS:
        rig.hand_p[hand] = HAND_P[hand] + [0.0, 0.0, -0.05]  # the stage's forward: the operator's right (-y)
    (res,) = rig.step()
    np.testing.assert_allclose(res.arms["left"].target.p, ARM_P["left"] + [0.0, -0.05, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.arms["right"].target.p, ARM_P["right"] + [0.0, 0.05, 0.0], atol=1e-12)


# ---- (d) one clutch per arm ------------------------------------------------------------------------------------
def test_a_grip_engages_only_its_own_arm_and_the_other_arm_never_moves():
    rig = Rig(**EXACT)
    rig.joy["right"].squeeze = 1.0
    (res,) = rig.step()
    assert res.arms["right"].clutch is ClutchEvent.ENGAGED and res.arms["left"].clutch is ClutchEvent.NONE
    assert res.arms["left"].target is None and not rig.core.arms["left"].engaged
    rig.hand_p["left"] = HAND_P["left"] + [0.1, 0.1, 0.1]  # the idle hand waves around
    rig.hand_p["right"] = HAND_P["right"] + [0.0, 0.0, -0.02]
    for res in rig.step(20):
        assert res.arms["left"].target is None and res.arms["left"].gripper is None
        np.testing.assert_allclose(res.arms["right"].target.p, ARM_P["right"] + [0.02, 0.0, 0.0], atol=1e-12)
    assert rig.core.arms["left"].counters.published == 0 and rig.core.arms["right"].counters.published == 21


def test_the_menu_button_releases_only_its_hands_arm():
    rig = Rig(**EXACT)
    rig.grip("left", "right")
    rig.joy["left"].menu = True
    (res,) = rig.step()
    assert res.arms["left"].clutch is ClutchEvent.FORCED_RELEASE and res.arms["left"].reason == "menu"
    assert res.arms["right"].clutch is ClutchEvent.NONE and res.arms["right"].target is not None


def test_a_fault_on_one_arm_releases_that_arm_alone_and_pulses_its_hand():
    rig = Rig(**EXACT)
    rig.grip("left", "right")
    rig.core.on_arm_fault("left", "joint 3 over temperature")
    (res,) = rig.step()
    left, right = res.arms["left"], res.arms["right"]
    assert left.clutch is ClutchEvent.FORCED_RELEASE and left.reason == "arm fault: joint 3 over temperature"
    assert left.haptics == ["release"] and left.target is None
    assert right.clutch is ClutchEvent.NONE and right.haptics == [] and right.target is not None
    assert all(r.arms["right"].target is not None and r.arms["left"].target is None for r in rig.step(10))
    # with the fault still there a fresh left grip is refused, felt in the left hand
    rig.joy["left"].squeeze = 0.0
    rig.step()
    rig.joy["left"].squeeze = 1.0
    (res,) = rig.step()
    assert res.arms["left"].clutch is ClutchEvent.REFUSED and res.arms["left"].haptics == ["refused"]
    rig.core.on_arm_fault("left", None)
    (res,) = rig.step()
    assert res.arms["left"].clutch is ClutchEvent.ENGAGED


def test_stale_feedback_of_one_arm_releases_that_arm_alone():
    rig = Rig(**EXACT)
    rig.grip("left", "right")
    rig.arm_alive["right"] = False
    results = rig.step(80)
    forced = [r for r in results if r.arms["right"].clutch is ClutchEvent.FORCED_RELEASE]
    assert len(forced) == 1 and forced[0].arms["right"].reason == "no arm pose feedback"
    assert all(r.arms["left"].target is not None and r.arms["left"].clutch is ClutchEvent.NONE for r in results)
    assert rig.core.arms["left"].counters.forced_releases == 0


def test_a_source_change_releases_both_arms_and_each_needs_a_fresh_grip_of_its_own():
    rig = Rig(**EXACT)
    rig.grip("left", "right")
    for hand in HANDS:  # the headset reports it on both hands' joy streams, with one source stamp
        rig.core.on_source_change(rig.t, REASON, hand, order=42)
    (res,) = rig.step()
    for hand in HANDS:
        assert res.arms[hand].clutch is ClutchEvent.FORCED_RELEASE and res.arms[hand].reason == REASON
        assert res.arms[hand].haptics == ["release"]
    assert rig.core.counters.source_changes == 1
    for res in rig.step(30):  # both grips still held: neither arm re-engages
        assert all(res.arms[h].target is None and res.arms[h].clutch is not ClutchEvent.ENGAGED for h in HANDS)
    rig.joy["right"].squeeze = 0.0
    rig.step()
    res = rig.grip("right")  # a fresh right grip engages the right arm only
    assert res.arms["left"].clutch is ClutchEvent.NONE and res.arms["left"].target is None
    rig.joy["left"].squeeze = 0.0
    rig.step()
    rig.grip("left")


# ---- (f) the episode buttons: the same as with one arm ------------------------------------------------------------
def _press_sequence() -> list[tuple[int, str, dict[str, object]]]:
    """(tick, hand, joy fields) of a session: start, stop with the failure chord, start, discard, start, stop,
    delete by holding; the hands as ``TeleopConfig.hand`` right names them.
    """
    return [
        (5, "right", {"primary": True}),  # start
        (7, "right", {}),
        (10, "left", {"primary": True, "secondary": True}),  # the left hand's X and Y: X is held, Y nothing
        (12, "left", {}),
        (20, "right", {"primary": True, "stick_click": True}),  # stop, labelled failure
        (22, "right", {}),
        (30, "right", {"primary": True}),  # start
        (32, "right", {}),
        (40, "right", {"secondary": True}),  # discard
        (42, "right", {}),
        (50, "left", {"primary": True}),  # held 1 s: delete the last episode
        (60, "right", {"primary": True}),  # start (while the other hand holds its button)
        (62, "right", {}),
        (80, "right", {"primary": True}),  # stop, labelled success
        (82, "right", {}),
        (170, "left", {}),
        (180, "right", {"squeeze": 1.0, "menu": True}),  # grips and menu buttons are no episode buttons
        (182, "left", {"squeeze": 1.0, "trigger": 1.0}),
        (190, "right", {}),
    ]


def _actions(core, buttons_hand: str) -> list[tuple[int, list[Action], str | None, int | None]]:
    swap = {"left": "right", "right": "left"} if buttons_hand == "left" else {"left": "left", "right": "right"}
    joys = {h: Joy() for h in HANDS}
    presses = {tick: (hand, fields) for tick, hand, fields in _press_sequence()}
    out = []
    for k in range(200):
        t = 0.01 * (k + 1)
        if k in presses:
            hand, fields = presses[k]
            joys[swap[hand]] = Joy(**fields)
        for h in HANDS:
            core.on_joy(t, h, Joy(**vars(joys[h])), order=k + 1)
        res = core.tick(t)
        if res.actions:
            out.append((k, res.actions, res.outcome, res.stop_stamp_ns))
    return out


@pytest.mark.parametrize("buttons_hand", HANDS)
def test_the_episode_buttons_do_with_two_arms_what_they_do_with_one(buttons_hand):
    cfg = {"hand": buttons_hand}
    two = _actions(BimanualCore(TeleopConfig(**cfg)), buttons_hand)
    one = _actions(TeleopCore(TeleopConfig(**cfg)), buttons_hand)
    assert two == one
    assert two == [
        (5, [Action.START], None, None),
        (20, [Action.STOP], "failure", 21),
        (30, [Action.START], None, None),
        (40, [Action.DISCARD], None, None),
        (60, [Action.START], None, None),
        (80, [Action.STOP], "success", 81),
        (150, [Action.DELETE_LAST], None, None),
    ]


# ---- (g) the calibration's checks --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "named"),
    [
        (BimanualConfig(bases={"right": ArmBaseConfig(yaw_deg=math.nan)}), "arm_base.right.yaw_deg"),
        (BimanualConfig(bases={"left": ArmBaseConfig(pitch_deg=math.inf)}), "arm_base.left.pitch_deg"),
        (BimanualConfig(bases={"right": ArmBaseConfig(roll_deg=400.0)}), "arm_base.right.roll_deg"),
        (BimanualConfig(bases={"left": ArmBaseConfig(yaw_deg="90")}), "arm_base.left.yaw_deg"),
        (BimanualConfig(bases={"middle": ArmBaseConfig()}), "arm_base.middle"),
        (BimanualConfig(arms=("left", "left")), "arms"),
        (BimanualConfig(arms=("left",)), "arms"),
        (BimanualConfig(arms=("left", "centre")), "arms"),
    ],
)
def test_a_bad_calibration_is_refused_naming_the_parameter(config, named):
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        config.validate()
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        BimanualCore(TeleopConfig(), config)


def test_a_good_calibration_passes():
    config = BimanualConfig(arms=("right", "left"), bases=bases(left=(-90.0, 0.0, 0.0), right=(180.0, 10.0, -360.0)))
    config.validate()
    assert set(BimanualCore(TeleopConfig(), config).arms) == {"left", "right"}


def test_an_input_for_an_arm_that_is_not_there_is_refused():
    core = BimanualCore(TeleopConfig())
    with pytest.raises(ValueError, match="'head'"):
        core.on_hand_pose(0.0, "head", HAND_P["left"], [0, 0, 0, 1.0])
    with pytest.raises(ValueError, match="None"):
        core.engine(None)  # two arms: which one must be said

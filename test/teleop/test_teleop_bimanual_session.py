"""A two-arm TeleopSession on a fake clock, no ROS: each arm's pulses in its own hand, the presses and their
confirmations as with one arm, each arm's clutch in the status, and what a two-arm session refuses.
"""

from __future__ import annotations

import json

import pytest

from piper_recorder.teleop.bimanual import BimanualConfig
from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.haptics import HapticConfig
from piper_recorder.teleop.mapper import Action, TeleopConfig
from piper_recorder.teleop.session import STATUS_MIN_PERIOD_S, TeleopNodeConfig, TeleopSession
from piper_recorder.teleop.spacemouse.input import SpaceMouseConfig, SpaceMouseInput

from support.teleop_bimanual import HAND_P, HANDS, SessionRig
from support.teleop_session import RECORDERS
from support.teleop_session import Rig as SingleArmRig

H = HapticConfig()


def _pulse(hand: str, pattern: list[float]) -> dict[str, object]:
    return {"hand": hand, "amp": pattern[0], "ms": int(pattern[1])}


def _engaged(rig: SessionRig, *hands: str) -> None:
    for h in hands:
        rig.joy[h].squeeze = 1.0
    (tick,) = rig.step()
    assert [e["hand"] for e in tick.engage_haptics] == list(hands)
    rig.poll()


# ---- (e) haptics per hand --------------------------------------------------------------------------------------
def test_each_engage_buzzes_its_own_hand():
    rig = SessionRig()
    rig.joy["left"].squeeze = 1.0
    (tick,) = rig.step()
    assert tick.engage_haptics == [{"hand": "left", "amp": 0.6, "ms": 40}]
    assert tick.result.arms["left"].clutch is ClutchEvent.ENGAGED and tick.result.arms["right"].target is None
    rig.joy["right"].squeeze = 1.0
    (tick,) = rig.step()
    assert tick.engage_haptics == [{"hand": "right", "amp": 0.6, "ms": 40}]


def test_a_fault_on_the_left_arm_releases_it_and_pulses_the_left_hand_only():
    rig = SessionRig()
    _engaged(rig, "left", "right")
    rig.session.on_arm_errors(["left arm: joint 2 driver fault"], arm="left")
    (tick,) = rig.step()
    assert tick.result.arms["left"].clutch is ClutchEvent.FORCED_RELEASE
    assert tick.result.arms["right"].target is not None
    rig.wait(STATUS_MIN_PERIOD_S)  # the status is due at most this often
    step = rig.poll()
    assert step.haptic == [_pulse("left", H.release)]
    assert step.status is not None and step.status["arms"]["left"]["forced_releases"] == 1
    assert step.status["arms"]["right"]["forced_releases"] == 0 and step.status["arms"]["right"]["engaged"] is True
    rig.wait(H.gap_s - STATUS_MIN_PERIOD_S)
    assert rig.poll().haptic == [_pulse("left", H.release)]  # the pattern's second pulse, still the left hand's


def test_a_refused_grip_pulses_the_hand_that_gripped():
    rig = SessionRig()
    rig.arm_alive["left"] = False  # the left arm never reported
    rig.joy["left"].squeeze = 1.0
    (tick,) = rig.step()
    assert tick.result.arms["left"].clutch is ClutchEvent.REFUSED and tick.log_refusals == ["left"]
    assert rig.poll().haptic == [_pulse("left", H.refused)]
    rig.joy["right"].squeeze = 1.0  # the right arm is fine: it engages, whatever the left one does
    (tick,) = rig.step()
    assert tick.result.arms["right"].clutch is ClutchEvent.ENGAGED and tick.log_refusals == []
    assert tick.result.arms["left"].clutch is ClutchEvent.REFUSED  # still refused, silently (once per grip attempt)
    assert rig.poll().haptic == []


def test_a_limit_pulses_the_hand_of_the_arm_it_holds():
    rig = SessionRig()
    _engaged(rig, "left", "right")
    x, y, z = HAND_P["left"]  # the hand without the episode buttons (theirs is the right one)
    rig.hand_p["left"] = (x, y, z - 0.3)  # a 30 cm jump forward: the speed cap and the tether hold the target
    rig.step()
    rig.wait(STATUS_MIN_PERIOD_S)
    step = rig.poll()
    assert step.haptic == [_pulse("left", H.limit)]
    assert step.status is not None and step.status["arms"]["left"]["limits_active"]
    assert step.status["arms"]["right"]["limits_active"] == [] and step.status["arms"]["right"]["limit_hits"] == {}
    assert step.status["limit_hits"] == step.status["arms"]["left"]["limit_hits"] != {}


# ---- (f) the presses: the buttons hand's, confirmed in that hand ---------------------------------------------------
@pytest.mark.parametrize("buttons_hand", HANDS)
def test_a_press_calls_every_recorder_and_its_confirmation_pulses_the_buttons_hand(buttons_hand):
    rig = SessionRig(hand=buttons_hand)
    other = "left" if buttons_hand == "right" else "right"
    rig.joy[other].primary = True  # the other hand's primary starts nothing (held: it deletes)
    (tick,) = rig.step()
    assert tick.result.actions == []
    rig.joy[other].primary = False
    rig.joy[buttons_hand].primary = True
    (tick,) = rig.step()
    assert tick.result.actions == [Action.START]
    step = rig.poll()
    assert [(s.recorder, s.action) for s in step.sends] == [(r, Action.START) for r in RECORDERS]
    for rec in RECORDERS:
        rig.session.on_episode_event(json.dumps({"event": "started", "recorder": rec, "episode_index": 0}))
    assert rig.poll().haptic == [_pulse(buttons_hand, H.start)]  # once, however many recorders confirm
    assert rig.session.core.recording


# ---- the status: each arm's clutch ----------------------------------------------------------------------------
def test_the_status_carries_each_arms_clutch_and_keeps_the_single_arm_keys():
    rig = SessionRig()
    _engaged(rig, "right")
    rig.wait(STATUS_MIN_PERIOD_S)
    status = rig.session.status()
    single = SingleArmRig().session.status()
    assert set(status) == set(single) | {"arms"} and "arms" not in single
    assert status["engaged"] is True and status["published"] == status["arms"]["right"]["published"] >= 1
    assert status["arms"]["left"]["engaged"] is False and status["arms"]["right"]["engaged"] is True
    assert set(status["arms"]["left"]) == {
        "engaged",
        "limits_active",
        "last_release",
        "last_release_age_s",
        *(k for k in single if k in {"rejected_inputs", "refused_engages", "forced_releases", "unsafe_targets"}),
        "published",
        "out_of_order_inputs",
        "limit_hits",
    }


def test_a_source_change_releases_both_arms_once_and_the_status_says_so():
    rig = SessionRig()
    _engaged(rig, "left", "right")
    stamp = rig.clock.ns()
    for hand in HANDS:  # one change, reported on both hands' joy streams
        rig.session.on_source_change(stamp, hand, "headset input source changed")
    (tick,) = rig.step()
    assert all(tick.result.arms[h].clutch is ClutchEvent.FORCED_RELEASE for h in HANDS)
    rig.wait(STATUS_MIN_PERIOD_S)
    step = rig.poll()
    assert sorted(p["hand"] for p in step.haptic) == ["left", "right"]
    assert step.status is not None and step.status["source_changes"] == 1 and step.status["forced_releases"] == 2
    assert step.status["engaged"] is False
    assert all(step.status["arms"][h]["last_release"] == "headset input source changed" for h in HANDS)
    assert all(not any(t.result.arms[h].target for h in HANDS) for t in rig.step(20))  # grips held: no re-engage


# ---- what a two-arm session refuses ---------------------------------------------------------------------------
def test_two_arms_refuse_the_spacemouse():
    for ncfg, spacemouse in (
        (TeleopNodeConfig(input="spacemouse"), SpaceMouseInput(SpaceMouseConfig())),
        (TeleopNodeConfig(input="spacemouse"), None),
    ):
        with pytest.raises(ValueError, match="'spacemouse' drives one arm"):
            TeleopSession(TeleopConfig(), ncfg, HapticConfig(), spacemouse, bimanual=BimanualConfig())


def test_two_arms_need_each_input_to_say_its_hand_or_arm():
    rig = SessionRig()
    s = rig.session
    assert s.bimanual and not SingleArmRig().session.bimanual
    with pytest.raises(ValueError, match="None"):
        s.on_hand_pose(rig.clock.ns(), HAND_P["left"].tolist(), [0.0, 0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="'middle'"):
        s.on_arm_pose([0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0], arm="middle")
    with pytest.raises(TypeError, match="tick_arms"):
        s.tick()
    with pytest.raises(TypeError, match="tick()"):
        SingleArmRig().session.tick_arms()

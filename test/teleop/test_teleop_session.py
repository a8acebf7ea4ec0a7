"""TeleopSession on a fake clock, no ROS: what the teleop node publishes and calls, decided in plain Python
(engage / release, a stale stream, a refused grip, recorder calls and the stop chord's label).
"""

from __future__ import annotations

import json

import pytest

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.haptics import HapticConfig
from piper_recorder.teleop.mapper import Action
from piper_recorder.teleop.recorder_calls import Outcome
from piper_recorder.teleop.session import STATUS_MIN_PERIOD_S

from support.teleop_session import ARM_P, DT, RECORDERS, Rig, start_recording


class Call:
    """A label call in flight (what the node hands the session: an rclpy Future)."""

    def __init__(self) -> None:
        self.answered = False

    def done(self) -> bool:
        return self.answered


def test_engage_publishes_the_arm_pose_buzzes_once_and_release_stops_the_targets():
    rig = Rig()
    (idle,) = rig.step()
    assert idle.result.target is None and idle.engage_haptic is None
    rig.joy.squeeze = 1.0
    (tick,) = rig.step()
    assert tick.result.clutch is ClutchEvent.ENGAGED
    assert tick.engage_haptic == {"hand": "right", "amp": 0.6, "ms": 40}
    assert tick.result.target is not None and tick.result.target.p.tolist() == pytest.approx(list(ARM_P))
    assert tick.result.gripper == pytest.approx(0.07)
    status = rig.poll().status  # the clutch changed: the status is due at once
    assert status is not None and status["engaged"] is True and status["published"] == 1
    following = rig.step(5)
    assert all(t.result.target is not None and t.engage_haptic is None for t in following)
    rig.joy.squeeze = 0.0
    (released,) = rig.step()
    assert released.result.clutch is ClutchEvent.RELEASED and released.result.target is None
    assert all(t.result.target is None for t in rig.step(5))
    rig.wait(STATUS_MIN_PERIOD_S)
    step = rig.poll()
    assert step.status is not None and step.status["engaged"] is False and step.status["forced_releases"] == 0
    assert step.status["last_release"] is None and step.status["last_release_age_s"] is None
    assert step.haptic == []  # the operator's own release is not pulsed
    assert rig.poll().status is None  # nothing changed since: the 1 Hz status will do


def test_a_stale_headset_stream_releases_the_clutch_and_pulses_release():
    rig = Rig()
    rig.joy.squeeze = 1.0
    rig.step()
    rig.poll()
    rig.headset_alive = False  # the arm keeps reporting; the headset goes silent
    ticks = rig.step(40)
    forced = [t for t in ticks if t.result.clutch is ClutchEvent.FORCED_RELEASE]
    assert len(forced) == 1 and "headset stream stale" in (forced[0].result.reason or "")
    assert all(t.result.target is None for t in ticks[ticks.index(forced[0]) :])
    release = HapticConfig().release  # [amp, ms, count]
    step = rig.poll()
    assert step.haptic == [{"hand": "right", "amp": release[0], "ms": int(release[1])}]
    assert step.status is not None and step.status["forced_releases"] == 1
    assert "stale" in step.status["last_release"] and step.status["haptics"] == {"release": 1}
    # how long ago, for a HUD that hears teleop only now (test_quest_video): the ticks since the release
    since = (len(ticks) - ticks.index(forced[0]) - 1) * DT
    assert step.status["last_release_age_s"] == pytest.approx(since, abs=1e-3)
    rig.wait(HapticConfig().gap_s)
    assert rig.poll().haptic == [{"hand": "right", "amp": release[0], "ms": int(release[1])}]  # the second pulse
    # the grip still closed does not re-engage when the stream returns: it must open first
    rig.headset_alive = True
    assert all(t.result.clutch is ClutchEvent.NONE and t.result.target is None for t in rig.step(5))


def test_a_refused_grip_pulses_refused_once_and_logs_at_most_every_two_seconds():
    rig = Rig()
    rig.arm_alive = False  # no arm feedback: the interlock refuses
    rig.joy.squeeze = 1.0
    ticks = rig.step(50)
    assert all(t.result.clutch is ClutchEvent.REFUSED and t.result.target is None for t in ticks)
    assert ticks[0].result.reason == "no arm pose feedback"
    assert [t.log_refusal for t in ticks] == [True] + [False] * 49
    refused = HapticConfig().refused
    assert rig.poll().haptic == [{"hand": "right", "amp": refused[0], "ms": int(refused[1])}]
    rig.wait(2.0)
    later = rig.step(5)
    assert later[0].log_refusal and not any(t.log_refusal for t in later[1:])
    assert rig.poll().haptic == []  # once per grip attempt
    assert rig.session.status()["haptics"] == {"refused": 1}
    rig.joy.squeeze = 0.0  # a new grip attempt is felt again
    rig.step()
    rig.joy.squeeze = 1.0
    rig.step()
    assert [c["ms"] for c in rig.poll().haptic] == [int(refused[1])]


def test_the_stop_chord_labels_the_episode_and_a_label_unanswered_in_time_is_refused():
    rig = Rig()
    start_recording(rig)
    tick = rig.press_primary(stick_click=True)  # the stop chord: thumbstick held in says failure
    assert tick.result.actions == [Action.STOP] and tick.result.outcome == "failure"
    step = rig.poll()
    assert [s.action for s in step.sends] == [Action.STOP, Action.STOP]
    for send in step.sends:
        rig.session.on_reply(send.call_id, True, "saved")
    # the node sends one label_episode per recorder; lerobot answers, rgbd's endpoint is dead
    answered, silent = Call(), Call()
    rig.session.label_sent("lerobot_recorder", answered, "failure")
    rig.session.label_sent("rgbd_recorder", silent, "failure")
    answered.answered = True
    rig.session.label_answered("lerobot_recorder", answered)
    rig.wait(2.9)
    assert rig.poll().late_labels == []  # within call_timeout_s
    rig.wait(0.2)
    step = rig.poll()
    assert step.late_labels == [("rgbd_recorder", "failure", "no answer within 3 s")]
    assert step.relabel == ["rgbd_recorder"]  # a fresh client for the next label
    refused = HapticConfig().refused
    assert step.haptic == [{"hand": "right", "amp": refused[0], "ms": int(refused[1])}]
    assert step.status is not None and step.status["last_alarm"] == {
        "recorder": "rgbd_recorder",
        "action": "label_episode",
        "outcome": "refused",
        "message": "no answer within 3 s",
        "pattern": "failed",
        "seq": 1,
    }
    rig.wait(10.0)
    assert rig.poll().late_labels == []  # reported once
    # the recorders confirm the label: felt once for both, and shown in the status
    for rec in RECORDERS:
        rig.session.on_episode_event(
            json.dumps({"event": "labeled", "recorder": rec, "outcome": "failure", "episode_index": 0})
        )
    failure = HapticConfig().failure
    assert [c["ms"] for c in rig.poll().haptic] == [int(failure[1])]
    assert rig.session.status()["last_outcome"] == {"episode_index": 0, "outcome": "failure"}


def test_a_label_answered_but_not_yet_handed_back_is_not_late():
    rig = Rig()
    call = Call()
    rig.session.label_sent("lerobot_recorder", call, "success")
    call.answered = True  # the answer came; its done-callback has not run yet
    rig.wait(5.0)
    assert rig.poll().late_labels == []


def test_a_refused_press_pulses_refused_and_an_unanswered_one_timeout():
    rig = Rig()
    rig.press_primary()
    sends = rig.poll().sends
    reply = rig.session.on_reply(sends[0].call_id, False, "no task set")
    assert reply.report is not None and reply.report.outcome is Outcome.REFUSED
    refused = HapticConfig().refused
    assert reply.haptic == [{"hand": "right", "amp": refused[0], "ms": int(refused[1])}]
    rig.wait(3.0)  # the other recorder never answers
    step = rig.poll()
    assert [(r.recorder, r.outcome) for r in step.reports] == [("rgbd_recorder", Outcome.TIMEOUT)]
    assert step.reconnect == ["rgbd_recorder"] and "rgbd_recorder" in step.relabel
    timeout = HapticConfig().timeout
    assert step.haptic[0] == {"hand": "right", "amp": timeout[0], "ms": int(timeout[1])}
    assert step.status is not None and step.status["last_alarm"]["outcome"] == "timeout"
    assert step.status["last_alarm"]["seq"] == 2


def test_a_bad_verdict_is_felt_once_per_stop_and_arm_errors_refuse():
    rig = Rig()
    for rec in RECORDERS:  # both recorders' saves, seconds apart (the first pattern long over)
        rig.session.on_episode_event(json.dumps({"event": "saved", "recorder": rec, "verdict": "bad"}))
        rig.wait(2.0)
    rig.session.on_episode_event("not json")
    assert rig.session.status()["haptics"] == {"save": 1, "bad": 1}
    rig.press_primary()  # a press in between: the next stop's bad verdict is felt again
    rig.session.on_episode_event(json.dumps({"event": "saved", "recorder": RECORDERS[0], "verdict": "bad"}))
    assert rig.session.status()["haptics"]["bad"] == 2
    rig.session.on_arm_errors(["can: bus off"])
    rig.joy.squeeze = 1.0
    (tick,) = rig.step()
    assert tick.result.clutch is ClutchEvent.REFUSED and tick.result.reason == "arm fault: can: bus off"
    rig.session.on_arm_errors([])
    rig.joy.squeeze = 0.0
    rig.step()
    rig.joy.squeeze = 1.0
    assert rig.step()[0].result.clutch is ClutchEvent.ENGAGED


def test_a_short_joy_message_is_rejected():
    rig = Rig()
    rig.session.on_joy(rig.clock.ns(), "right", None)
    assert rig.session.status()["rejected_inputs"] == 1

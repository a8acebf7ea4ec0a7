"""A stop at a given time (no ROS): teleop's stop carries the headset press's capture stamp in every
attempt (an unstamped press: none, a plain stop at arrival), and the controller ends the episode there:
exact rows, refused before the episode's start (a resent stop of an earlier episode), never after the
request's arrival nor before the rows already written.
"""

from __future__ import annotations

import pytest

from piper_recorder.recording.controller import STOP_STAMP_FUTURE_TOLERANCE_NS, parse_stop_at
from piper_recorder.recording.targets import LeRobotTarget
from piper_recorder.teleop.mapper import Action
from piper_recorder.teleop.recorder_calls import RecorderCallConfig, RecorderCalls

from support.recorder_controller import MS, Clock, FakeLeRobotWriter, feed, make
from support.teleop_session import RECORDERS, Rig, start_recording


def rows_until(start_ns: int, end_ns: int, fps: int = 30) -> int:
    """Grid rows t_k = start + k/fps (the assembler's integer grid) with t_k <= end."""
    return (end_ns - start_ns) * fps // 1_000_000_000 + 1


# ---- teleop: the stop press's stamp rides every attempt ------------------------------------------------
def test_the_stop_press_carries_its_capture_stamp_and_the_start_none():
    rig = Rig()
    start_recording(rig)
    assert all(s.end_ns is None for s in rig.session.poll(lambda _r: True).sends)  # nothing new in flight
    press_ns = rig.clock.ns() + round(0.01 * 1e9)  # the joy of the next step is stamped with its clock
    tick = rig.press_primary()
    assert tick.result.actions == [Action.STOP] and tick.result.stop_stamp_ns == press_ns
    sends = rig.poll().sends
    assert [(s.recorder, s.action, s.end_ns) for s in sends] == [(r, Action.STOP, press_ns) for r in RECORDERS]


def test_a_start_and_a_discard_carry_no_stamp():
    rig = Rig()
    tick = rig.press_primary()
    assert tick.result.actions == [Action.START] and tick.result.stop_stamp_ns is None
    assert [s.end_ns for s in rig.poll().sends] == [None, None]
    rig.joy.secondary = True
    rig.step()
    assert [(s.action, s.end_ns) for s in rig.poll().sends] == [(Action.DISCARD, None)] * 2


def test_an_unstamped_stop_press_is_a_plain_stop():
    rig = Rig()
    start_recording(rig)
    s = rig.session
    rig.clock.t += 0.01
    s.on_joy(0, "right", type(rig.joy)(primary=True))  # stamp 0: unstamped (counts from its arrival)
    tick = s.tick()
    assert tick.result.actions == [Action.STOP] and tick.result.stop_stamp_ns is None
    assert [s.end_ns for s in rig.poll().sends] == [None, None]


def test_a_resent_stop_carries_the_same_stamp():
    c = RecorderCalls(["rec"], RecorderCallConfig(call_timeout_s=3.0))
    c.on_status(0.0, "rec", "recording")
    c.press(1.0, Action.STOP, 123_456_789_000)
    (first,) = c.poll(1.0, lambda _r: True).sends
    assert first.end_ns == 123_456_789_000
    assert c.poll(4.0, lambda _r: True).reconnect == ["rec"]  # no answer: re-matching
    c.on_status(5.0, "rec", "recording")  # up again, still recording: resend
    assert c.poll(5.1, lambda _r: True).reconnect == ["rec"]
    (again,) = c.poll(5.2, lambda _r: True).sends
    assert again.call_id != first.call_id and again.end_ns == first.end_ns
    c.press(9.0, Action.START, 987)  # only a STOP ends at a stamp
    assert c.poll(9.0, lambda _r: True).sends[0].end_ns is None


# ---- the controller: ends at the stamp ---------------------------------------------------------------
def _recording(lateness: float, reach: float = 0.0):
    w = FakeLeRobotWriter()
    c, events = make(LeRobotTarget(w), lateness=lateness, reach=reach)
    clock = Clock()
    t0 = clock.t
    assert c.start("pick", clock).ok
    feed(c, t0 - 20 * MS, 2.02)  # 2 s of inputs and frames, ticked as they come
    return w, c, events, t0, t0 + 2_000 * MS


def test_a_stop_stamped_200_ms_before_its_arrival_ends_there_with_exact_rows():
    w, c, events, t0, arrival = _recording(lateness=0.3)  # rows wait 300 ms: 200 ms back is not written yet
    end = arrival - 200 * MS
    ans = c.stop_at(end, arrival)
    assert ans.ok and ans.message.endswith("; ended at end_ns, 200 ms before the request arrived"), ans.message
    saved = events[-1]
    assert saved["event"] == "saved" and saved["end_ns"] == end and saved["start_ns"] == t0
    assert len(w.episodes[0]["rows"]) == saved["rows"] == rows_until(t0, end) == 55
    assert w.episodes[0]["rows"][-1] == pytest.approx(54 / 30, abs=1e-6)  # the last row: 1.8 s, at end


def test_stop_reach_holds_rows_back_so_a_stamp_200_ms_back_is_exact():
    w, c, events, t0, arrival = _recording(lateness=0.1, reach=0.2)  # the recorders' defaults
    assert c._asm.assembled_until_ns <= arrival - 300 * MS - 10 * MS  # fed (ticked) until 10 ms before
    end = arrival - 200 * MS
    assert c.stop_at(end, arrival).ok
    assert events[-1]["end_ns"] == end and len(w.episodes[0]["rows"]) == rows_until(t0, end)
    assert c.next_tick_ns() is None
    c2, _ = make(LeRobotTarget(FakeLeRobotWriter()), lateness=0.1, reach=0.2)
    clock = Clock()
    assert c2.start("pick", clock).ok
    assert c2.next_tick_ns() == c2._asm.next_due_ns + 200 * MS  # the tick thread sleeps that much longer


def test_a_stamp_older_than_the_rows_written_ends_at_the_first_unwritten_time():
    w, c, events, t0, arrival = _recording(lateness=0.1)
    written = c._asm.assembled_until_ns
    assert written is not None and arrival - 200 * MS < written < arrival
    ans = c.stop_at(arrival - 200 * MS, arrival)
    assert ans.ok and "ms after end_ns: the rows up to there were written" in ans.message, ans.message
    assert events[-1]["end_ns"] == written
    assert len(w.episodes[0]["rows"]) == rows_until(t0, written)  # nothing after the end, nothing lost


def test_a_stamp_before_the_episode_start_is_refused_and_the_episode_goes_on():
    w, c, _events, t0, arrival = _recording(lateness=0.1)
    ans = c.stop_at(t0 - 1, arrival)
    assert not ans.ok and "before episode 0's start: a stop for an earlier episode" in ans.message
    assert c.state == "recording" and w.episodes == []
    feed(c, arrival, 1.0)  # not frozen by the refused stop: rows keep coming
    later = arrival + 1_000 * MS
    assert c.stop_at(later, later).ok and len(w.episodes[0]["rows"]) == rows_until(t0, later)


def test_a_stamp_after_the_arrival_ends_at_the_arrival():
    _w, c, events, _t0, arrival = _recording(lateness=0.3)
    ans = c.stop_at(arrival + STOP_STAMP_FUTURE_TOLERANCE_NS, arrival)  # clock noise: silently the arrival
    assert ans.ok and "(end_ns a little after it: clock noise)" in ans.message and events[-1]["end_ns"] == arrival
    _w, c, events, _t0, arrival = _recording(lateness=0.3)
    ans = c.stop_at(arrival + STOP_STAMP_FUTURE_TOLERANCE_NS + 1, arrival)
    assert ans.ok and "after the request's arrival (clocks disagree): ended at the arrival" in ans.message
    assert events[-1]["end_ns"] == arrival


def test_a_stop_at_when_not_recording_is_refused_like_a_stop():
    c, _events = make(LeRobotTarget(FakeLeRobotWriter()))
    ans = c.stop_at(5, 10)
    assert not ans.ok and "no episode in progress" in ans.message


@pytest.mark.parametrize(
    "payload, why",
    [
        ("", "wants a JSON object"),
        ("[1]", "wants a JSON object"),
        ('{"end": 5}', "wants a JSON object"),
        ('{"end_ns": 5, "x": 1}', "wants a JSON object"),
        ('{"end_ns": 1.5e18}', "positive integer"),
        ('{"end_ns": "5"}', "positive integer"),
        ('{"end_ns": true}', "positive integer"),
        ('{"end_ns": 0}', "positive integer"),
        ('{"end_ns": -3}', "positive integer"),
    ],
)
def test_a_malformed_payload_is_refused_with_what_is_wanted(payload, why):
    with pytest.raises(ValueError, match=why):
        parse_stop_at(payload)


def test_a_payload_gives_its_end():
    assert parse_stop_at('{"end_ns": 1733212345123456789}') == 1733212345123456789

"""RecorderCalls (no ROS): every recorder call has a deadline; a timeout is reported, the client is
re-created and the press resent once the recorder is up again, unless its state shows the press took
effect; a press is never silently lost; the toggle follows what the recorders said.
"""

import pytest

from piper_recorder.teleop.mapper import Action
from piper_recorder.teleop.recorder_calls import Outcome, RecorderCallConfig, RecorderCalls

REC = "lerobot_recorder"


def make(recs=(REC,), **cfg):
    return RecorderCalls(list(recs), RecorderCallConfig(**cfg))


def up(*_):
    return True


def down(*_):
    return False


def outcomes(res):
    return [(r.recorder, r.action, r.outcome) for r in res.reports]


def test_answered_start_and_stop_drive_the_toggle():
    c = make()
    c.press(0.0, Action.START)
    res = c.poll(0.0, up)
    assert [(s.recorder, s.action) for s in res.sends] == [(REC, Action.START)] and not res.reports
    assert c.recording  # optimistic while in flight
    rep = c.on_reply(0.1, res.sends[0].call_id, True, "started episode 0")
    assert rep.outcome is Outcome.OK and rep.outcome.alarm is None and c.recording
    c.press(5.0, Action.STOP)
    (send,) = c.poll(5.0, up).sends
    assert send.action is Action.STOP and not c.recording
    assert c.on_reply(5.5, send.call_id, True).outcome is Outcome.OK
    assert c.poll(20.0, up).reports == []  # nothing left in flight, nothing reported


def test_timeout_reconnects_waits_for_the_restarted_recorder_and_resends():
    c = make(call_timeout_s=3.0)
    c.on_status(0.0, REC, "idle")
    c.press(1.0, Action.START)
    (lost,) = c.poll(1.0, up).sends  # goes to the dead endpoint: never answered
    assert c.poll(3.9, up).reports == []
    res = c.poll(4.0, up)
    assert outcomes(res) == [(REC, Action.START, Outcome.TIMEOUT)] and res.reconnect == [REC]
    assert res.reports[0].outcome.alarm == "timeout"
    assert not c.recording, "a start nobody answered must not show as recording"
    assert not c.poll(4.5, up).sends  # no status since the timeout: not up yet
    c.on_status(5.0, REC, "idle")  # the relaunched recorder publishes:
    res = c.poll(5.1, up)  # fresh clients, made now that it is known
    assert not res.sends and res.reconnect == [REC]
    assert not c.poll(5.15, down).sends  # ... not matched yet
    res = c.poll(5.2, up)
    assert [(s.action, s.call_id != lost.call_id) for s in res.sends] == [(Action.START, True)]
    assert outcomes(res) == [(REC, Action.START, Outcome.RETRY)]
    assert c.on_reply(5.3, res.sends[0].call_id, True).outcome is Outcome.OK and c.recording


def test_a_late_answer_to_the_first_attempt_still_counts():
    c = make(call_timeout_s=1.0)
    c.press(0.0, Action.STOP)
    (first,) = c.poll(0.0, up).sends
    c.poll(1.0, up)  # timeout
    rep = c.on_reply(1.5, first.call_id, True, "saved episode 3")
    assert rep.outcome is Outcome.OK and rep.message == "saved episode 3"
    assert c.pending() == {}


def test_lost_reply_but_start_took_effect_is_not_started_twice():
    c = make(call_timeout_s=1.0)
    c.press(0.0, Action.START)
    c.poll(0.0, up)
    c.poll(1.0, up)  # timeout
    c.on_status(1.2, REC, "recording")  # it did start; only the reply was lost
    res = c.poll(1.3, up)
    assert not res.sends and outcomes(res) == [(REC, Action.START, Outcome.OK)]
    assert c.recording


def test_stop_on_a_recorder_that_came_back_idle_reports_the_lost_episode():
    c = make(call_timeout_s=1.0)
    c.on_event(0.0, REC, "started")
    c.press(10.0, Action.STOP)
    c.poll(10.0, up)
    c.poll(11.0, up)
    c.on_status(12.0, REC, "idle")
    res = c.poll(12.1, up)
    assert not res.sends and outcomes(res) == [(REC, Action.STOP, Outcome.FAILED)]
    assert "lost" in res.reports[0].message and res.reports[0].outcome.alarm == "failed"


def test_slow_save_is_waited_for_not_resent():
    c = make(call_timeout_s=1.0)
    c.on_event(0.0, REC, "started")
    c.press(10.0, Action.STOP)
    c.poll(10.0, up)
    c.poll(11.0, up)  # the save takes longer than the deadline
    c.on_status(11.2, REC, "saving")
    assert not c.poll(11.3, up).sends  # a second stop would be refused: wait
    c.on_event(12.0, REC, "saved")
    res = c.poll(12.1, up)
    assert not res.sends and outcomes(res) == [(REC, Action.STOP, Outcome.OK)]


def test_lost_reply_with_its_event_is_no_alarm():
    c = make(call_timeout_s=1.0)
    c.press(0.0, Action.START)
    c.poll(0.0, up)
    c.on_event(0.3, REC, "started")  # the reply never comes, the event does
    res = c.poll(1.0, up)
    assert outcomes(res) == [(REC, Action.START, Outcome.OK)] and not res.reconnect and c.recording


def test_failed_save_keeps_the_toggle_on_stop_so_the_next_press_retries_it():
    c = make(status_grace_s=1.0)
    c.on_event(0.0, REC, "started")
    c.press(5.0, Action.STOP)
    (send,) = c.poll(5.0, up).sends
    rep = c.on_reply(6.0, send.call_id, False, "save failed: No space left on device; episode kept")
    assert rep.outcome.alarm == "failed"
    c.on_event(6.0, REC, "save_failed")
    c.on_status(7.5, REC, "save_failed")
    assert c.recording  # the next press is a stop: it retries the save


def test_delete_is_never_resent():
    c = make(call_timeout_s=1.0)
    c.press(0.0, Action.DELETE_LAST)
    c.poll(0.0, up)
    res = c.poll(1.0, up)
    assert outcomes(res) == [(REC, Action.DELETE_LAST, Outcome.FAILED)] and res.reconnect == [REC]
    c.on_status(2.0, REC, "idle")
    assert not c.poll(2.1, up).sends


def test_unavailable_service_is_reported_then_delivered_or_given_up():
    c = make(call_timeout_s=1.0, retry_window_s=5.0)
    c.press(0.0, Action.START)
    res = c.poll(0.0, down)
    assert outcomes(res) == [(REC, Action.START, Outcome.UNAVAILABLE)]
    assert res.reports[0].outcome.alarm == "timeout"
    c.on_status(1.0, REC, "idle")
    assert c.poll(1.1, up).reconnect == [REC]
    assert c.poll(1.2, up).sends  # delivered once it appears
    c2 = make(call_timeout_s=1.0, retry_window_s=5.0)
    c2.press(0.0, Action.START)
    c2.poll(0.0, down)
    assert c2.poll(4.9, down).reports == []
    res = c2.poll(5.1, down)
    assert outcomes(res) == [(REC, Action.START, Outcome.FAILED)] and not c2.recording
    assert c2.pending() == {}


def test_status_syncs_a_toggle_that_missed_events_but_not_against_a_fresh_reply():
    c = make(status_grace_s=1.0)
    c.on_status(0.0, REC, "recording")  # teleop started after the "started" event
    assert c.recording
    c.on_status(0.5, REC, "idle")  # the recorder was relaunched: its episode is gone
    assert not c.recording
    c.press(1.0, Action.START)
    (send,) = c.poll(1.0, up).sends
    c.on_status(1.05, REC, "idle")  # published before the start: in flight, ignored
    c.on_reply(1.1, send.call_id, True)
    c.on_status(1.2, REC, "idle")  # still older than the reply: within the grace
    assert c.recording
    c.on_status(2.5, REC, "recording")
    assert c.recording


def test_refused_start_is_an_alarm_and_the_toggle_asks_the_status():
    c = make(recs=(REC, "rgbd_recorder"))
    c.press(0.0, Action.START)
    sends = {s.recorder: s for s in c.poll(0.0, up).sends}
    c.on_reply(0.1, sends[REC].call_id, True)
    rep = c.on_reply(0.1, sends["rgbd_recorder"].call_id, False, "cannot open the dataset")
    assert rep.outcome is Outcome.REFUSED and rep.outcome.alarm == "failed"
    assert c.recording  # one recorder records: the next press stops it


def test_a_new_press_supersedes_one_in_flight():
    c = make(call_timeout_s=1.0)
    c.press(0.0, Action.START)
    (first,) = c.poll(0.0, up).sends
    c.poll(1.0, up)  # timed out, waiting
    c.press(2.0, Action.DISCARD)
    (second,) = c.poll(2.0, up).sends
    assert second.action is Action.DISCARD
    late = c.on_reply(2.1, first.call_id, True)
    assert late.outcome is Outcome.OK and "earlier press" in late.message
    assert c.pending() == {REC: "discard_episode"}


@pytest.mark.parametrize(
    "bad", [{"call_timeout_s": 0}, {"retry_window_s": 1.0, "call_timeout_s": 2.0}, {"status_grace_s": float("nan")}]
)
def test_config_validation(bad):
    with pytest.raises(ValueError):
        RecorderCallConfig(**bad).validate()

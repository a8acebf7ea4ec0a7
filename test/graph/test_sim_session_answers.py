"""SimSession's service answers: a response lost in DDS discovery is read from the recorder's status.

rmw_fastrtps drops a response whose reader the server has not matched within 100 ms; the recorder
acted on the request all the same (its ``~/status`` counts the answer). piper-demo and the consumer
roots used to wait 30 s for such a start answer, fail, and save one 30 s episode instead of two.
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from rclpy.task import Future

from piper_recorder.graph import sim_session
from piper_recorder.graph.sim_session import DemoError, SimSession


class _Graph:
    def logs(self) -> str:
        return "(logs)"


def _session(status: dict) -> SimSession:
    s = SimSession.__new__(SimSession)  # no graph, no ROS: only what _await_answer reads
    s._cond = threading.Condition()
    s.status = status
    s.graph = _Graph()  # type: ignore[assignment]
    return s


class _Res:
    def __init__(self, ok: bool, message: str):
        self.success, self.message = ok, message


def test_a_response_wins_when_it_comes():
    s = _session({"r": {"answers": 3, "ok": True, "message": "status says"}})
    fut: Future = Future()
    threading.Timer(0.2, lambda: fut.set_result(_Res(True, "recording episode 0"))).start()
    assert s._await_answer("r", "start_episode", fut, 3, timeout=5.0) == (True, "recording episode 0")


def test_a_lost_response_is_read_from_the_status(monkeypatch):
    monkeypatch.setattr(sim_session, "LOST_ANSWER_S", 0.3)
    s = _session({"r": {"answers": 3, "ok": True, "message": "idle"}})
    fut: Future = Future()  # never answered

    def answered() -> None:
        with s._cond:
            s.status["r"] = {"answers": 4, "ok": False, "message": "already recording episode 2"}

    threading.Timer(0.2, answered).start()
    t0 = time.monotonic()
    assert s._await_answer("r", "start_episode", fut, 3, timeout=10.0) == (False, "already recording episode 2")
    assert 0.4 <= time.monotonic() - t0 < 2.0


def test_no_response_and_no_answer_in_the_status_times_out(monkeypatch):
    monkeypatch.setattr(sim_session, "LOST_ANSWER_S", 0.1)
    s = _session({"r": {"answers": 3, "ok": True, "message": "idle"}})
    with pytest.raises(DemoError, match="no answer within"):
        s._await_answer("r", "stop_episode", Future(), 3, timeout=0.6)

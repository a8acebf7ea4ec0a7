"""nodes.plumbing.fixed_rate_loop.FixedRateLoop, the control loop of teleop and the policy node: an error in a tick goes to
the owner and the loop goes on; stop() ends it at once.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from piper_recorder.nodes.plumbing.fixed_rate_loop import FixedRateLoop


def test_a_failing_tick_goes_to_on_error_and_the_loop_goes_on_until_stop():
    ticks: list[int] = []
    errors: list[Exception] = []
    enough = threading.Event()

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) == 2:
            raise RuntimeError("boom")
        if len(ticks) >= 5:
            enough.set()

    loop = FixedRateLoop(0.005, tick, "test-loop", errors.append)
    assert enough.wait(10.0), ticks
    loop.stop()
    assert not loop._thread.is_alive()  # joined: nothing ticks after stop()
    assert [str(e) for e in errors] == ["boom"] and len(ticks) >= 5


def test_stop_wakes_a_long_period_at_once():
    loop = FixedRateLoop(3600.0, lambda: None, "test-loop")
    loop.stop(timeout_s=5.0)
    assert not loop._thread.is_alive()


def test_timer_callback_calls_through_with_a_stated_empty_signature():
    """Rclpy's executor inspects a timer callback's signature on every call (for a TimerInfo parameter):
    the wrapper states it has none, so that is one attribute read, and the call is the callback's.
    """
    import inspect

    from piper_recorder.nodes.plumbing.callbacks import timer_callback

    class Owner:
        def __init__(self) -> None:
            self.calls = 0

        def poll(self) -> None:
            self.calls += 1

    owner = Owner()
    cb = timer_callback(owner.poll)
    cb()
    cb()
    assert owner.calls == 2 and cb.__name__ == "poll"
    sig = inspect.signature(cb)
    assert list(sig.parameters) == [] and sig is cb.__signature__  # read, not computed


class _Executor:
    """spin_once returns at once (a callback ran) or waits ``wait_s`` (nothing came)."""

    def __init__(self, wait_s: float = 0.0, stop_after: int | None = None, stop: threading.Event | None = None):
        self.calls, self.wait_s, self.stop_after, self.stop = 0, wait_s, stop_after, stop

    def spin_once(self, timeout_sec: float) -> None:
        self.calls += 1
        if self.wait_s:
            threading.Event().wait(self.wait_s)
        if self.stop is not None and self.calls == self.stop_after:
            self.stop.set()


def test_spin_until_asks_rclpy_ok_rarely_yet_ends_soon_after_a_shutdown(monkeypatch):
    """``spin_until`` runs the executor until ``stop``; it asks ``rclpy.ok()`` (a lock) only every 256
    callbacks or after a spin_once that waited (nothing came: what a shut-down context gives), so a busy
    recorder does not pay it per message, and a context shut down mid-burst still ends the loop.
    """
    from piper_recorder.nodes.plumbing import executors as common

    asked: list[int] = []
    stop = threading.Event()
    busy = _Executor(stop_after=1000, stop=stop)
    monkeypatch.setattr(common.rclpy, "ok", lambda: asked.append(busy.calls) or True)
    common.spin_until(busy, stop)  # type: ignore[arg-type]
    assert busy.calls == 1000 and asked == [256, 512, 768]
    down = _Executor()  # a context down while spin_once keeps returning at once: ends at the next check
    monkeypatch.setattr(common.rclpy, "ok", lambda: False)
    common.spin_until(down, threading.Event())  # type: ignore[arg-type]
    assert down.calls == 256
    idle = _Executor(wait_s=0.06)  # nothing comes: asked after the first wait
    common.spin_until(idle, threading.Event())  # type: ignore[arg-type]
    assert idle.calls == 1

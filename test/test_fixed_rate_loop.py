"""nodes.common.FixedRateLoop, the control loop of teleop and the policy node: an error in a tick goes to
the owner and the loop goes on; stop() ends it at once."""
from __future__ import annotations

import threading

from piper_recorder.nodes.common import FixedRateLoop


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
    assert not loop._thread.is_alive()             # joined: nothing ticks after stop()
    assert [str(e) for e in errors] == ["boom"] and len(ticks) >= 5


def test_stop_wakes_a_long_period_at_once():
    loop = FixedRateLoop(3600.0, lambda: None, "test-loop")
    loop.stop(timeout_s=5.0)
    assert not loop._thread.is_alive()


def test_timer_callback_calls_through_with_a_stated_empty_signature():
    """rclpy's executor inspects a timer callback's signature on every call (for a TimerInfo parameter):
    the wrapper states it has none, so that is one attribute read, and the call is the callback's."""
    import inspect

    from piper_recorder.nodes.common import timer_callback

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
    assert list(sig.parameters) == [] and sig is cb.__signature__   # read, not computed

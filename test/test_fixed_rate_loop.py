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

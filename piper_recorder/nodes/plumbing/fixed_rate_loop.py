"""A control loop on its own thread at a fixed rate (teleop's and the policy's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class FixedRateLoop:
    """``tick()`` every ``period_s`` on its own daemon thread (teleop's and the policy's control loops).

    The schedule advances by whole periods on the monotonic clock (no drift from the tick's own
    duration); a late tick runs at once; a stall of more than a period resyncs rather than bursting
    catch-up ticks at the arm. ``stop()`` wakes the wait at once and joins. An exception from
    ``tick`` goes to ``on_error`` and the loop goes on; without ``on_error`` it ends the loop.
    """

    def __init__(
        self, period_s: float, tick: Callable[[], None], name: str, on_error: Callable[[Exception], None] | None = None
    ):
        self.period_s, self.tick, self.on_error = period_s, tick, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.period_s
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                if self._stop.wait(delay):
                    break
            elif delay < -period:
                next_t = time.monotonic()  # fell behind (machine stalled): resync, never burst
            if self.on_error is None:
                self.tick()
                continue
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the owner decides (the policy pauses and holds)
                self.on_error(exc)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the loop and join its thread."""
        self._stop.set()
        self._thread.join(timeout_s)

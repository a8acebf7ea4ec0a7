"""Process supervision shared by every process the graph starts (no ROS): stop signals and the launcher's death.

A node must end when whoever started it ends, however that ends: on a robot, a launcher that crashes
or is SIGKILLed must not leave the arm node and the recorders running with nobody to stop them.
SIGKILL cannot be caught by the launcher, so each child watches for itself: ``watch_parent`` polls
``getppid()`` (4 Hz, a few microseconds a poll) and reports once when the parent is gone; the node
then shuts down exactly as on Ctrl-C (recorders save the episode in flight). The launcher passes its
pid in ``PIPER_LAUNCHER_PID`` so that a parent that died before the child's first look still counts;
without it (``ros2 launch``, a shell) the parent at start-up is the one watched. SIGTERM and SIGHUP
(a closed terminal, an ssh session gone) do what SIGINT does.
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

LAUNCHER_PID_ENV = "PIPER_LAUNCHER_PID"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def on_stop_signals(handler: Callable[[int], None]) -> None:
    """Call ``handler(signum)`` on SIGINT, SIGTERM and SIGHUP (main thread only, like ``signal.signal``)."""
    def _handle(signum: int, _frame: Any) -> None:
        handler(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, _handle)


def interrupt_on_stop_signals() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like SIGINT, so ``with``/``finally`` clean-ups run
    (piper-demo stops its graph, pytest tears its fixtures down) instead of the process just dying."""
    def _raise(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise)


def expected_parent() -> int:
    """The pid this process must outlive: ``PIPER_LAUNCHER_PID`` if the launcher set it, else the parent now."""
    try:
        return int(os.environ.get(LAUNCHER_PID_ENV, ""))
    except ValueError:
        return os.getppid()


def watch_parent(on_gone: Callable[[], None], interval_s: float = 0.25,
                 parent: int | None = None) -> threading.Event:
    """Call ``on_gone()`` once, on a daemon thread, when this process's parent is no longer ``parent``
    (default ``expected_parent()``); returns an event that ends the watch when set."""
    want = expected_parent() if parent is None else parent
    done = threading.Event()

    def _watch() -> None:
        while not done.wait(0 if os.getppid() != want else interval_s):
            if os.getppid() != want:
                done.set()
                on_gone()

    if want > 1:   # started by init or a subreaper on purpose (systemd, a container): nothing to outlive
        threading.Thread(target=_watch, name="watch-parent", daemon=True).start()
    return done

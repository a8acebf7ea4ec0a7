"""Process supervision shared by every process the graph starts (no ROS): stop signals and the launcher's death.

A node must end when whoever started it ends, however that ends: a launcher that crashed or was SIGKILLed
must not leave the arm node and the recorders running. SIGKILL cannot be caught, so each child watches its
parent (``watch_parent``) and then shuts down as on Ctrl-C (recorders save the episode in flight). The
launcher passes its pid in ``PIPER_LAUNCHER_PID``, so a parent that died before the child's first look still
counts. SIGTERM and SIGHUP (a closed terminal, an ssh session gone) do what SIGINT does.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

LAUNCHER_PID_ENV = "PIPER_LAUNCHER_PID"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def on_stop_signals(handler: Callable[[int], None]) -> None:
    """Call ``handler(signum)`` on SIGINT, SIGTERM and SIGHUP, on a thread of its own (install from the main thread).

    Python runs a signal handler in the main thread between two bytecodes, which fails a stop two ways:
    - wherever that thread is: inside ``Event.wait``'s critical section, a handler calling ``Event.set`` waited
      for a lock its own thread held, and the process hung on every later signal too;
    - only if the main thread learns of it: the kernel gives a signal to any of the process's threads, and
      when another thread running bytecode took it, CPython (3.11, 3.12) cleared its "signals pending" flag
      and the handler waited for the next signal the main thread took (a stop that never came).
    So the signal's number is written to a pipe by CPython's C-level handler (``signal.set_wakeup_fd``),
    in whichever thread took it, with no Python lock; a daemon thread reading the pipe calls ``handler``,
    which may take any lock. The process has one wakeup fd: this claims it (no asyncio loop in the main
    thread may set its own).
    """
    read_fd, write_fd = os.pipe()  # not inherited by children
    os.set_blocking(write_fd, False)  # a full pipe drops the byte: pending stops enough

    def _deliver() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in STOP_SIGNALS:  # the wakeup fd carries every signal with a Python handler
                    handler(signum)

    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)  # ValueError outside the main thread
    for sig in STOP_SIGNALS:
        signal.signal(sig, _noop)  # a Python-level handler, so CPython's C handler runs (and writes the fd)
    threading.Thread(target=_deliver, name="stop-signals", daemon=True).start()  # a byte sent before waits


def _noop(_signum: int, _frame: Any) -> None:
    """The Python-level half of a stop signal: nothing (the wakeup fd delivers it, see ``on_stop_signals``)."""


def interrupt_on_stop_signals() -> None:
    """Make SIGTERM and SIGHUP raise KeyboardInterrupt like SIGINT.

    So ``with``/``finally`` clean-ups run (piper-demo stops its graph, pytest tears its fixtures down)
    instead of the process just dying.
    """

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


def watch_parent(on_gone: Callable[[], None], interval_s: float = 0.25, parent: int | None = None) -> threading.Event:
    """Call ``on_gone()`` once, on a daemon thread, when this process's parent is no longer ``parent``.

    ``parent`` defaults to ``expected_parent()``; polls ``getppid()`` every ``interval_s``. Returns an event
    that ends the watch when set.
    """
    want = expected_parent() if parent is None else parent
    done = threading.Event()

    def _watch() -> None:
        while not done.wait(0 if os.getppid() != want else interval_s):
            if os.getppid() != want:
                done.set()
                on_gone()

    if want > 1:  # started by init or a subreaper on purpose (systemd, a container): nothing to outlive
        threading.Thread(target=_watch, name="watch-parent", daemon=True).start()
    return done


TEARDOWN_TIMEOUT_S = 5.0


class TeardownWatchdog:
    """Bounds a process's last step: the middleware teardown after the node's own work is done.

    That teardown (``destroy_node``, ``rclpy.shutdown``) can hang inside rclpy/Fast DDS on a thread race
    (ros2/rclpy#456 and its kin), and a supervisor then SIGKILLs the process (``ros2 launch`` reports -9).
    If ``finish()`` has not come ``timeout_s`` after ``start()``, the watchdog prints every thread's Python
    stack on stderr and exits 0: nothing is left to lose, the node's work ended before ``start()``.
    """

    def __init__(self, what: str, timeout_s: float = TEARDOWN_TIMEOUT_S) -> None:
        self.what, self.timeout_s = what, timeout_s
        self._done = threading.Event()
        self._started = False

    def start(self) -> None:
        """Start the clock; a second call is a no-op.

        ``run_node`` starts it after the node's hook, or in its ``finally`` when the node never got that far.
        """
        if not self._started:
            self._started = True
            threading.Thread(target=self._watch, name="teardown-watchdog", daemon=True).start()

    def finish(self) -> None:
        """The teardown is done: the watchdog stands down."""
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        print(
            f"{self.what}: teardown still running {self.timeout_s:g} s after the node's work ended; "
            "exiting without it (exit 0). Where it hung:",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

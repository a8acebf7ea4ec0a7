"""Read a hidraw device on a thread of its own (no ROS, no dependency beyond the standard library).

The thread blocks in ``poll`` (half a second at most, so ``stop`` is prompt) and hands every report to
``on_report(t, report)`` with the monotonic time it was read: a SpaceMouse at rest sends nothing,
and then the thread costs nothing. A device that is absent, unplugged (``POLLHUP``/``POLLERR``, a read
error or end of file) or not readable is reported through ``on_state`` and opened again every
``reopen_s``; ``device="auto"`` looks for the first 3Dconnexion hidraw node again at each attempt
(hot-plug). A hidraw read returns one whole report, so reads are never split or joined here.

A node that is no HID device can keep the thread busy: ``/dev/zero`` never blocks (every read returns at
once), another device may send only reports the decoder refuses (``on_report`` returns False). More
than ``MAX_REPORTS_PER_S`` reports within a second (a full-speed USB interrupt endpoint's ceiling) or
``MAX_MALFORMED_RUN`` refused reports in a row close it as ``bad`` (``on_state("bad", why)``); it is
tried again after ``BAD_RETRY_S``, so such a node costs a few milliseconds every few seconds.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time
from collections.abc import Callable

from .hid import hidraw_devices

READ_SIZE = 64  # larger than any 3Dconnexion input report (a hidraw read returns one report)
POLL_MS = 500
MAX_REPORTS_PER_S = 1000  # USB full speed polls an interrupt endpoint at most every 1 ms
MAX_MALFORMED_RUN = 50  # reports in a row the caller refused: not the device it expects
BAD_RETRY_S = 5.0  # a bad device is opened again after this long (a replug, auto finding another)


class HidrawReader:
    """A thread reading a hidraw device's reports, reopening it as it comes and goes.

    ``on_report(t, report)`` returns False for a report it cannot use (None or True: fine);
    ``on_state(state, detail)``: "open", "absent", "lost" or "bad" with why.
    """

    def __init__(
        self,
        device: str,
        on_report: Callable[[float, bytes], bool | None],
        on_state: Callable[[str, str], None],
        reopen_s: float = 1.0,
        sysfs: str = "/sys/class/hidraw",
        dev: str = "/dev",
        bad_retry_s: float = BAD_RETRY_S,
    ):
        self.device, self.reopen_s, self.bad_retry_s = device, reopen_s, bad_retry_s
        self._on_report, self._on_state = on_report, on_state
        self._sysfs, self._dev = sysfs, dev
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spacemouse-hidraw", daemon=True)

    def start(self) -> HidrawReader:
        """Start the thread; returns the reader."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and close the device."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _resolve(self) -> tuple[str | None, str]:
        if self.device != "auto":
            return self.device, self.device
        found = hidraw_devices(self._sysfs, self._dev)
        if not found:
            return None, f"no 3Dconnexion device in {self._sysfs}"
        d = found[0]
        return d.path, f"{d.path} ({d.name or 'unnamed'}, {d.vendor:04x}:{d.product:04x})"

    def _run(self) -> None:
        while not self._stop.is_set():
            path, what = self._resolve()
            if path is None:
                self._on_state("absent", what)
                self._stop.wait(self.reopen_s)
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                self._on_state("absent", f"{what}: {exc.strerror}")
                self._stop.wait(self.reopen_s)
                continue
            try:
                self._on_state("open", what)
                state, reason = self._read(fd)
            finally:
                os.close(fd)
            if not self._stop.is_set():
                self._on_state(state, f"{what}: {reason}")
                self._stop.wait(self.bad_retry_s if state == "bad" else self.reopen_s)

    def _read(self, fd: int) -> tuple[str, str]:
        """Read reports until ``stop``, or until the device goes away ("lost") or turns out not to be one ("bad").

        The state reported says why.
        """
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        window_t, reads, refused = time.monotonic(), 0, 0
        while not self._stop.is_set():
            events = poller.poll(POLL_MS)
            if not events:
                continue
            mask = events[0][1]
            if not mask & select.POLLIN:
                return "lost", "hung up" if mask & select.POLLHUP else "device error"
            try:
                report = os.read(fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return "lost", f"read failed: {exc.strerror}"
            if not report:
                return "lost", "end of file"
            t = time.monotonic()
            reads += 1
            if reads > MAX_REPORTS_PER_S:
                if t - window_t < 1.0:
                    return "bad", (
                        f"more than {MAX_REPORTS_PER_S} reports a second (it never blocks: not a HID "
                        f"device?); trying again in {self.bad_retry_s:g} s"
                    )
                window_t, reads = t, 1
            if self._on_report(t, report) is False:
                refused += 1
                if refused >= MAX_MALFORMED_RUN:
                    return "bad", (
                        f"{refused} malformed reports in a row (not a SpaceMouse?); trying again in "
                        f"{self.bad_retry_s:g} s"
                    )
            else:
                refused = 0
        return "lost", "stopped"

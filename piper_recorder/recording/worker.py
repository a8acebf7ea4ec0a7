"""One thread that owns every call into a writer, so encoding and file I/O never run in ROS callbacks.

Calls keep their submission order (rows, frames, then save_episode), which is what makes "stop" safe:
everything assembled before the save is written before it.

Bounded lag: a recorder whose writer cannot keep up (a CPU-starved machine, a slow disk) must still
answer a stop. A frame that has waited longer than ``max_lag_s`` on this thread is dropped when its
turn comes (counted per camera in ``QueuedSink.behind``) instead of being encoded: a frame of its own
(capture mode) or the frames a row carries (nominal mode; the row itself is kept). Rows are never
dropped (they cost microseconds). So the backlog a save waits for is at most ~``max_lag_s`` of work
plus one frame's encoder wait, whatever the load, and ``lag_s()`` says at once how far behind it is.
A target whose rows cannot exist without their frame (the RGB-D steps) passes ``shed_row_frames=False``:
its rows are written whole, however late.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from piper_recorder.assembly import Frame, Row, Sink

T = TypeVar("T")
DEFAULT_MAX_LAG_S = 2.0


class WriterWorker:
    """The one thread that makes every writer call, in the order they were queued."""

    def __init__(self, name: str = "writer"):
        # (call, future or None, monotonic time it was queued)
        self._q: queue.Queue[tuple[Callable[[], Any], Future[Any] | None, float] | None] = queue.Queue()
        self.error: BaseException | None = None  # first failure of a fire-and-forget call since reset
        self._running_since: float | None = None  # when the call now running was queued
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def backlog(self) -> int:
        """The number of calls queued."""
        return self._q.qsize()

    def lag_s(self) -> float:
        """How long the call running now waited plus ran (0 when idle): how far behind the writer is."""
        since = self._running_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def post(self, fn: Callable[[], Any]) -> None:
        """Queue a call whose result nobody waits for; its first exception is kept in ``error``."""
        self._q.put((fn, None, time.monotonic()))

    def call(self, fn: Callable[[], T], timeout: float | None = None) -> T:
        """Run fn on the writer thread after everything queued before it; return its result or raise."""
        fut: Future[T] = Future()
        self._q.put((fn, fut, time.monotonic()))
        return fut.result(timeout)

    def take_error(self) -> BaseException | None:
        """The first failure of a fire-and-forget call since the last take, and reset it."""
        err, self.error = self.error, None
        return err

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the queued calls and stop the thread (waits up to ``timeout``)."""
        self._q.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, fut, queued = item
            self._running_since = queued
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller or kept for the save
                if fut is not None:
                    fut.set_exception(exc)
                elif self.error is None:
                    self.error = exc
            else:
                if fut is not None:
                    fut.set_result(result)
            finally:
                self._running_since = None


class QueuedSink:
    """Assembly sink that forwards to the real sink on the writer thread (rows/frames never block the caller).

    ``behind``: frames dropped per camera because they waited more than ``max_lag_s`` (module doc).
    """

    def __init__(
        self, inner: Sink, worker: WriterWorker, max_lag_s: float = DEFAULT_MAX_LAG_S, shed_row_frames: bool = True
    ):
        self.inner, self._worker, self.max_lag_s = inner, worker, max_lag_s
        self.shed_row_frames = shed_row_frames
        self.behind: dict[str, int] = {}

    def _shed(self, cameras: Iterable[str]) -> None:
        for cam in cameras:
            self.behind[cam] = self.behind.get(cam, 0) + 1

    def row(self, row: Row) -> None:
        """Queue the row for the writer thread, shedding its frames when the writer is too far behind."""
        if not (row.frames and self.shed_row_frames):
            self._worker.post(lambda: self.inner.row(row))
            return
        queued = time.monotonic()

        def write() -> None:
            if time.monotonic() - queued > self.max_lag_s:
                self._shed(row.frames)
                self.inner.row(dataclasses.replace(row, frames={}))
            else:
                self.inner.row(row)

        self._worker.post(write)

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        """Queue a frame for the writer thread, dropped when the writer is too far behind."""
        queued = time.monotonic()

        def write() -> None:
            if time.monotonic() - queued > self.max_lag_s:
                self._shed((camera,))
                return
            self.inner.frame(camera, frame, t)

        self._worker.post(write)

    def raw_quest(self, line: str) -> None:
        """Queue a raw headset line for the writer thread."""
        self._worker.post(lambda: self.inner.raw_quest(line))

"""One thread that owns every call into a writer, so encoding and file I/O never run in ROS callbacks.

Calls keep their submission order (rows, frames, then save_episode), which is what makes "stop" safe:
everything assembled before the save is written before it.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from piper_recorder.assembly import Frame, Row, Sink

T = TypeVar("T")


class WriterWorker:
    def __init__(self, name: str = "writer"):
        self._q: queue.Queue[tuple[Callable[[], Any], Future[Any] | None] | None] = queue.Queue()
        self.error: BaseException | None = None   # first failure of a fire-and-forget call since reset
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def backlog(self) -> int:
        return self._q.qsize()

    def post(self, fn: Callable[[], Any]) -> None:
        """Queue a call whose result nobody waits for; its first exception is kept in ``error``."""
        self._q.put((fn, None))

    def call(self, fn: Callable[[], T], timeout: float | None = None) -> T:
        """Run fn on the writer thread after everything queued before it; return its result or raise."""
        fut: Future[T] = Future()
        self._q.put((fn, fut))
        return fut.result(timeout)

    def take_error(self) -> BaseException | None:
        err, self.error = self.error, None
        return err

    def stop(self, timeout: float = 30.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, fut = item
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


class QueuedSink:
    """Assembly sink that forwards to the real sink on the writer thread (rows/frames never block the caller)."""

    def __init__(self, inner: Sink, worker: WriterWorker):
        self.inner, self._worker = inner, worker

    def row(self, row: Row) -> None:
        self._worker.post(lambda: self.inner.row(row))

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        self._worker.post(lambda: self.inner.frame(camera, frame, t))

    def raw_quest(self, line: str) -> None:
        self._worker.post(lambda: self.inner.raw_quest(line))

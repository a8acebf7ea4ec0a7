"""The executors a node spins on, chosen by what this rclpy can do, and the helpers around them.

``executor_for``/``executor_class`` choose one, ``spin_until`` spins it, ``ArrivalExecutor`` notes a service
request's arrival, ``run_in_thread`` runs work a coroutine service callback awaits.
"""

from __future__ import annotations

import inspect
import threading
import time
import typing
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node

from .stamps import now_ns


def spin_until(executor: Executor, stop: threading.Event) -> None:
    """Spin ``executor`` until ``stop`` is set or rclpy shuts down."""
    # spin_once in a loop rather than spin(): rclpy's EventsExecutor.spin() runs no timers when it is
    # spun from a thread other than the main one (Kilted wheels); spin_once does. spin_once runs one
    # callback: rclpy.ok() (it takes the context's lock) is asked after a wait of 50 ms or more (nothing
    # came: a shut-down context delivers nothing, its spin_once waits out the timeout) and every 256
    # callbacks, not after every message.
    ok, clock = rclpy.ok, time.monotonic
    n = 0
    try:
        while not stop.is_set():
            t = clock()
            executor.spin_once(timeout_sec=0.1)
            n += 1
            if (n & 255 == 0 or clock() - t >= 0.05) and not ok():
                break
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


EXECUTORS = ("events", "single", "multi")


# The first rclpy release of each line whose EventsExecutor awaits a coroutine service callback (ros2/rclpy
# pull 1478 and its Jazzy backport; before it the coroutine went to send_response, a TypeError, and the
# call never got an answer): Jazzy 7.1.11 (PyPI has 7.1.6), Kilted from 9.1.2 on as checked here, Rolling
# 10.0.1. A line or release not listed is taken not to (a single-threaded executor always does).
EVENTS_AWAIT_SERVICES_FROM = {7: (7, 1, 11), 9: (9, 1, 2), 10: (10, 0, 1)}


def rclpy_version() -> tuple[int, ...] | None:
    """The installed rclpy's release (PyPI's ``ros-rclpy`` or a ROS install's ``rclpy`` metadata)."""
    from importlib import metadata

    for dist in ("ros-rclpy", "rclpy"):
        try:
            text = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        parts = [int(p) for p in text.split(".")[:3] if p.isdigit()]
        return tuple(parts) if len(parts) == 3 else None
    return None


def events_executor_awaits_services(version: tuple[int, ...] | None = None) -> bool:
    """Whether this rclpy's EventsExecutor runs a coroutine service callback to its answer."""
    version = rclpy_version() if version is None else version
    first = EVENTS_AWAIT_SERVICES_FROM.get(version[0]) if version else None
    return first is not None and version is not None and version >= first


def executor_for(node: Node, kind: str = "events", *others: Node) -> str:
    """``kind``, or ``single`` where the EventsExecutor could not answer the services of the nodes it spins.

    Those are ``node`` and ``others`` (a ``HostNode``'s hosted nodes). That is when ``kind`` is ``events`` and a
    node answers a service with a coroutine this rclpy's EventsExecutor cannot await (the node's services are
    what it spins for).
    """
    if (
        kind == "events"
        and not events_executor_awaits_services()
        and any(inspect.iscoroutinefunction(srv.callback) for n in (node, *others) for srv in n.services)
    ):
        return "single"
    return kind


def executor_class(kind: str = "events") -> Callable[..., Executor]:
    """What makes the executor of ``kind``: its class, or for ``events`` rclpy's EventsExecutor (a factory).

    ``events`` (default): single-threaded, lowest cost per callback, and unlike the MultiThreadedExecutor it
    keeps up with a recorder's input (``bench/executor_overhead.py``); an rclpy without it (Humble's) gets
    the SingleThreadedExecutor instead. ``single``: the classic SingleThreadedExecutor; ``multi``:
    MultiThreadedExecutor (4 threads).
    Callbacks must not block on single-threaded executors: long work goes to a thread and a service
    callback awaits it as a coroutine (see ``run_in_thread``).
    """
    if kind == "events":
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:
            return SingleThreadedExecutor
        return EventsExecutor
    if kind == "single":
        return SingleThreadedExecutor
    if kind == "multi":
        return MultiThreadedExecutor
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")


def make_executor(kind: str = "events") -> Executor:
    """A new executor of ``executor_class(kind)`` (rclpy initialised)."""
    cls = executor_class(kind)
    return cls(num_threads=4) if cls is MultiThreadedExecutor else cls()


class ArrivalExecutor(SingleThreadedExecutor):
    """A single-threaded executor that notes each service request's arrival before its callback runs.

    ``arrival_ns``: the DDS reception time of the request whose callback is running
    (``rmw_service_info_t.received_timestamp``, system time), read by a callback as its first
    statement: on a single thread nothing else runs between the take and that read. A recorder ends an
    episode there, however long the request then waited for the GIL or the CPU. rclpy's executors give
    a callback the request only, so the take is done here: the Jazzy-and-later shape
    (``_take_service`` returns the coroutine to run) or the Humble/Iron one (``_execute_service``).
    With neither, or no timestamp, ``arrival_ns`` stays None and callers use their clock's now.
    """

    def __init__(self, context: Any = None) -> None:
        super().__init__(context=context)
        self.arrival_ns: int | None = None

    def _note(self, header: Any) -> None:
        stamp = getattr(header, "received_timestamp", None)
        self.arrival_ns = int(stamp) if isinstance(stamp, int) and stamp > 0 else None

    if hasattr(Executor, "_execute_service"):  # Humble/Iron: take, then execute with the header

        async def _execute_service(self, srv: Any, request_and_header: Any) -> None:
            if request_and_header is not None:
                self._note(request_and_header[1])
            await super()._execute_service(srv, request_and_header)  # type: ignore[misc]
    else:

        def _take_service(self, srv: Any) -> Any:
            from rclpy.exceptions import InvalidHandle
            from rclpy.executors import await_or_execute

            try:
                with srv.handle:
                    request, header = srv.handle.service_take_request(srv.srv_type.Request)
            except InvalidHandle:
                return None

            async def _execute() -> None:
                if header is None:
                    return
                self._note(header)
                response = await await_or_execute(srv.callback, request, srv.srv_type.Response())
                srv.send_response(response, header)

            return _execute


def arrival_or_now(executor: Executor, node: Node, max_age_s: float = 5.0) -> int:
    """The arrival time (ROS ns) of the request being served on ``executor``, else now.

    The arrival is known when ``executor`` is an ``ArrivalExecutor`` and the node runs on system time (no
    ``use_sim_time``).
    """
    now = now_ns(node)
    arrival = getattr(executor, "arrival_ns", None)
    if arrival is None or node.get_parameter("use_sim_time").value:
        return now
    return arrival if 0 <= now - arrival <= max_age_s * 1e9 else now


async def run_in_thread(fn: Callable[[], Any]) -> Any:
    """Await ``fn()`` run on a short-lived thread, from a coroutine callback, without blocking the executor."""
    from rclpy.task import Future

    fut: Future = Future()

    def _run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the awaiting callback
            fut.set_exception(typing.cast(Exception, exc))  # rclpy re-raises any (Kilted's stub says Exception)

    threading.Thread(target=_run, name="service-work", daemon=True).start()
    return await fut

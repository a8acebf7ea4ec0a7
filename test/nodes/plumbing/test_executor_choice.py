"""A node answering its services with coroutines gets an executor that awaits them, on every distro.

rclpy's EventsExecutor awaits a coroutine service callback only from a release on (Jazzy's 7.1.11; PyPI has
7.1.6, whose EventsExecutor hands the coroutine to send_response and the call is never answered).
``executor_for`` picks the single-threaded executor there; this checks the release table against what the
installed rclpy really does, and that the choice answers.
"""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.nodes.plumbing.executors import (  # noqa: E402
    events_executor_awaits_services,
    executor_class,
    executor_for,
    run_in_thread,
)


@pytest.mark.parametrize(
    "version,awaits",
    [
        ((7, 1, 6), False),
        ((7, 1, 11), True),
        ((7, 2, 0), True),
        ((3, 3, 16), False),
        ((9, 1, 1), False),
        ((9, 1, 2), True),
        ((10, 0, 1), True),
        ((11, 0, 0), False),
    ],
)
def test_release_table(version, awaits):
    assert events_executor_awaits_services(version) is awaits


def _answered(kind: str, ros_domain) -> bool:
    """Whether a coroutine service (awaiting work on a thread, as the recorders' start and stop do) spun by a
    ``kind`` executor (``chosen``: the one ``executor_for`` picks) answers a call within 5 s.
    """
    from rclpy.executors import SingleThreadedExecutor

    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        server = rclpy.create_node("coro_server", context=ctx)

        async def enable(_req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
            res.success = await run_in_thread(lambda: time.sleep(0.05) or True)
            return res

        server.create_service(Trigger, "/coro/enable", enable)
        ex = executor_class(executor_for(server) if kind == "chosen" else kind)(context=ctx)
        ex.add_node(server)
        client_node = rclpy.create_node("coro_client", context=ctx)
        client_ex = SingleThreadedExecutor(context=ctx)
        client_ex.add_node(client_node)
        client = client_node.create_client(Trigger, "/coro/enable")
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                try:
                    ex.spin_once(timeout_sec=0.05)
                except TypeError:
                    pass  # an EventsExecutor that cannot await the coroutine raises here, and goes on

        t = threading.Thread(target=spin, daemon=True)
        t.start()
        try:
            assert client.wait_for_service(10)
            fut = client.call_async(Trigger.Request())
            end = time.monotonic() + 5
            while not fut.done() and time.monotonic() < end:
                client_ex.spin_once(timeout_sec=0.05)
            return bool(fut.done() and fut.result().success)
        finally:
            stop.set()
            t.join(2)
            ex.shutdown(timeout_sec=1)
            client_ex.shutdown(timeout_sec=1)
            client_node.destroy_node()
            server.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


def test_the_events_executor_awaits_coroutine_services_exactly_where_the_table_says(ros_domain):
    assert _answered("events", ros_domain) is events_executor_awaits_services()


def test_the_executor_chosen_for_a_coroutine_service_answers_it(ros_domain):
    assert _answered("chosen", ros_domain)

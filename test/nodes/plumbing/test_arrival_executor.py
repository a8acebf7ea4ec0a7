"""ArrivalExecutor: a service callback learns when its request arrived, however long it waited its turn.

A recorder ends an episode at its stop request's arrival; on a loaded machine the request can wait
behind other work for its callback (here: a callback that holds the executor's only thread).
"""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.nodes.plumbing.executors import ArrivalExecutor, arrival_or_now  # noqa: E402
from piper_recorder.nodes.plumbing.stamps import now_ns  # noqa: E402


def test_a_request_queued_behind_a_busy_callback_keeps_its_arrival_time(ros_domain):
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        server = rclpy.create_node("arrival_server", context=ctx)
        ex = ArrivalExecutor(context=ctx)
        ex.add_node(server)
        seen: dict[str, int] = {}

        def busy(_req, res):
            time.sleep(0.5)  # the only thread is taken: the next request waits in DDS
            return res

        def stamp(_req, res):
            seen["arrival"], seen["now"] = arrival_or_now(ex, server), now_ns(server)
            return res

        server.create_service(Trigger, "/arrival/busy", busy)
        server.create_service(Trigger, "/arrival/stamp", stamp)
        stop = threading.Event()
        spinner = threading.Thread(target=lambda: [ex.spin_once(0.05) for _ in iter(stop.is_set, True)], daemon=True)
        spinner.start()

        client_node = rclpy.create_node("arrival_client", context=ctx)
        cex = SingleThreadedExecutor(context=ctx)
        cex.add_node(client_node)
        threading.Thread(target=cex.spin, daemon=True).start()
        c_busy = client_node.create_client(Trigger, "/arrival/busy")
        c_stamp = client_node.create_client(Trigger, "/arrival/stamp")
        assert c_busy.wait_for_service(timeout_sec=20) and c_stamp.wait_for_service(timeout_sec=20)
        for _ in range(2):  # the first round also matches the response readers
            f1 = c_busy.call_async(Trigger.Request())
            time.sleep(0.05)  # the busy callback is running
            sent = time.time_ns()
            f2 = c_stamp.call_async(Trigger.Request())
            end = time.monotonic() + 10
            while not (f1.done() and f2.done()) and time.monotonic() < end:
                time.sleep(0.01)
            assert f1.done() and f2.done()
        waited = (seen["now"] - seen["arrival"]) / 1e6
        assert waited > 300, seen  # it waited behind the busy callback ...
        assert -5 <= (seen["arrival"] - sent) / 1e6 < 100, (seen, sent)  # ... and arrived when it was sent
        stop.set()
        spinner.join(2)
        cex.shutdown()
        ex.shutdown()
    finally:
        rclpy.shutdown(context=ctx)

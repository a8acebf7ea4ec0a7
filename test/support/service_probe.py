"""A Trigger service and its callers in processes of their own, for test_service_call_latency.

``python service_probe.py server NAME``: serve ``NAME`` (std_srvs/Trigger) until killed.
``python service_probe.py calls NAME N``: call it ``N`` times, each from a new client as
``ros2 service call`` makes one (created, waited for, called once, destroyed), and print one JSON
line: each call's seconds from the request to the answer (None: no answer within 10 s).
``python service_probe.py unmatched NAME``: call ``NAME`` from a client whose reply reader the server can never
match (it asks for transient-local replies, the server's writer is volatile), then at once from a plain client,
and print one JSON line: the plain call's seconds to its answer (None: none within 10 s; up to 5 tries, the
first over 0.5 s). The server answers
the plain call only after giving up on the first, so this is how long a server waits for a client's reply
reader (the reply writer's ``max_blocking_time``).
"""

from __future__ import annotations

import json
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from std_srvs.srv import Trigger


def serve(name: str) -> None:
    node = Node("probe_server")

    def answer(_req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        res.success, res.message = True, "ok"
        return res

    node.create_service(Trigger, name, answer)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass


def calls(name: str, n: int) -> None:
    node = Node("probe_caller")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    seconds: list[float | None] = []
    for _ in range(n):
        client = node.create_client(Trigger, name)
        if not client.wait_for_service(timeout_sec=30.0):
            raise SystemExit(f"{name} not available")
        t0 = time.monotonic()
        future = client.call_async(Trigger.Request())
        executor.spin_until_future_complete(future, timeout_sec=10.0)
        seconds.append(time.monotonic() - t0 if future.done() else None)
        node.destroy_client(client)
    print(json.dumps({"seconds": seconds}))


def unmatched(name: str) -> None:
    node = Node("probe_caller")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    stranded = node.create_client(
        Trigger, name, qos_profile=QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    )
    plain = node.create_client(Trigger, name)
    if not plain.wait_for_service(timeout_sec=30.0):
        raise SystemExit(f"{name} not available")
    # a stranded request sent before the server has matched that client's request writer is not delivered,
    # and the plain call is then answered at once: try again (a few tries, so a server that does not wait for
    # the reply reader, answering each plain call in ~0.1 s, still shows as such)
    waited: float | None = 0.0
    for _ in range(5):
        time.sleep(0.5)
        stranded.call_async(Trigger.Request())
        t0 = time.monotonic()
        future = plain.call_async(Trigger.Request())
        executor.spin_until_future_complete(future, timeout_sec=10.0)
        waited = time.monotonic() - t0 if future.done() else None
        if waited is None or waited > 0.5:
            break
    print(json.dumps({"seconds": waited}))


if __name__ == "__main__":
    rclpy.init()
    try:
        if sys.argv[1] == "server":
            serve(sys.argv[2])
        elif sys.argv[1] == "unmatched":
            unmatched(sys.argv[2])
        else:
            calls(sys.argv[2], int(sys.argv[3]))
    finally:
        rclpy.try_shutdown()

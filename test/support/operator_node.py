"""The operator's side of a recording graph, as an rclpy node in the test's process: the recorders' Trigger
services, their status and episode events, and quest_video's status.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

RECORDERS = ("lerobot_recorder", "rgbd_recorder")


class Operator:
    """An rclpy node in this process: the recorders' services, parameters and events."""

    def __init__(self, env: dict[str, str]):
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from std_msgs.msg import String

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("headset_test_operator", context=self.ctx)
        self.events: list[dict[str, Any]] = []
        self.status: dict[str, dict[str, Any]] = {}
        self.video_status: dict[str, Any] = {}
        self.node.create_subscription(String, "/episode_events", lambda m: self.events.append(json.loads(m.data)), 50)
        for rec in RECORDERS:
            self.node.create_subscription(
                String, f"/{rec}/status", lambda m, r=rec: self.status.__setitem__(r, json.loads(m.data)), 10
            )
        self.node.create_subscription(
            String, "/quest_video/status", lambda m: self.video_status.update(json.loads(m.data)), 10
        )
        from std_srvs.srv import Trigger

        self.trigger = Trigger
        self.clients = {
            (rec, srv): self.node.create_client(Trigger, f"/{rec}/{srv}")
            for rec in RECORDERS
            for srv in ("start_episode", "stop_episode", "discard_episode", "delete_last_episode")
        }
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.ctx)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def call(self, rec: str, service: str, timeout: float = 60.0) -> tuple[bool, str]:
        """One Trigger call; clients are made once and kept (a fresh client's first request can go
        unanswered while discovery of its reply reader is still under way on a loaded machine).
        """
        client = self.clients[(rec, service)]
        assert client.wait_for_service(timeout), f"/{rec}/{service} not available"
        future = client.call_async(self.trigger.Request())
        end = time.monotonic() + timeout
        while not future.done() and time.monotonic() < end:
            time.sleep(0.02)
        assert future.done(), f"/{rec}/{service} did not answer"
        return future.result().success, future.result().message

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()

"""A test's rclpy node spun on a thread of its own, so the test body can wait and assert while it hears the graph."""

from __future__ import annotations

import threading


class SpunNode:
    """``node`` on a single-threaded executor; a subclass makes its subscriptions and clients, then ``start()``s it."""

    def __init__(self, name: str) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.node = rclpy.create_node(name)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def start(self) -> None:
        """Spin the node from now on (its callbacks run on the spin thread)."""
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        """Stop spinning and destroy the node."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self.node.destroy_node()

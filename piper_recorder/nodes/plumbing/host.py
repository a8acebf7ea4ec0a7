"""A node that runs other nodes of the graph in its own process, as a component container does for C++ nodes.

Nodes in one process share one DDS participant: a message published once reaches all of them, so the
publisher does one delivery for the process rather than one per node. They also share one interpreter
lock, so hosting suits nodes whose Python work is light (the sim cameras), not nodes that each keep busy
threads (the two recorders together saved nothing and, in quiet runs, ran their row ticks later:
docs/performance.md). Each
hosted node keeps its own name, parameter section, topics, services and threads. ``run_node`` spins the
hosted nodes with the host, calls the host's ``on_shutdown`` (which stops each) and destroys them before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rclpy.node import Node


class HostNode(Node):
    """The node of a process that runs others (``hosted``); it has no topic of its own."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.hosted: list[Node] = []

    def host(self, factories: Iterable[Callable[[], Node]]) -> None:
        """Create each node in turn.

        If one fails (a bad section: its ParameterError names it), stop and destroy those already created, then raise.
        """
        try:
            for make in factories:
                self.hosted.append(make())
        except BaseException:
            self.on_shutdown()
            for node in self.hosted:
                node.destroy_node()
            self.hosted.clear()
            raise

    def on_shutdown(self) -> None:
        """Stop every hosted node in turn (its own ``on_shutdown``, if any: a recorder saves its episode)."""
        for node in self.hosted:
            hook = getattr(node, "on_shutdown", None)
            if callable(hook):
                hook()

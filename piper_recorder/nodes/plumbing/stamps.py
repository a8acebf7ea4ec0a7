"""A node's clock as ROS stamps: now in nanoseconds and nanoseconds as a ``builtin_interfaces/Time``."""

from __future__ import annotations

from builtin_interfaces.msg import Time
from rclpy.node import Node


def ns_to_stamp(ns: int) -> Time:
    """Nanoseconds as a ROS stamp."""
    ns = int(ns)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def now_ns(node: Node) -> int:
    """The node's ROS clock now, in nanoseconds."""
    return node.get_clock().now().nanoseconds

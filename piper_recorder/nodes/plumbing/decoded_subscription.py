"""Subscriptions whose callback gets the message decoded from its bytes (``cdr.decode``) for the hot types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.node import Node

from piper_recorder.cdr.decode import decode, warm_decoder

# Message types whose subscriptions take the serialized bytes and decode them with ``cdr.decode``
# (the bag converter's decoder) instead of rclpy's conversion: the graph's hot topics.
DECODED_TYPES = frozenset(
    {
        "sensor_msgs/msg/Image",
        "sensor_msgs/msg/JointState",
        "geometry_msgs/msg/PoseStamped",
        "sensor_msgs/msg/Joy",
        "std_msgs/msg/String",
    }
)


def type_name(msg_class: Any) -> str:
    """The ``pkg/msg/Type`` name of an rclpy message class."""
    return f"{msg_class.__module__.split('.')[0]}/msg/{msg_class.__name__}"


class DecodeErrors:
    """Serialized messages that did not decode (never expected from a matched DDS type).

    Counted per topic and logged at most every 10 s, never raised into the executor.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, node: Node, topic: str, exc: Exception, what: str = "did not decode") -> None:
        """Count and log one dropped message of ``topic``."""
        self.counts[topic] = self.counts.get(topic, 0) + 1
        node.get_logger().error(
            f"{topic}: a message {what} ({exc!r}); dropped ({self.counts[topic]} so far)", throttle_duration_sec=10.0
        )


def create_decoded_subscription(
    node: Node,
    msg_class: Any,
    topic: str,
    callback: Callable[[Any], None],
    qos: Any,
    errors: DecodeErrors | None = None,
    **kwargs: Any,
) -> Any:
    """``node.create_subscription`` whose callback gets the message decoded by ``cdr.decode``.

    For ``DECODED_TYPES`` the callback gets a rosbags object with the ROS field names (``uint8[]`` as
    numpy), rclpy's own message otherwise. rclpy hands over the serialized bytes, so each message skips its
    C struct and the generated classes' per-field setters (``bench/executor_overhead.py``: ``decoded``). The
    graph's hot inputs are taken by ``PolledInputs`` instead, cheaper still; this is the executor form, for
    a subscription an executor must serve.
    """
    name = type_name(msg_class)
    if name not in DECODED_TYPES:
        return node.create_subscription(msg_class, topic, callback, qos, **kwargs)
    bad = errors if errors is not None else DecodeErrors()
    # the type store and this type's decoder are built here, before the subscription exists: built on the
    # first message they would hold the executor while images queue
    warm_decoder(name)

    def on_serialized(data: bytes) -> None:
        try:
            msg = decode(data, name)
        except Exception as exc:  # a payload the store cannot read: a counted drop, the executor goes on  # noqa: BLE001
            bad.add(node, topic, exc)
            return
        callback(msg)

    return node.create_subscription(msg_class, topic, on_serialized, qos, raw=True, **kwargs)

"""Serialized ROS 2 messages (CDR) decoded without rclpy: the ``rosbags`` type store of the ROS 2
release the project targets.

The bag converter reads bags with it, and the live recorders decode their hot subscriptions with it
(``nodes.common.create_decoded_subscription``: rclpy hands over the serialized bytes), so both give
the assembler the same message objects. Decoding here is what makes the live path cheaper: rclpy's
own conversion builds a Python object per nested field through the generated classes' setters
(a PoseStamped ~39 us, a 640x480 rgb8 Image ~226 us with its pixel copy; this store: ~9 and ~87 us,
``bench/executor_overhead.py`` measures the whole subscriber)."""
from __future__ import annotations

from typing import Any

from rosbags.typesys import Stores, get_typestore

STORE = Stores.ROS2_KILTED
TYPESTORE = get_typestore(STORE)


def decode(data: bytes | memoryview, msg_type: str) -> Any:
    """One serialized message of ``msg_type`` ("pkg/msg/Type") as a rosbags message object (the ROS
    field names; ``uint8[]`` as a numpy array); raises on a payload that does not decode."""
    return TYPESTORE.deserialize_cdr(bytes(data) if isinstance(data, memoryview) else data, msg_type)

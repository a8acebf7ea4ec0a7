"""Serialized ROS 2 messages (CDR) decoded without rclpy: the ``rosbags`` type store of the ROS 2
release the project targets.

The bag converter reads bags with the store, and the live recorders, teleop, piper_arm and
the sim cameras decode their hot subscriptions with it (``nodes.common.create_decoded_subscription``:
rclpy hands over the serialized bytes), so bag and live paths give the assembler the same message
objects. It is also cheaper: a subscriber process of a 100 Hz PoseStamped and a 100 Hz JointState on
this 2-core machine spent ~330 us of CPU per message on the EventsExecutor with rclpy's typed take,
~260 us taking the bytes and decoding them here, ~200 us taking the bytes alone (3 interleaved 35 s runs
each); ``bench/executor_overhead.py`` compares the kinds for a recorder's input. The store is loaded on
first use (~0.35 s of CPU): the nodes load it while they start (``warm_decoder``).
"""
from __future__ import annotations

import struct
from functools import cache
from typing import Any

from rosbags.typesys import Stores

STORE = Stores.ROS2_KILTED     # the bag converter's default store too (bag.source)


@cache
def typestore() -> Any:
    """The rosbags type store of ROS 2 Kilted (imported on first use: ~0.35 s of CPU)."""
    from rosbags.typesys import get_typestore

    return get_typestore(STORE)


@cache
def _decoder(msg_type: str) -> tuple[Any, Any, Any]:
    ts = typestore()
    msgdef = ts.get_msgdef(msg_type)
    return msgdef.deserialize_cdr_le, msgdef.deserialize_cdr_be, msgdef.cls


def warm_decoder(msg_type: str) -> None:
    """Load the store and build ``msg_type``'s decoder now (both cached): a node calls it while it starts,
    so its first message does not pay for them. Raises ``KeyError`` for a type the store does not know."""
    _decoder(msg_type)


def decode(data: bytes | memoryview, msg_type: str) -> Any:
    """One serialized message of ``msg_type`` ("pkg/msg/Type") as a rosbags message object (the ROS
    field names; ``uint8[]`` as a numpy array over ``data``, not a copy). Raises ``ValueError`` on a
    payload that is not CDR or too short for its fields; bytes after the message (alignment padding,
    or the slack of ``rclpy.serialization.serialize_message``'s buffer) are ignored, as rclpy's own
    deserializer ignores them (the store's ``deserialize_cdr`` refuses more than 3)."""
    view = memoryview(data)
    if len(view) < 4 or view[0] != 0 or view[1] not in (0, 1):
        raise ValueError(f"{msg_type}: not a CDR payload (encapsulation {bytes(view[:4]).hex()})")
    le, be, cls = _decoder(msg_type)
    try:
        message, _end = (le if view[1] else be)(view[4:], 0, cls, typestore())
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise ValueError(f"{msg_type}: payload does not decode: {exc}") from exc
    return message

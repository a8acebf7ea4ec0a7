"""Publishing a serialized message from a reusable ``bytearray`` (``cdr.encode.ImageBuffer``) without copying it to bytes.

rclpy's ``Publisher.publish`` takes serialized messages as ``bytes`` only; its binding's ``publish_raw`` copies
whatever it gets into the middleware's buffer, and where pybind11 converts a ``bytearray`` too (the Jazzy and
Kilted wheels) the buffer goes to it as it is. An rclpy whose binding refuses a ``bytearray`` (a TypeError: older
pybind11 builds) is sent ``bytes(buffer)`` instead, from then on: the same message, one copy more.
"""

from __future__ import annotations

from typing import Any

_takes_bytearray: bool | None = None  # what this rclpy's publish_raw accepts, learnt on the first publish


def publish_serialized(publisher: Any, buffer: bytes | bytearray) -> None:
    """Publish ``buffer``, one serialized message of ``publisher``'s type, copying it once (module doc)."""
    global _takes_bytearray
    if isinstance(buffer, bytes) or _takes_bytearray is False:
        publisher.publish(bytes(buffer))
        return
    handle = publisher.handle
    try:
        with handle:
            handle.publish_raw(buffer)
    except TypeError:
        if _takes_bytearray:  # it took one before: not a binding that refuses bytearray
            raise
        _takes_bytearray = False
        publisher.publish(bytes(buffer))
        return
    _takes_bytearray = True

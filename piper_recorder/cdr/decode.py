"""Serialized ROS 2 messages (CDR) decoded without rclpy, by the ``rosbags`` type store of the targeted release.

The bag converter reads bags with the store, and the live recorders, teleop, piper_arm and the sim cameras decode
their hot subscriptions with it (``PolledInputs``: rclpy hands over the serialized bytes), so bag and live paths
give the assembler the same message objects, at less CPU than rclpy's typed take (docs/performance.md). The
store is loaded on first use; the nodes load it while they start (``warm_decoder``).
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import numpy as np
from rosbags.typesys import Stores

STORE = Stores.ROS2_KILTED  # the bag converter's default store too (bag.source)


@cache
def typestore() -> Any:
    """The rosbags type store of ROS 2 Kilted (imported on first use, which costs: see ``warm_decoder``)."""
    from rosbags.typesys import get_typestore

    return get_typestore(STORE)


@cache
def _decoder(msg_type: str) -> tuple[Any, Any, Any]:
    ts = typestore()
    msgdef = ts.get_msgdef(msg_type)
    return msgdef.deserialize_cdr_le, msgdef.deserialize_cdr_be, msgdef.cls


def warm_decoder(msg_type: str) -> None:
    """Load the store and build ``msg_type``'s decoder now (both cached).

    A node calls it while it starts, so its first message does not pay for them. Raises ``KeyError`` for a type the
    store does not know.
    """
    _decoder(msg_type)


def decode(data: bytes | memoryview, msg_type: str) -> Any:
    """One serialized message of ``msg_type`` ("pkg/msg/Type") as a rosbags message object.

    The ROS field names; ``uint8[]`` as a numpy array over ``data``, not a copy. Raises ``ValueError`` on a payload
    that is not CDR or too short for its fields; bytes after the message (alignment padding, or the slack of
    ``rclpy.serialization.serialize_message``'s buffer) are ignored, as rclpy's own deserializer ignores them (the
    store's ``deserialize_cdr`` refuses more than 3).
    """
    view = memoryview(data)
    if len(view) < 4 or view[0] != 0 or view[1] not in (0, 1):
        raise ValueError(f"{msg_type}: not a CDR payload (encapsulation {bytes(view[:4]).hex()})")
    try:
        fast = _FAST.get(msg_type) if view[1] else None
        if fast is not None:
            return fast(view[4:])
        le, be, cls = _decoder(msg_type)
        message, _end = (le if view[1] else be)(view[4:], 0, cls, typestore())
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise ValueError(f"{msg_type}: payload does not decode: {exc}") from exc
    return message


# ---- the hot types, decoded with struct into the store's own classes ------------------------------
# The store's generated deserializers read field by field through a nested call per sub-message; these read
# each fixed block with one ``struct`` call and build the same objects (figures: docs/performance.md) (test_cdr: equal to the
# store's for random messages, and the same errors). Little-endian only (what every ROS 2 writer here
# sends); big-endian payloads take the store's path. Offsets count from the end of the encapsulation
# header; a field is aligned to its size; an empty sequence has no element alignment.
_HEAD = struct.Struct("<iII")  # stamp.sec, stamp.nanosec, frame_id length (with its NUL)
_U32 = struct.Struct("<I")
_POSE = struct.Struct("<7d")
_DIMS = struct.Struct("<II")


@cache
def _classes() -> dict[str, Any]:
    types = typestore().types
    return {
        name.rsplit("/", 1)[-1]: types[name]
        for name in (
            "builtin_interfaces/msg/Time",
            "std_msgs/msg/Header",
            "geometry_msgs/msg/Point",
            "geometry_msgs/msg/Quaternion",
            "geometry_msgs/msg/Pose",
            "geometry_msgs/msg/PoseStamped",
            "sensor_msgs/msg/JointState",
            "sensor_msgs/msg/Joy",
            "sensor_msgs/msg/Image",
            "std_msgs/msg/String",
        )
    }


def _text(view: memoryview, pos: int) -> tuple[str, int]:
    """A CDR string at ``pos`` (already aligned) -> (text, the offset after its NUL)."""
    (n,) = _U32.unpack_from(view, pos)
    end = pos + 4 + n
    if n < 1 or end > len(view) or view[end - 1] != 0:
        raise ValueError(f"string at {pos}: length {n} without its NUL inside the payload")
    return bytes(view[pos + 4 : end - 1]).decode(), end


def _header(view: memoryview, c: dict[str, Any]) -> tuple[Any, int]:
    sec, nanosec, n = _HEAD.unpack_from(view, 0)
    end = 12 + n
    if n < 1 or end > len(view) or view[end - 1] != 0:
        raise ValueError(f"header.frame_id: length {n} without its NUL inside the payload")
    return c["Header"](c["Time"](sec, nanosec), bytes(view[12 : end - 1]).decode()), end


def _array(view: memoryview, pos: int, dtype: str, size: int) -> tuple[np.ndarray, int]:
    """A sequence of a fixed-size type at ``pos`` (count aligned to 4, elements to their size)."""
    pos = (pos + 3) & -4
    (n,) = _U32.unpack_from(view, pos)
    pos += 4
    if n:
        pos = (pos + size - 1) & -size
    if pos + n * size > len(view):
        raise ValueError(f"sequence of {n} at {pos} runs past the payload")
    return np.frombuffer(view, dtype=dtype, count=n, offset=pos), pos + n * size


def _pose_stamped(view: memoryview) -> Any:
    c = _classes()
    header, pos = _header(view, c)
    x, y, z, qx, qy, qz, qw = _POSE.unpack_from(view, (pos + 7) & -8)
    return c["PoseStamped"](header, c["Pose"](c["Point"](x, y, z), c["Quaternion"](qx, qy, qz, qw)))


def _joint_state(view: memoryview) -> Any:
    c = _classes()
    header, pos = _header(view, c)
    pos = (pos + 3) & -4
    (count,) = _U32.unpack_from(view, pos)
    pos += 4
    names = []
    for _ in range(count):
        name, pos = _text(view, (pos + 3) & -4)
        names.append(name)
    position, pos = _array(view, pos, "<f8", 8)
    velocity, pos = _array(view, pos, "<f8", 8)
    effort, _ = _array(view, pos, "<f8", 8)
    return c["JointState"](header, names, position, velocity, effort)


def _joy(view: memoryview) -> Any:
    c = _classes()
    header, pos = _header(view, c)
    axes, pos = _array(view, pos, "<f4", 4)
    buttons, _ = _array(view, pos, "<i4", 4)
    return c["Joy"](header, axes, buttons)


def _image(view: memoryview) -> Any:
    c = _classes()
    header, pos = _header(view, c)
    pos = (pos + 3) & -4
    height, width = _DIMS.unpack_from(view, pos)
    encoding, pos = _text(view, pos + 8)
    is_bigendian = view[pos]
    pos = (pos + 1 + 3) & -4
    (step,) = _U32.unpack_from(view, pos)
    data, _ = _array(view, pos + 4, "u1", 1)
    return c["Image"](header, height, width, encoding, is_bigendian, step, data)


def _string(view: memoryview) -> Any:
    return _classes()["String"](_text(view, 0)[0])


_FAST = {
    "geometry_msgs/msg/PoseStamped": _pose_stamped,
    "sensor_msgs/msg/JointState": _joint_state,
    "sensor_msgs/msg/Joy": _joy,
    "sensor_msgs/msg/Image": _image,
    "std_msgs/msg/String": _string,
}

"""Serialized ROS 2 messages (CDR, little-endian XCDR1) built with ``struct`` for the graph's hot topics.

Why: rclpy's ``publish(msg)`` converts the Python message field by field into its C struct before serializing
it, most of a small message's publish; ``publish(bytes)`` hands the serialized message to the middleware as it
is. So the arm's 100 Hz topics, teleop's targets, the bridge's headset topics and the cameras (``ImageBuffer``: each
frame drawn into its message) publish messages built here (figures: docs/performance.md).

The layouts are ROS 2's (Fast DDS's CDR as rmw_fastrtps writes it): a 4-byte encapsulation header (``00 01 00
00``: CDR little-endian), then each field aligned to its own size counted from the end of that header, strings as
a uint32 length including the NUL, sequences as a uint32 count then the elements. Padding bytes are zeros and
nothing follows the last field; every reader takes those as the same message. ``test_cdr_encode`` checks each
encoder against rclpy. No ROS import here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

ENCAPSULATION = b"\x00\x01\x00\x00"
_STAMP = struct.Struct("<iI")
_U32 = struct.Struct("<I")
_POSE = struct.Struct("<7d")
_IMAGE_DIMS = struct.Struct("<II")
_ZEROS = bytes(8)


def _pad(offset: int, align: int) -> bytes:
    return _ZEROS[: -offset % align]


@lru_cache(maxsize=256)
def _string(text: str) -> bytes:
    """A CDR string: uint32 length (with the NUL), the UTF-8 bytes, the NUL (no trailing padding)."""
    raw = text.encode()
    return _U32.pack(len(raw) + 1) + raw + b"\x00"


def _stamp(stamp_ns: int) -> bytes:
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return _STAMP.pack(sec, nanosec)


@lru_cache(maxsize=64)
def _header_tail(frame_id: str, align: int) -> bytes:
    """``header.frame_id`` and the padding up to the next field's alignment (the stamp's 8 bytes come first)."""
    s = _string(frame_id)
    return s + _pad(8 + len(s), align)


def restamp(message: bytes, stamp_ns: int) -> bytes:
    """A serialized message whose first field is a ``std_msgs/Header``, with ``header.stamp`` replaced.

    A message that never changes but for its stamp (a camera's CameraInfo) is serialized once and restamped.
    """
    return message[:4] + _stamp(stamp_ns) + message[12:]


def pose_stamped(stamp_ns: int, frame_id: str, position: Sequence[float], quat_xyzw: Sequence[float]) -> bytes:
    """geometry_msgs/PoseStamped."""
    x, y, z = position
    qx, qy, qz, qw = quat_xyzw
    return b"".join((ENCAPSULATION, _stamp(stamp_ns), _header_tail(frame_id, 8), _POSE.pack(x, y, z, qx, qy, qz, qw)))


@lru_cache(maxsize=64)
def _names_block(frame_id: str, names: tuple[str, ...]) -> tuple[bytes, int]:
    """A JointState's frame_id and name sequence (constant for a publisher), and the offset it ends at."""
    out = bytearray(_header_tail(frame_id, 4))
    off = 8 + len(out)
    out += _U32.pack(len(names))
    off += 4
    for n in names:
        s = _pad(off, 4) + _string(n)
        out += s
        off += len(s)
    return bytes(out), off


def _doubles(values: Sequence[float], offset: int) -> tuple[bytes, int]:
    n = len(values)
    head = _pad(offset, 4) + _U32.pack(n)
    offset += len(head)
    if not n:
        return head, offset
    pad = _pad(offset, 8)
    body = struct.pack(f"<{n}d", *values)
    return head + pad + body, offset + len(pad) + len(body)


def joint_state(
    stamp_ns: int,
    frame_id: str,
    names: Sequence[str],
    position: Sequence[float],
    velocity: Sequence[float] = (),
    effort: Sequence[float] = (),
) -> bytes:
    """sensor_msgs/JointState."""
    block, off = _names_block(frame_id, tuple(names))
    parts = [ENCAPSULATION, _stamp(stamp_ns), block]
    for values in (position, velocity, effort):
        b, off = _doubles(values, off)
        parts.append(b)
    return b"".join(parts)


def joy(stamp_ns: int, frame_id: str, axes: Sequence[float], buttons: Sequence[int]) -> bytes:
    """sensor_msgs/Joy (axes float32, buttons int32)."""
    tail = _header_tail(frame_id, 4)
    na, nb = len(axes), len(buttons)
    return b"".join(
        (
            ENCAPSULATION,
            _stamp(stamp_ns),
            tail,
            _U32.pack(na),
            struct.pack(f"<{na}f", *axes),
            _U32.pack(nb),
            struct.pack(f"<{nb}i", *buttons),
        )
    )


def string(text: str) -> bytes:
    """std_msgs/String."""
    raw = text.encode()
    return b"".join((ENCAPSULATION, _U32.pack(len(raw) + 1), raw, b"\x00"))


@lru_cache(maxsize=32)
def _image_meta(frame_id: str, height: int, width: int, encoding: str, step: int, size: int) -> bytes:
    """An Image's fields after the stamp up to its data's bytes (constant for a camera stream)."""
    out = bytearray(_header_tail(frame_id, 4))
    out += _IMAGE_DIMS.pack(height, width)
    off = 8 + len(out)
    enc = _string(encoding)
    out += enc
    off += len(enc)
    out += b"\x00"  # is_bigendian
    off += 1
    out += _pad(off, 4) + _U32.pack(step) + _U32.pack(size)
    return bytes(out)


class ImageBuffer:
    """One camera stream's serialized sensor_msgs/Image in a reusable ``bytearray``: pixels written in place.

    A camera that renders each frame into ``pixels`` and sets the stamp (``set_stamp``) publishes ``buffer`` as
    it is: no new message per frame, so one copy of the frame and one allocation of its size fewer. Only the
    stamp and the pixels change between frames; ``image`` builds a one-off message the same way.
    """

    def __init__(self, frame_id: str, height: int, width: int, encoding: str, step: int):
        size = height * step
        head = ENCAPSULATION + _stamp(0) + _image_meta(frame_id, height, width, encoding, step, size)
        self.buffer = bytearray(len(head) + size)
        self.buffer[: len(head)] = head
        self.data_offset = len(head)

    @property
    def pixels(self) -> memoryview:
        """The message's ``data`` bytes, writable (``height * step``)."""
        return memoryview(self.buffer)[self.data_offset :]

    def set_stamp(self, stamp_ns: int) -> None:
        """Set ``header.stamp`` (ns)."""
        _STAMP.pack_into(self.buffer, 4, *divmod(int(stamp_ns), 1_000_000_000))


def image(
    stamp_ns: int, frame_id: str, height: int, width: int, encoding: str, step: int, data: bytes | memoryview
) -> bytes:
    """One sensor_msgs/Image with little-endian pixels, as bytes: an ``ImageBuffer`` filled once.

    ``data``: ``height * step`` bytes, e.g. a C-contiguous numpy array's ``memoryview``.
    """
    buf = ImageBuffer(frame_id, height, width, encoding, step)
    buf.pixels[:] = memoryview(data).cast("B")
    buf.set_stamp(stamp_ns)
    return bytes(buf.buffer)

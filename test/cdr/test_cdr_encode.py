"""The struct-built serialized messages (``cdr.encode``) are the messages rclpy would publish: rclpy's own
deserializer gives back every field, and the bytes equal rclpy's serialization wherever rmw writes
defined bytes (it leaves alignment padding unset and adds slack after the last field).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from piper_recorder.cdr import encode as enc

rclpy_serialization = pytest.importorskip("rclpy.serialization")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

serialize, deserialize = rclpy_serialization.serialize_message, rclpy_serialization.deserialize_message
FRAME_IDS = ["", "a", "ab", "abc", "arm_base", "quest_world", "cam_front_color_optical_frame", "bras_ø"]


def stamp(rng: random.Random) -> int:
    return rng.randrange(0, 2**31) * 1_000_000_000 + rng.randrange(0, 1_000_000_000)


def set_header(msg, ns: int, frame_id: str) -> None:
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
    msg.header.frame_id = frame_id


def same_defined_bytes(ours: bytes, msg) -> None:
    """Our bytes are rmw's for the same message apart from its padding: a copy of ours re-serialized by
    rclpy starts with ours byte for byte, except where rmw leaves padding unset (zero in ours).
    """
    theirs = serialize(msg)
    assert len(theirs) >= len(ours)
    diff = [i for i in range(len(ours)) if ours[i] != theirs[i]]
    assert all(ours[i] == 0 for i in diff), f"defined bytes differ at {diff[:8]}"


def test_pose_stamped_round_trips_through_rclpy():
    rng = random.Random(1)
    for frame_id in FRAME_IDS:
        ns = stamp(rng)
        pos, quat = [rng.uniform(-2, 2) for _ in range(3)], [rng.uniform(-1, 1) for _ in range(4)]
        ours = enc.pose_stamped(ns, frame_id, pos, quat)
        m = deserialize(ours, PoseStamped)
        assert (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.header.frame_id) == (ns, frame_id)
        assert [m.pose.position.x, m.pose.position.y, m.pose.position.z] == pos
        assert [m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w] == quat
        same_defined_bytes(ours, m)


@pytest.mark.parametrize(
    "names", [[], ["gripper"], [f"joint{i}" for i in range(1, 7)] + ["gripper"], ["a", "bb", "ccc", "dddd"]]
)
def test_joint_state_round_trips_through_rclpy(names):
    rng = random.Random(len(names))
    for frame_id in FRAME_IDS:
        for lengths in ((len(names),) * 3, (len(names), 0, 0), (len(names), len(names), 0), (0, 0, len(names))):
            ns = stamp(rng)
            arrays = [[rng.uniform(-3, 3) for _ in range(n)] for n in lengths]
            ours = enc.joint_state(ns, frame_id, names, *arrays)
            m = deserialize(ours, JointState)
            assert (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.header.frame_id) == (ns, frame_id)
            assert list(m.name) == names
            assert [list(m.position), list(m.velocity), list(m.effort)] == arrays
            same_defined_bytes(ours, m)


def test_joy_and_string_round_trip_through_rclpy():
    rng = random.Random(3)
    for frame_id in FRAME_IDS:
        for na, nb in ((4, 4), (0, 0), (3, 5), (1, 0), (0, 2)):
            ns = stamp(rng)
            axes = [float(np.float32(rng.uniform(-1, 1))) for _ in range(na)]
            buttons = [rng.choice([0, 1, -7, 2**31 - 1]) for _ in range(nb)]
            ours = enc.joy(ns, frame_id, axes, buttons)
            m = deserialize(ours, Joy)
            assert (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.header.frame_id) == (ns, frame_id)
            assert [float(a) for a in m.axes] == axes and list(m.buttons) == buttons
            same_defined_bytes(ours, m)
    for text in ("", "x", '{"t": 1.5, "head": [0, 0, 0]}', "ünïcode ✓" * 40):
        ours = enc.string(text)
        assert deserialize(ours, String).data == text
        same_defined_bytes(ours, String(data=text))


@pytest.mark.parametrize(
    "encoding,dtype,channels", [("rgb8", np.uint8, 3), ("16UC1", np.uint16, 1), ("mono8", np.uint8, 1)]
)
def test_image_round_trips_through_rclpy(encoding, dtype, channels):
    rng = np.random.default_rng(4)
    for frame_id in FRAME_IDS[:5]:
        for h, w in ((48, 64), (3, 5), (1, 1)):
            px = rng.integers(0, np.iinfo(dtype).max, size=(h, w, channels) if channels > 1 else (h, w), dtype=dtype)
            ns = int(rng.integers(0, 2**31)) * 1_000_000_000 + int(rng.integers(0, 1_000_000_000))
            step = w * channels * np.dtype(dtype).itemsize
            ours = enc.image(ns, frame_id, h, w, encoding, step, px.data)
            m = deserialize(ours, Image)
            assert (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.header.frame_id) == (ns, frame_id)
            assert (m.height, m.width, m.encoding, m.is_bigendian, m.step) == (h, w, encoding, 0, step)
            assert bytes(m.data) == px.tobytes()
            same_defined_bytes(ours, m)


def test_an_image_buffer_is_the_image_message_with_its_pixels_and_stamp_set_in_place():
    rng = np.random.default_rng(5)
    for encoding, dtype, channels in (("rgb8", np.uint8, 3), ("16UC1", "<u2", 1)):
        for frame_id in FRAME_IDS:
            h, w = 6, 10
            shape = (h, w, channels) if channels > 1 else (h, w)
            step = w * channels * np.dtype(dtype).itemsize
            buf = enc.ImageBuffer(frame_id, h, w, encoding, step)
            pixels = np.frombuffer(buf.pixels, dtype).reshape(shape)  # a writable view of the message's data
            for _ in range(2):  # the same buffer, frame after frame
                px = rng.integers(0, 255, size=shape).astype(dtype)
                ns = int(rng.integers(0, 2**31)) * 1_000_000_000 + int(rng.integers(0, 1_000_000_000))
                pixels[...] = px
                buf.set_stamp(ns)
                m = deserialize(bytes(buf.buffer), Image)
                assert (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.header.frame_id) == (ns, frame_id)
                assert (m.height, m.width, m.encoding, m.step) == (h, w, encoding, step)
                assert bytes(m.data) == px.tobytes()
                same_defined_bytes(bytes(buf.buffer), m)  # rmw's bytes for the message the buffer now holds


def test_restamp_changes_only_the_stamp():
    info = CameraInfo()
    set_header(info, 5, "cam_front_color_optical_frame")
    info.height, info.width, info.distortion_model = 480, 640, "plumb_bob"
    info.d = [0.0] * 5
    info.k = [600.0, 0.0, 320.0, 0.0, 600.0, 240.0, 0.0, 0.0, 1.0]
    template = serialize(info)
    m = deserialize(enc.restamp(template, 1_700_000_000_123_456_789), CameraInfo)
    assert (m.header.stamp.sec, m.header.stamp.nanosec) == (1_700_000_000, 123_456_789)
    set_header(info, 1_700_000_000_123_456_789, "cam_front_color_optical_frame")
    assert m == info

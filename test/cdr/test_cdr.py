"""cdr.decode.decode reads what rclpy serializes (the bytes a raw subscription hands over) back to the
same values, ignores bytes after the message as rclpy does, and refuses a payload cut short or not CDR.
"""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from geometry_msgs.msg import PoseStamped
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image, JointState, Joy
from std_msgs.msg import String

from piper_recorder.cdr import decode as cdr


@pytest.mark.parametrize("frame", ["", "a", "ab", "abc", "arm_base", "ünï"])  # every string length mod 4
def test_decode_reads_rclpys_bytes(frame: str) -> None:
    m = PoseStamped()
    m.header.stamp.sec, m.header.stamp.nanosec, m.header.frame_id = 1_764_000_000, 999_999_999, frame
    m.pose.position.x, m.pose.position.z, m.pose.orientation.z, m.pose.orientation.w = 0.3, -0.25, 0.6, 0.8
    d = cdr.decode(bytes(serialize_message(m)), "geometry_msgs/msg/PoseStamped")
    assert (d.header.stamp.sec, d.header.stamp.nanosec, d.header.frame_id) == (1_764_000_000, 999_999_999, frame)
    assert (d.pose.position.x, d.pose.position.z, d.pose.orientation.z, d.pose.orientation.w) == (0.3, -0.25, 0.6, 0.8)
    j = JointState(name=["joint1", "gripper"], position=[0.5, 0.02], effort=[1.5, -2.0])
    j.header.frame_id = frame
    dj = cdr.decode(memoryview(bytes(serialize_message(j))), "sensor_msgs/msg/JointState")
    assert list(dj.name) == ["joint1", "gripper"] and dj.position.tolist() == [0.5, 0.02]
    assert dj.velocity.tolist() == [] and dj.effort.tolist() == [1.5, -2.0]
    joy = cdr.decode(bytes(serialize_message(Joy(axes=[0.25, -1.0], buttons=[1, 0, 1]))), "sensor_msgs/msg/Joy")
    assert joy.axes.tolist() == [0.25, -1.0] and joy.buttons.tolist() == [1, 0, 1]
    s = cdr.decode(bytes(serialize_message(String(data=frame + "✓"))), "std_msgs/msg/String")
    assert s.data == frame + "✓"


def test_decode_is_lenient_after_the_message_and_strict_before_its_end() -> None:
    raw = bytes(serialize_message(JointState(name=["joint1"], position=[0.5], effort=[1.0])))
    assert cdr.decode(raw + bytes(8), "sensor_msgs/msg/JointState").effort.tolist() == [1.0]
    with pytest.raises(ValueError):
        cdr.decode(raw[:20], "sensor_msgs/msg/JointState")
    with pytest.raises(ValueError):
        cdr.decode(b"\x07\x07" + raw[2:], "sensor_msgs/msg/JointState")
    with pytest.raises(ValueError):
        cdr.decode(b"\x00\x01", "std_msgs/msg/String")


def test_decoded_image_pixels_are_a_view_of_the_payload() -> None:
    img = Image(height=2, width=3, encoding="rgb8", step=9, data=bytes(range(18)))
    d = cdr.decode(bytes(serialize_message(img)), "sensor_msgs/msg/Image")
    assert (d.height, d.width, d.encoding, d.step) == (2, 3, "rgb8", 9)
    assert d.data.tobytes() == bytes(range(18)) and not d.data.flags["OWNDATA"]


def same(a, b) -> bool:
    """Two decoded messages hold the same fields (numpy arrays: same dtype and values)."""
    import dataclasses

    import numpy as np

    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def store_decode(data: bytes, msg_type: str):
    le, _be, cls = cdr._decoder(msg_type)
    return le(memoryview(data)[4:], 0, cls, cdr.typestore())[0]


def test_fast_decoders_give_the_stores_objects_and_refuse_every_cut() -> None:
    """The struct decoders of the hot types build the same objects as the store's generated deserializers
    for random messages (every string length mod 4, empty and full sequences), and a payload cut anywhere
    before its last field's end is a ValueError, never a partial message.
    """
    import random

    import numpy as np

    from piper_recorder.cdr import encode as enc

    rng = random.Random(11)
    frames = ["", "a", "ab", "abc", "abcd", "arm_base", "ünï"]
    names = [[], ["gripper"], [f"joint{i}" for i in range(1, 7)] + ["gripper"], ["a", "bb", "ccc"]]
    cases = []
    for f in frames:
        ns = rng.randrange(0, 2**31) * 1_000_000_000 + rng.randrange(0, 1_000_000_000)
        cases.append(
            (
                "geometry_msgs/msg/PoseStamped",
                enc.pose_stamped(ns, f, [rng.random() for _ in range(3)], [rng.random() for _ in range(4)]),
            )
        )
        for n in names:
            arrays = [[rng.uniform(-3, 3) for _ in n], [rng.uniform(-3, 3) for _ in n][:1], []]
            cases.append(("sensor_msgs/msg/JointState", enc.joint_state(ns, f, n, *arrays)))
        cases.append(("sensor_msgs/msg/Joy", enc.joy(ns, f, [0.5, -0.25, 1.0], [1, 0, 1, 1])))
        cases.append(("sensor_msgs/msg/Joy", enc.joy(ns, f, [], [])))
        for enc_name, px in (
            ("rgb8", np.arange(18, dtype=np.uint8)),
            ("16UC1", np.arange(6, dtype=np.uint16)),
            ("x", np.zeros(0, np.uint8)),
        ):
            cases.append(("sensor_msgs/msg/Image", enc.image(ns, f, 1, len(px), enc_name, px.nbytes, px.data)))
        cases.append(("std_msgs/msg/String", enc.string(f * 3)))
    assert set(cdr._FAST) == {t for t, _ in cases}
    for msg_type, data in cases:
        fast = cdr.decode(data, msg_type)
        assert same(fast, store_decode(data, msg_type)), (msg_type, data.hex())
        assert same(cdr.decode(data + bytes(7), msg_type), fast)
        for cut in range(4, len(data)):
            with pytest.raises(ValueError):
                cdr.decode(data[:cut], msg_type)

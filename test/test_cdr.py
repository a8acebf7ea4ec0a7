"""assembly.cdr.decode reads what rclpy serializes (the bytes a raw subscription hands over) back to the
same values, ignores bytes after the message as rclpy does, and refuses a payload cut short or not CDR."""
from __future__ import annotations

import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image, JointState, Joy
from std_msgs.msg import String

from piper_recorder.assembly import cdr


@pytest.mark.parametrize("frame", ["", "a", "ab", "abc", "arm_base", "ünï"])   # every string length mod 4
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

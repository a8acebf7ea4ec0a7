"""create_decoded_subscription: the hot topics' messages reach callbacks decoded by cdr.decode (the
bag converter's decoder) with the same values rclpy's own conversion gives; a payload that does not
decode is a counted drop, and the executor goes on.
"""

from __future__ import annotations

import array
import threading
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from piper_recorder.assembly.messages import image_to_numpy  # noqa: E402
from piper_recorder.nodes.plumbing.decoded_subscription import (  # noqa: E402
    DECODED_TYPES,
    DecodeErrors,
    create_decoded_subscription,
    type_name,
)


def _messages():
    p = PoseStamped()
    p.header.stamp.sec, p.header.stamp.nanosec, p.header.frame_id = 12, 345_678_901, "arm_base"
    p.pose.position.x, p.pose.position.y, p.pose.position.z = 0.3, -0.1, 0.25
    p.pose.orientation.x, p.pose.orientation.w = 0.6, 0.8
    j = JointState()
    j.header.stamp.sec = 7
    j.name = [f"joint{i}" for i in range(1, 7)] + ["gripper"]
    j.position = [0.1 * i for i in range(7)]
    img = Image()
    img.header.stamp.nanosec = 5
    img.height, img.width, img.encoding, img.step = 4, 6, "rgb8", 18
    img.data = array.array("B", bytes(range(72)))
    s = String(data='{"t": 1.5, "ünïcode": "✓"}')
    joy = Joy(axes=[0.25, 1.0, -0.5, 0.0], buttons=[1, 0, 0, 1])
    return {"/d/pose": p, "/d/joints": j, "/d/image": img, "/d/string": s, "/d/joy": joy}


def test_decoded_messages_carry_what_was_published_and_garbage_is_a_counted_drop(ros_domain):
    assert {type_name(c) for c in (PoseStamped, Image, JointState, Joy, String)} <= DECODED_TYPES
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node("decoded_sub", context=ctx)
        sent = _messages()
        got: dict[str, object] = {}
        errors = DecodeErrors()
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        for topic, msg in sent.items():
            create_decoded_subscription(node, type(msg), topic, lambda m, t=topic: got.__setitem__(t, m), qos, errors)
        infos: list[object] = []  # a type not in DECODED_TYPES: rclpy's own message
        create_decoded_subscription(node, CameraInfo, "/d/info", infos.append, qos)
        pubs = {t: node.create_publisher(type(m), t, qos) for t, m in sent.items()}
        pub_info = node.create_publisher(CameraInfo, "/d/info", qos)
        ex = rclpy.executors.SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        stop = threading.Event()
        spinner = threading.Thread(target=lambda: [ex.spin_once(0.05) for _ in iter(stop.is_set, True)], daemon=True)
        spinner.start()
        end = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < end:
            for t, m in sent.items():
                if t not in got:
                    pubs[t].publish(m)
            pub_info.publish(CameraInfo(width=640))
            time.sleep(0.1)
        assert set(got) == set(sent)
        p = got["/d/pose"]
        assert (p.header.stamp.sec, p.header.stamp.nanosec, p.header.frame_id) == (12, 345_678_901, "arm_base")
        assert (p.pose.position.x, p.pose.position.y, p.pose.position.z) == (0.3, -0.1, 0.25)
        assert (p.pose.orientation.x, p.pose.orientation.w) == (0.6, 0.8)
        j = got["/d/joints"]
        assert list(j.name) == list(sent["/d/joints"].name) and np.allclose(j.position, sent["/d/joints"].position)
        img = image_to_numpy(got["/d/image"])
        assert img.shape == (4, 6, 3) and img.tobytes() == bytes(range(72))
        assert got["/d/string"].data == sent["/d/string"].data
        joy = got["/d/joy"]
        assert [float(a) for a in joy.axes] == [0.25, 1.0, -0.5, 0.0] and [int(b) for b in joy.buttons] == [1, 0, 0, 1]
        assert infos and isinstance(infos[0], CameraInfo) and infos[0].width == 640

        # a payload that is not a PoseStamped (published serialized, as rclpy allows): dropped, counted
        before = dict(got)
        got.clear()
        pubs["/d/pose"].publish(b"\x00\x01\x00\x00\x07")
        end = time.monotonic() + 10
        while not errors.counts and time.monotonic() < end:
            time.sleep(0.05)
        assert errors.counts == {"/d/pose": 1} and "/d/pose" not in got
        pubs["/d/pose"].publish(sent["/d/pose"])  # ... and the next good one still arrives
        end = time.monotonic() + 10
        while "/d/pose" not in got and time.monotonic() < end:
            time.sleep(0.05)
        stop.set()
        spinner.join(5)
        assert got["/d/pose"].pose.position.x == before["/d/pose"].pose.position.x
    finally:
        rclpy.shutdown(context=ctx)

"""publish_serialized: a reusable bytearray reaches subscribers as the message it holds, frame after frame; an
rclpy whose binding refuses a bytearray gets the same message as bytes.
"""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from piper_recorder.cdr import encode as cdr_encode  # noqa: E402
from piper_recorder.nodes.plumbing import serialized  # noqa: E402

from support.waiting import wait_for  # noqa: E402


def test_a_reused_bytearray_is_published_as_what_it_holds_at_each_publish(ros_domain, monkeypatch):
    monkeypatch.setattr(serialized, "_takes_bytearray", None)
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node("serialized_publish", context=ctx)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        got: list[str] = []
        node.create_subscription(String, "/lines", lambda m: got.append(m.data), qos)
        pub = node.create_publisher(String, "/lines", qos)
        ex = rclpy.executors.SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        wait_for(lambda: pub.get_subscription_count() >= 1, 10, "the subscription matched")
        buf = bytearray(cdr_encode.string("first"))
        serialized.publish_serialized(pub, buf)
        buf[8:13] = b"again"  # the same buffer, changed after its publish: the first message is not affected
        serialized.publish_serialized(pub, buf)
        serialized.publish_serialized(pub, cdr_encode.string("bytes"))

        def spun() -> bool:
            ex.spin_once(timeout_sec=0.05)
            return len(got) >= 3

        wait_for(spun, 10, "three messages")
        assert got == ["first", "again", "bytes"]
        assert serialized._takes_bytearray is True  # this rclpy's binding took the buffer itself
    finally:
        rclpy.shutdown(context=ctx)


class _BytesOnlyHandle:
    """An rclpy publisher's binding that converts only bytes to the message buffer (older pybind11 builds)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    def publish_raw(self, msg: object) -> None:
        if not isinstance(msg, bytes):
            raise TypeError("publish_raw(): incompatible function arguments")
        self.sent.append(msg)


class _Publisher:
    """``rclpy.publisher.Publisher``'s two entry points over such a binding."""

    def __init__(self) -> None:
        self.handle = _BytesOnlyHandle()

    def publish(self, msg: bytes) -> None:
        assert isinstance(msg, bytes)
        with self.handle:
            self.handle.publish_raw(msg)


def test_a_binding_that_refuses_a_bytearray_is_sent_bytes_from_then_on(monkeypatch):
    monkeypatch.setattr(serialized, "_takes_bytearray", None)
    pub = _Publisher()
    buf = bytearray(cdr_encode.string("one"))
    serialized.publish_serialized(pub, buf)
    buf[8:11] = b"two"
    serialized.publish_serialized(pub, buf)
    assert pub.handle.sent == [cdr_encode.string("one"), cdr_encode.string("two")]
    assert serialized._takes_bytearray is False


def test_a_type_error_from_a_binding_that_took_bytearrays_before_is_not_swallowed(monkeypatch):
    monkeypatch.setattr(serialized, "_takes_bytearray", True)
    with pytest.raises(TypeError):
        serialized.publish_serialized(_Publisher(), bytearray(cdr_encode.string("x")))

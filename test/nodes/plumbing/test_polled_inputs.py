"""PolledInputs: subscriptions no executor serves. ``poll`` hands over every waiting message in order,
decoded (cdr.decode) with its DDS reception time; a payload that does not decode is a counted drop;
the owner's remappings apply; ``wait`` returns when a message waits, at its timeout, or on ``interrupt``;
the owner's executor never runs their callbacks.
"""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from piper_recorder.cdr import encode as cdr_encode  # noqa: E402
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs  # noqa: E402

from support.waiting import wait_for  # noqa: E402

QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


def _matched(*pubs) -> None:
    """Wait (up to 10 s) until each publisher has its subscriber."""
    wait_for(lambda: all(p.get_subscription_count() >= 1 for p in pubs), 10, "the subscriptions matched")


def test_polled_inputs_hand_over_in_order_with_reception_times(ros_domain):
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    stop = threading.Event()
    try:
        # the owner remaps /arm/eef_pose: its polled subscription must follow
        owner = rclpy.create_node("owner", context=ctx, cli_args=["--ros-args", "-r", "/arm/eef_pose:=/robot/eef"])
        talker = rclpy.create_node("talker", context=ctx)
        inputs = PolledInputs(owner)
        assert inputs.node.get_name() == "owner_inputs"
        poses: list[tuple[object, int]] = []
        lines: list[tuple[str, int]] = []
        inputs.subscribe(PoseStamped, "/arm/eef_pose", lambda m, t: poses.append((m, t)), QOS)

        def on_line(m, t: int) -> None:
            if m.data == "boom":
                raise RuntimeError("a handler that fails")
            lines.append((m.data, t))

        inputs.subscribe(String, "/lines", on_line, QOS)
        ex = rclpy.executors.SingleThreadedExecutor(context=ctx)  # spins the owner: must not touch the inputs
        ex.add_node(owner)
        ex.add_node(talker)
        errors: list[BaseException] = []

        def spin() -> None:
            while not stop.is_set():
                try:
                    ex.spin_once(0.05)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    errors.append(exc)

        threading.Thread(target=spin, daemon=True).start()
        pose_pub = talker.create_publisher(PoseStamped, "/robot/eef", QOS)
        line_pub = talker.create_publisher(String, "/lines", QOS)
        _matched(pose_pub, line_pub)
        assert inputs.wait(0.05) is False and inputs.poll() == 0  # nothing sent yet

        before = time.time_ns()
        for i in range(20):
            pose_pub.publish(cdr_encode.pose_stamped(1_000 + i, "arm_base", (0.01 * i, 0.0, 0.3), (0, 0, 0, 1)))
            line_pub.publish(cdr_encode.string(f"line {i}"))
        pose_pub.publish(b"\x00\x01\x00\x00\x03")  # not a PoseStamped: dropped and counted
        line_pub.publish(cdr_encode.string("boom"))  # its handler raises: dropped and counted, polling goes on
        line_pub.publish(cdr_encode.string("after"))
        assert inputs.wait(5.0) is True

        def all_polled() -> bool:
            inputs.poll()
            return len(poses) >= 20 and len(lines) >= 21

        wait_for(all_polled, 5, "the 20 poses and 21 lines polled", step=0.01)
        after = time.time_ns()
        assert [m.header.stamp.nanosec for m, _ in poses] == [1_000 + i for i in range(20)]
        assert [m.pose.position.x for m, _ in poses] == [0.01 * i for i in range(20)]
        assert [d for d, _ in lines] == [f"line {i}" for i in range(20)] + ["after"]
        stamps = [t for _, t in poses + lines]
        assert all(before <= t <= after for t in stamps)
        assert [t for _, t in lines] == sorted(t for _, t in lines)
        assert inputs.errors.counts == {"/robot/eef": 1, "/lines": 1}
        assert errors == []  # the executor never ran a polled subscription's callback

        # a wait ends at once on interrupt, else at its timeout
        t0 = time.monotonic()
        threading.Timer(0.1, inputs.interrupt).start()
        assert inputs.wait(5.0) is False and time.monotonic() - t0 < 2.0
        t0 = time.monotonic()
        assert inputs.wait(0.2) is False and time.monotonic() - t0 >= 0.15
        inputs.destroy()
    finally:
        stop.set()
        time.sleep(0.1)
        rclpy.shutdown(context=ctx)


def test_a_poll_ends_and_reaches_every_topic_while_a_slow_handler_topic_keeps_coming(ros_domain):
    """A topic whose handler takes longer than its messages' period (piper_arm refusing targets after its IK
    search) gets at most its depth per poll: the poll returns, and the other topic's message is handed over.
    """
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    stop = threading.Event()
    try:
        owner = rclpy.create_node("owner", context=ctx)
        talker = rclpy.create_node("talker", context=ctx)
        inputs = PolledInputs(owner)
        newest = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        targets: list[float] = []
        widths: list[float] = []

        def slow(m, _t: int) -> None:
            time.sleep(0.015)  # slower than the 5 ms between targets
            targets.append(m.pose.position.x)

        inputs.subscribe(PoseStamped, "/arm/target_pose", slow, newest)
        inputs.subscribe(String, "/arm/target_gripper", lambda m, _t: widths.append(float(m.data)), newest)
        pose_pub = talker.create_publisher(PoseStamped, "/arm/target_pose", newest)
        width_pub = talker.create_publisher(String, "/arm/target_gripper", newest)
        _matched(pose_pub, width_pub)

        def stream() -> None:
            i = 0
            while not stop.is_set():
                pose_pub.publish(cdr_encode.pose_stamped(i, "arm_base", (0.001 * i, 0.0, 0.3), (0, 0, 0, 1)))
                i += 1
                time.sleep(0.005)

        threading.Thread(target=stream, daemon=True).start()
        assert inputs.wait(5.0) is True
        width_pub.publish(cdr_encode.string("0.03"))
        time.sleep(0.05)  # the width is waiting before the poll starts
        polls: list[int] = []
        poller = threading.Thread(target=lambda: polls.extend(inputs.poll() for _ in range(3)), daemon=True)
        poller.start()
        poller.join(timeout=3.0)
        assert not poller.is_alive(), f"a poll still taking the slow topic after 3 s ({len(targets)} taken)"
        assert widths == [0.03], widths
        assert polls[0] == 2 and all(1 <= n <= 2 for n in polls), polls  # at most the depth of each
        stop.set()
        inputs.destroy()
    finally:
        stop.set()
        time.sleep(0.1)
        rclpy.shutdown(context=ctx)

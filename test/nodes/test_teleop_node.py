"""The teleop node as a real process: topics in and out, haptic on engage, recorder services from
buttons (including hold-to-delete), no targets while released or fed NaN, and stop on a stale stream.
"""

from __future__ import annotations

import math
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from support.proc import ProcGroup  # noqa: E402
from support.teleop_graph import ARM, FakeGraph  # noqa: E402
from support.waiting import wait_for  # noqa: E402


@pytest.fixture
def graph(ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    g = FakeGraph()
    with ProcGroup(ros_domain.env(), tmp_path) as procs:
        procs.start("piper-teleop", "--ros-args", "-p", "control_rate_hz:=100.0")
        try:
            wait_for(lambda: g.status, 20, "teleop status")
            yield g
        finally:
            print(procs.logs())  # shown by pytest only when the test fails
            g.close()
            rclpy.shutdown()


def test_teleop_node_end_to_end(graph):
    g = graph
    time.sleep(1.0)
    assert not g.targets, "targets published while released"

    # grip -> engage: haptic pulse, targets start exactly at the measured pose
    g.joy["right"][1] = 1.0
    wait_for(lambda: len(g.targets) > 20, 5, "targets after engage")
    assert g.haptics and g.haptics[0]["hand"] == "right"
    first = g.targets[0][1]
    assert first.header.frame_id == "arm_base"
    assert abs(first.pose.position.x - ARM[0]) < 1e-9 and abs(first.pose.position.z - ARM[2]) < 1e-9

    # move the hand 5 cm forward (xr -z): the target heads to robot +x, within the speed cap
    g.hand = [0.2, 1.1, -0.40]
    time.sleep(1.0)
    xs = [m.pose.position.x for _, m in g.targets]
    assert xs[-1] > ARM[0] + 0.04
    times = [t for t, _ in g.targets[-60:]]
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert 30 < rate < 130, rate  # 100 Hz nominal; generous for a loaded 2-core box
    g.joy["right"][0] = 1.0  # trigger fully pressed closes the gripper
    time.sleep(0.3)
    assert g.grippers[0] == pytest.approx(0.07) and g.grippers[-1] == pytest.approx(0.0)

    # NaN controller pose: rejected, the watchdog releases, nothing non-finite ever leaves
    g.hand = [math.nan, 1.1, -0.4]
    time.sleep(0.8)
    n = len(g.targets)
    time.sleep(0.3)
    assert len(g.targets) == n, "targets kept flowing on NaN input"
    for _, m in g.targets:
        p, q = m.pose.position, m.pose.orientation
        assert all(math.isfinite(v) for v in (p.x, p.y, p.z, q.x, q.y, q.z, q.w))
        assert 0.05 <= p.x <= 0.55 and -0.35 <= p.y <= 0.35 and 0.03 <= p.z <= 0.50

    # buttons: A starts, A stops, B discards; holding left X 1 s deletes once
    g.hand = [0.2, 1.1, -0.35]
    for b in (2, 2, 3):
        g.joy["right"][b] = 1
        time.sleep(0.15)
        g.joy["right"][b] = 0
        time.sleep(0.15)
    g.joy["left"][2] = 1
    time.sleep(1.5)
    g.joy["left"][2] = 0
    wait_for(lambda: len(g.calls) >= 8, 5, "recorder service calls")
    time.sleep(0.3)
    order = [c.split("/")[1] for c in g.calls if c.startswith("lerobot_recorder/")]
    assert order == ["start_episode", "stop_episode", "discard_episode", "delete_last_episode"]
    assert sorted(c.split("/")[0] for c in g.calls).count("rgbd_recorder") == 4

    # headset silent while engaged (grip re-armed first): targets stop within the watchdog
    g.joy["right"][1] = 0.0
    time.sleep(0.2)
    g.joy["right"][1] = 1.0
    wait_for(lambda: g.targets and time.monotonic() - g.targets[-1][0] < 0.05, 5, "re-engage")
    g.headset = False
    t_stop = time.monotonic()
    time.sleep(1.0)
    last = g.targets[-1][0] - t_stop
    assert last < 0.6, f"targets {last:.3f} s after the headset went silent"
    assert g.status[-1]["unsafe_targets"] == 0 and g.status[-1]["rejected_inputs"] > 0

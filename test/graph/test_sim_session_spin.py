"""SimSession's own node keeps being spun while waits subscribe and unsubscribe.

Destroying an entity of a node that a MultiThreadedExecutor waits on in another thread makes rclpy raise
``InvalidHandle`` out of ``spin``. The session's waits (the first message of each input, the EEF's
motion, a parameter call) used to create and destroy their subscriptions and clients on the session's
node: the spin ended in silence, and the session saw no recorder status and no service response again
(a test waited 120 s for a stop answer the recorder had given). The waits now use a probe node spun by
the waiting thread, and an error out of the session's executor is printed and spun past.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from piper_recorder.graph.sim_session import SimSession
from piper_recorder.names import EEF_POSE, STATUS, node_topic

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]


class _Graph:
    def stop(self) -> dict:
        return {}


class _Lease:
    def release(self) -> None:
        pass


class _Plan:
    arms: tuple[str, ...] = ()  # one arm: the waits watch the root namespace's topics


def _session() -> SimSession:
    s = SimSession.__new__(SimSession)  # the session's ROS client without a graph
    s._cond, s.events, s.status, s._stopping, s._clients = threading.Condition(), [], {}, False, {}
    s.graph, s.lease, s.plan = _Graph(), _Lease(), _Plan()  # type: ignore[assignment]
    s._start_client()
    return s


def test_waits_that_subscribe_and_unsubscribe_leave_the_session_spinning(ros_domain, capfd):
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from std_msgs.msg import String

    ros_domain.apply()
    s = _session()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    peer = rclpy.create_node("peer", context=ctx)
    pose_pub = peer.create_publisher(PoseStamped, EEF_POSE, 10)
    status_pub = peer.create_publisher(String, node_topic("lerobot_recorder", STATUS), 10)
    stop = threading.Event()

    def publish() -> None:
        k = 0
        while not stop.is_set():
            m = PoseStamped()
            m.pose.position.x = 0.001 * (k % 20)  # moves 19 mm back and forth
            pose_pub.publish(m)
            if k % 20 == 0:
                status_pub.publish(String(data=json.dumps({"answers": k})))
            k += 1
            time.sleep(0.002)

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    try:
        node = s._live()
        for _ in range(10):  # the waits' own churn: a probe node each time
            assert s._first_message(PoseStamped, EEF_POSE, 10.0) is not None
            assert s.wait_motion(0.005, timeout=10.0) >= 0.005
        # an entity of the session's node destroyed while it is spun (the hazard itself): spun past
        for _ in range(30):
            sub = node.create_subscription(PoseStamped, EEF_POSE, lambda _m: None, 10)
            time.sleep(0.02)
            node.destroy_subscription(sub)
        assert s._spinner is not None and s._spinner.is_alive()
        with s._cond:
            s.status.clear()
        with s._cond:  # the session still receives: a fresh status arrives
            assert s._cond.wait_for(lambda: "lerobot_recorder" in s.status, 10.0), "the session went deaf"
    finally:
        stop.set()
        t.join(2)
        peer.destroy_node()
        rclpy.shutdown(context=ctx)
        s.stop()
        assert s._spinner is not None
        s._spinner.join(5)
        assert not s._spinner.is_alive()

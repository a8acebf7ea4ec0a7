"""The graph around a teleop process, faked by one rclpy node in the test: quest_bridge's poses and joys,
piper_arm's feedback (its targets and gripper commands recorded) and two recorders' services (the calls and
labels they get recorded).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from sensor_msgs.msg import JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

ARM = (0.25, 0.0, 0.25)


def _pose(p, q=(0.0, 0.0, 0.0, 1.0), frame="quest_stage"):
    m = PoseStamped()
    m.header.frame_id = frame
    m.pose.position.x, m.pose.position.y, m.pose.position.z = p
    m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w = q
    return m


class FakeGraph:
    """Stands in for quest_bridge, piper_arm and two recorders around the teleop process."""

    def __init__(self):
        self.node = rclpy.create_node("teleop_test_probe")
        n = self.node
        self.pub_pose = n.create_publisher(PoseStamped, "/quest/right/pose", 10)
        self.pub_joy = {h: n.create_publisher(Joy, f"/quest/{h}/joy", 10) for h in ("left", "right")}
        self.pub_eef = n.create_publisher(PoseStamped, "/arm/eef_pose", 10)
        self.pub_js = n.create_publisher(JointState, "/arm/joint_states", 10)
        self.targets: list[tuple[float, PoseStamped]] = []
        self.grippers: list[float] = []
        self.haptics: list[dict] = []
        self.calls: list[str] = []
        self.status: list[dict] = []
        n.create_subscription(
            PoseStamped, "/arm/target_pose", lambda m: self.targets.append((time.monotonic(), m)), 100
        )
        n.create_subscription(JointState, "/arm/target_gripper", lambda m: self.grippers.append(m.position[0]), 100)
        n.create_subscription(String, "/quest/haptic", lambda m: self.haptics.append(json.loads(m.data)), 10)
        n.create_subscription(String, "/teleop/status", lambda m: self.status.append(json.loads(m.data)), 10)
        from diagnostic_msgs.srv import AddDiagnostics

        for rec in ("lerobot_recorder", "rgbd_recorder"):
            for srv in ("start_episode", "stop_episode", "discard_episode", "delete_last_episode"):
                n.create_service(Trigger, f"/{rec}/{srv}", self._handler(f"{rec}/{srv}"))
            # the stop chord's label (docs/curation.md): a JSON request in load_namespace, as the recorders take it
            n.create_service(AddDiagnostics, f"/{rec}/label_episode", self._label_handler(rec))
        self.labels: list[tuple[str, dict]] = []
        self.hand = [0.2, 1.1, -0.35]
        self.joy = {"right": [0.0, 0.0, 0, 0, 0, 0], "left": [0.0, 0.0, 0, 0, 0, 0]}  # trig, squeeze, buttons
        self.headset = True
        self.arm = True  # False: the arm feedback stops (piper_arm gone)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(n)
        self._stop = threading.Event()
        self._spin = threading.Thread(target=self._run, daemon=True)
        self._feed = threading.Thread(target=self._feeder, daemon=True)
        self._spin.start()
        self._feed.start()

    def _handler(self, name):
        def handle(_req, resp):
            self.calls.append(name)
            resp.success, resp.message = True, "ok"
            return resp

        return handle

    def _label_handler(self, rec):
        def handle(req, resp):
            self.labels.append((rec, json.loads(req.load_namespace)))
            resp.success, resp.message = self.on_label(rec, self.labels[-1][1])
            return resp

        return handle

    def on_label(self, rec, label):
        return True, f"labelled {label.get('outcome')}"

    def _run(self):
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _feeder(self):
        while not self._stop.is_set():
            if self.arm:
                self.pub_eef.publish(_pose(ARM, frame="arm_base"))
                js = JointState()
                js.name = [f"joint{i}" for i in range(1, 7)] + ["gripper"]
                js.position = [0.0] * 7
                self.pub_js.publish(js)
            if self.headset:
                self.pub_pose.publish(_pose(self.hand))
                for h, (trig, sq, *b) in self.joy.items():
                    j = Joy()
                    # stamped, as quest_bridge's: a stop press asks for stop_episode_at, which these fake
                    # recorders lack (an older build), so teleop falls back to stop_episode
                    j.header.stamp = self.node.get_clock().now().to_msg()
                    j.axes, j.buttons = [float(trig), float(sq), 0.0, 0.0], [int(x) for x in b]
                    self.pub_joy[h].publish(j)
            time.sleep(0.011)

    def close(self):
        self._stop.set()
        self._feed.join(2)
        self._spin.join(2)
        self.executor.shutdown()
        self.node.destroy_node()

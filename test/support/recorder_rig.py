"""Test rig for the recorder process tests: a synthetic arm + cameras publisher and service/event helpers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Float32, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.nodes.plumbing.stamps import ns_to_stamp  # noqa: E402

W, H = 64, 48


def frame_value(i: int) -> int:
    """Uniform grey level of synthetic frame i (distinct steps survive lossy encoding)."""
    return (i * 8) % 256


class Rig:
    """Publishes /arm/* at 100 Hz (commands at 50 Hz), cameras at 30 fps (64x48), optional reward."""

    def __init__(self, ros_domain, cams=("cam_front", "cam_wrist"), depth=False, reward=False):
        ros_domain.apply()
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = Node("test_rig", context=self.ctx)
        n = self.node
        rel = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.pub_js = n.create_publisher(JointState, "/arm/joint_states", rel)
        self.pub_eef = n.create_publisher(PoseStamped, "/arm/eef_pose", rel)
        self.pub_cmd = n.create_publisher(PoseStamped, "/arm/commanded_pose", rel)
        self.pub_grip = n.create_publisher(JointState, "/arm/commanded_gripper", rel)
        self.pub_reward = n.create_publisher(Float32, "/reward", rel) if reward else None
        self.pub_prov = n.create_publisher(String, "/arm/provenance", latched)
        self.pub_prov.publish(
            String(
                data=json.dumps(
                    {
                        "backend": "emulator",
                        "kp": 10.0,
                        "kd": 0.8,
                        "t_ff": 0.0,
                        "gravity_ff": True,
                        "firmware": "S-V1.6-3",
                    }
                )
            )
        )
        self.pub_img = {c: n.create_publisher(Image, f"/{c}/color/image_raw", rel) for c in cams}
        self.pub_depth = (
            {c: n.create_publisher(Image, f"/{c}/aligned_depth_to_color/image_raw", rel) for c in cams} if depth else {}
        )
        self.events: list[dict] = []
        self.status: dict[str, dict] = {}
        self.status_at: dict[str, float] = {}
        n.create_subscription(
            String,
            "/episode_events",
            lambda m: self.events.append(json.loads(m.data)),
            QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE),
        )
        self.frames_published = dict.fromkeys(cams, 0)
        self._rng = np.random.default_rng(0)
        self.paused = threading.Event()
        self._stop = threading.Event()
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.ctx)
        self.executor.add_node(n)
        self._spin = threading.Thread(target=self.executor.spin, daemon=True)
        self._spin.start()
        self._pub = threading.Thread(target=self._publish_loop, daemon=True)
        self._pub.start()

    def watch_status(self, recorder: str) -> None:
        self.node.create_subscription(String, f"/{recorder}/status", lambda m: self._on_status(recorder, m), 10)

    def _on_status(self, recorder: str, msg: String) -> None:
        self.status[recorder] = json.loads(msg.data)
        self.status_at[recorder] = time.monotonic()

    def wait_up(self, recorder: str, since: float, timeout: float = 20.0) -> dict:
        """Wait for a status message published after ``since`` (monotonic): that process is up.

        Needed after a SIGKILL: the dead server's endpoints linger in discovery, so wait_for_service
        alone may return before the new process can take requests.
        """
        end = time.monotonic() + timeout
        while self.status_at.get(recorder, -1.0) <= since:
            assert time.monotonic() < end, f"no /{recorder}/status since the restart"
            time.sleep(0.02)
        return self.status[recorder]

    def _publish_loop(self) -> None:
        i = 0
        next_cam = time.time_ns()
        cam_i = 0
        while not self._stop.is_set():
            t = time.time_ns()
            if not self.paused.is_set():
                stamp = ns_to_stamp(t)
                v = (t / 1e9) % 10.0
                js = JointState(
                    name=[f"joint{k}" for k in range(1, 7)] + ["gripper"], position=[v + k for k in range(6)] + [0.05]
                )
                js.header.stamp = stamp
                self.pub_js.publish(js)
                eef = PoseStamped()
                eef.header.stamp = stamp
                eef.pose.position.x, eef.pose.orientation.w = v, 1.0
                self.pub_eef.publish(eef)
                if i % 2 == 0:
                    cmd = PoseStamped()
                    cmd.header.stamp = stamp
                    cmd.pose.position.y, cmd.pose.orientation.z, cmd.pose.orientation.w = v, 0.6, 0.8
                    self.pub_cmd.publish(cmd)
                    g = JointState(name=["gripper"], position=[0.03])
                    g.header.stamp = stamp
                    self.pub_grip.publish(g)
                    if self.pub_reward is not None:
                        self.pub_reward.publish(Float32(data=1.0))
                if t >= next_cam:
                    next_cam += 1_000_000_000 // 30
                    self._publish_frame(cam_i, stamp)
                    cam_i += 1
            i += 1
            self._stop.wait(0.01)

    def publish_late_joint_state(self, age_s: float) -> None:
        """One joint state stamped ``age_s`` in the past: it reaches the recorder after its row was made."""
        js = JointState(name=[f"joint{k}" for k in range(1, 7)] + ["gripper"], position=[9.0] * 6 + [0.05])
        js.header.stamp = ns_to_stamp(time.time_ns() - int(age_s * 1e9))
        self.pub_js.publish(js)

    def _publish_frame(self, i: int, stamp) -> None:
        for cam, pub in self.pub_img.items():
            msg = Image(height=H, width=W, encoding="rgb8", step=W * 3)
            msg.header.stamp = stamp
            msg.data = (np.full((H, W, 3), frame_value(i), np.uint8) + self._noise(8, (H, W, 3))).tobytes()
            pub.publish(msg)
            self.frames_published[cam] += 1
            if cam in self.pub_depth:
                d = Image(height=H, width=W, encoding="16UC1", step=W * 2)
                d.header.stamp = stamp
                d.data = (np.full((H, W), 500 + i % 1000, np.uint16) + self._noise(50, (H, W))).tobytes()
                self.pub_depth[cam].publish(d)

    def _noise(self, hi: int, shape: tuple[int, ...]) -> np.ndarray:
        """Mild noise: real frames never compress to identical sizes."""
        return self._rng.integers(0, hi, shape).astype(np.uint8 if len(shape) == 3 else np.uint16)

    def _call(self, srv_type: Any, recorder: str, service: str, request: Any, timeout: float) -> Any:
        cli = self.node.create_client(srv_type, f"/{recorder}/{service}")
        try:
            assert cli.wait_for_service(timeout_sec=timeout), f"/{recorder}/{service} not available"
            fut = cli.call_async(request)
            end = time.monotonic() + timeout
            while not fut.done():
                assert time.monotonic() < end, f"/{recorder}/{service} timed out"
                time.sleep(0.01)
            return fut.result()
        finally:
            self.node.destroy_client(cli)

    def call(self, recorder: str, service: str, timeout: float = 60.0) -> Trigger.Response:
        return self._call(Trigger, recorder, service, Trigger.Request(), timeout)

    def call_json(self, recorder: str, service: str, payload: dict | str, timeout: float = 60.0):
        """A recorder's AddDiagnostics service (``label_episode``, ``stop_episode_at``): ``payload`` as JSON
        in ``load_namespace`` (a str as it is); the response (success, message).
        """
        from diagnostic_msgs.srv import AddDiagnostics

        text = payload if isinstance(payload, str) else json.dumps(payload)
        return self._call(AddDiagnostics, recorder, service, AddDiagnostics.Request(load_namespace=text), timeout)

    def set_param(self, recorder: str, name: str, value, timeout: float = 20.0) -> None:
        """What ``ros2 param set /<recorder> <name> <value>`` does."""
        from rclpy.parameter import Parameter
        from rclpy.parameter_client import AsyncParameterClient

        client = AsyncParameterClient(self.node, recorder)
        assert client.wait_for_services(timeout_sec=timeout)
        fut = client.set_parameters([Parameter(name, value=value)])
        end = time.monotonic() + timeout
        while not fut.done():
            assert time.monotonic() < end, f"setting {recorder}.{name} timed out"
            time.sleep(0.01)
        assert all(r.successful for r in fut.result().results), fut.result()

    def wait_events(self, n: int, timeout: float = 10.0) -> list[dict]:
        end = time.monotonic() + timeout
        while len(self.events) < n and time.monotonic() < end:
            time.sleep(0.02)
        return list(self.events)

    def close(self) -> None:
        self._stop.set()
        self._pub.join(2)
        self.executor.shutdown(timeout_sec=2)
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


REC = "lerobot_recorder"


def recorder_args(root: Path, *extra: str) -> list[str]:
    """The LeRobot recorder's command line for the rig's cameras (``extra``: more ``name:=value`` parameters)."""
    args = [
        "piper-lerobot-recorder",
        "--ros-args",
        "-p",
        f"root:={root}",
        "-p",
        "task:=pick the cube",
        "-p",
        f"camera_width:={W}",
        "-p",
        f"camera_height:={H}",
        "-p",
        "provenance_wait_s:=3.0",
    ]
    for e in extra:
        args += ["-p", e]
    return args


def episodes(root: Path) -> list[dict]:
    """The saved episodes of a LeRobot root (none before the first save)."""
    p = root / "meta" / "episodes.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []

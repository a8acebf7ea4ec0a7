"""dashboard (``piper-dashboard``): the live, read-only web dashboard, served next to the graph.

Subscriptions feed ``dashboard.model.DashboardModel`` and the frame store; ``dashboard.server`` serves
the page on ``host:port`` (loopback by default; any other address needs ``token``). Read-only by
construction: no publisher, service or service client of its own. Images are subscribed only while a
page fetched a thumbnail within ``watch_timeout_s``; camera rates come from each ``camera_info``. Two arms
(``arms``, as the graph derives it): each arm's feedback and commands under its namespace
(``dashboard.model.rate_topics``).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String

from piper_recorder.assembly.messages import image_to_numpy, stamp_ns
from piper_recorder.dashboard.model import IMAGE_CONSUMERS, JOINTS, DashboardConfig, JsonDict, rate_topics
from piper_recorder.dashboard.server import Dashboard, DashboardServer
from piper_recorder.names import (
    CAMERA_STATUS_TOPIC_PATTERN,
    DASHBOARD_NODE,
    DIAGNOSTICS,
    EPISODE_EVENTS,
    JOINT_STATES,
    STATUS,
    TELEOP_STATUS,
    arm_topic,
    camera_topic,
    camera_topic_regex,
    node_key,
    node_topic,
)
from piper_recorder.nodes.plumbing.callbacks import message_callback
from piper_recorder.nodes.plumbing.parameters import ParameterError, declare_config
from piper_recorder.nodes.plumbing.qos import live_image_qos
from piper_recorder.nodes.plumbing.run_node import run_node


class DashboardNode(Node):
    """The dashboard's node: subscriptions into the model, and the web server."""

    def __init__(self) -> None:
        super().__init__(DASHBOARD_NODE)
        cfg = declare_config(self, DashboardConfig)
        self.cfg = cfg
        self.dash = Dashboard.create(cfg)
        self.model = self.dash.model
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        # silence of a required topic marks the graph degraded; the joint states are also shown
        for topic, what, required in rate_topics(cfg.arm_names()):
            self.model.watch_topic(topic, required)
            if what == JOINTS:
                continue
            self.create_subscription(
                PoseStamped,
                topic,
                message_callback(lambda _m, tp=topic: self.model.tick(tp, time.monotonic())),
                qos_profile_sensor_data,
            )
        for arm in cfg.arm_names() or (None,):  # each arm's under its namespace
            self.create_subscription(
                JointState,
                arm_topic(arm, JOINT_STATES),
                functools.partial(self._on_joints, arm),
                qos_profile_sensor_data,
            )
        for rec in cfg.recorders:
            topic = node_topic(rec, STATUS)
            self.model.watch_topic(topic)
            self.create_subscription(
                String,
                topic,
                message_callback(
                    lambda m, r=rec, tp=topic: self._on_json(tp, m, lambda d, t: self.model.on_recorder_status(r, d, t))
                ),
                10,
            )
        for node in IMAGE_CONSUMERS:  # per-subscriber delivery (quest_video, policy; the recorders above)
            self.create_subscription(
                String,
                node_topic(node, STATUS),
                message_callback(
                    lambda m, n=node: self._on_json(None, m, lambda d, t: self.model.on_consumer_status(n, d, t))
                ),
                10,
            )
        self.model.watch_topic(TELEOP_STATUS)
        self.create_subscription(
            String,
            TELEOP_STATUS,
            message_callback(lambda m: self._on_json(TELEOP_STATUS, m, self.model.on_teleop_status)),
            10,
        )
        self.model.watch_topic(DIAGNOSTICS)
        self.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, 10)
        self.create_subscription(
            String, EPISODE_EVENTS, lambda m: self._on_json(None, m, self.model.on_event), reliable
        )
        self._info_subs: dict[str, Subscription] = {}
        self._status_subs: dict[str, Subscription] = {}
        self._image_subs: dict[str, Subscription] = {}
        self._camera_topic = camera_topic_regex(cfg.image_topic_pattern)  # graph discovery: group 1 = camera
        self._set_cameras(list(cfg.cameras))
        try:
            self.server = DashboardServer(self.dash, log=self.get_logger().warning).start()
        except OSError as exc:
            raise ParameterError(f"dashboard: cannot serve on {cfg.host}:{cfg.port}: {exc}") from exc
        self.get_logger().info(f"dashboard on {self.server.url}" + (" (token required)" if cfg.token else ""))
        self.create_timer(1.0, self._housekeeping)
        # its own delivery, like every image consumer (delivery.py): frames received per camera while watched
        self._images: dict[str, int] = {}
        self.pub_status = self.create_publisher(String, STATUS, 10)
        self.create_timer(1.0, self._publish_status)

    # ---- inputs ---------------------------------------------------------------------------------
    def _on_json(self, topic: str | None, msg: String, sink: Callable[[JsonDict, float], None]) -> None:
        t = time.monotonic()
        if topic is not None:
            self.model.tick(topic, t)
        try:
            data = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(data, dict):
            sink(data, t)

    def _on_joints(self, arm: str | None, msg: JointState) -> None:
        t = time.monotonic()
        self.model.tick(arm_topic(arm, JOINT_STATES), t)
        self.model.on_joints(list(msg.name), list(msg.position), t, arm)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        t = time.monotonic()
        self.model.tick(DIAGNOSTICS, t)
        for st in msg.status:
            self.model.on_diagnostic(
                st.name,
                int.from_bytes(st.level, "little") if isinstance(st.level, bytes) else int(st.level),
                st.message,
                {kv.key: kv.value for kv in st.values},
                t,
            )

    def _on_image(self, camera: str, msg: Image) -> None:
        self._images[camera] = self._images.get(camera, 0) + 1
        try:
            rgb = image_to_numpy(msg)
        except ValueError:
            return
        if rgb.ndim == 3:
            self.dash.frames.put(camera, rgb, stamp_ns(msg))

    # ---- housekeeping (1 Hz) --------------------------------------------------------------------
    def _set_cameras(self, cameras: list[str]) -> None:
        for cam in cameras:
            if cam not in self._info_subs:
                topic = self.model.camera_info_topic(cam)
                self.model.watch_topic(topic)
                self._info_subs[cam] = self.create_subscription(
                    CameraInfo,
                    topic,
                    message_callback(lambda _m, tp=topic: self.model.tick(tp, time.monotonic())),
                    qos_profile_sensor_data,
                )
                self._status_subs[cam] = self.create_subscription(  # sim_camera: its published rate
                    String,
                    camera_topic(CAMERA_STATUS_TOPIC_PATTERN, cam),
                    message_callback(
                        lambda m, c=cam: self._on_json(None, m, lambda d, t: self.model.on_camera_status(c, d, t))
                    ),
                    10,
                )
        self.model.set_cameras(cameras)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        self.model.set_nodes({node_key(n, ns) for n, ns in self.get_node_names_and_namespaces()}, now)
        if not self.cfg.cameras:
            found = sorted(
                {
                    m.group(1)
                    for name, _types in self.get_topic_names_and_types()
                    if (m := self._camera_topic.match(name))
                }
            )
            if found != self.model.cameras:
                self._set_cameras(found)
        watched = self.dash.frames.watched(now)
        for cam in self.model.cameras:
            if watched and cam not in self._image_subs:
                self._image_subs[cam] = self.create_subscription(
                    Image,
                    camera_topic(self.cfg.image_topic_pattern, cam),
                    message_callback(lambda m, c=cam: self._on_image(c, m)),
                    live_image_qos(),
                )
        if not watched and self._image_subs:
            for sub in self._image_subs.values():
                self.destroy_subscription(sub)
            self._image_subs.clear()
            self.dash.frames.forget()

    def _publish_status(self) -> None:
        self.pub_status.publish(
            String(
                data=json.dumps(
                    {
                        "watched": bool(self._image_subs),
                        "images_received": {cam: {"count": n} for cam, n in sorted(self._images.items())},
                    }
                )
            )
        )

    def on_shutdown(self) -> None:
        """Close the web server."""
        self.server.close()


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-dashboard``)."""
    sys.exit(run_node(DashboardNode, args))


if __name__ == "__main__":
    main()

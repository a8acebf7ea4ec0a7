"""sim_camera: a simulated RealSense (realsense2_camera topics, encodings and QoS) looking at the arm.

Node name = camera name. Each camera is static, placed by ``position``/``look_at`` in the arm base frame;
the EEF from ``/arm/eef_pose`` is drawn as a red disc whose depth is its optical-axis distance. Frames come
from a thread on a steady ``1/fps`` grid; the stamp is the slot's time minus ``render_latency_ms`` and the
EEF is interpolated to exactly that stamp. A pose still missing after ``pose_wait_ms`` is drawn from the
newest one as a yellow marker, so a check can tell the sim's own staleness from a recording error.

``piper-sim-camera`` runs one camera, named by its node name; the simulated graph runs all of its cameras in
one process (``nodes.sim_cameras``).
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSPresetProfiles
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String

from piper_recorder.assembly.messages import stamp_to_ns
from piper_recorder.cdr import encode as cdr_encode
from piper_recorder.names import (
    CAMERA,
    CAMERA_IMAGE_QOS,
    CAMERA_INFO_QOS,
    COLOR_IMAGE,
    COLOR_INFO,
    DEPTH_IMAGE,
    DEPTH_INFO,
    EEF_POSE,
    STATUS,
    arm_topic,
)
from piper_recorder.nodes.plumbing.parameters import declare_config
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs
from piper_recorder.nodes.plumbing.qos import stream_qos
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.plumbing.serialized import publish_serialized
from piper_recorder.nodes.plumbing.stamps import now_ns
from piper_recorder.process.delivery import ImageCounts, received_rate
from piper_recorder.sim.camera import Intrinsics, PinholeCamera
from piper_recorder.sim.faults import FaultPlan
from piper_recorder.sim.history import PoseHistory
from piper_recorder.sim.scene import SceneRenderer, arm_bases


@dataclass
class SimCameraConfig:
    """Parameters of one sim camera, validated at start-up.

    The fault parameters may change at run time (the node's own callback re-arms the fault plan); every
    other one is read-only.
    """

    runtime_params: ClassVar[frozenset[str]] = frozenset({"pause_at_s", "pause_s", "drop_every_n", "jitter_ms"})

    width: int = CAMERA.width
    height: int = CAMERA.height
    fps: float = float(CAMERA.fps)
    serial: str = ""  # default: "sim-<node name>"
    intrinsics: list[float] = field(default_factory=list)  # [fx, fy, cx, cy]; empty = D435-like default
    position: list[float] = field(default_factory=lambda: [0.9, 0.0, 0.45])  # camera origin, arm base (m)
    look_at: list[float] = field(default_factory=lambda: [0.25, 0.0, 0.15])  # point on the optical axis
    table_z: float = 0.0
    marker_radius_m: float = 0.02
    render_latency_ms: float = 20.0
    pose_wait_ms: float = 150.0  # extra wait for a pose newer than the capture time (a busy machine)
    eef_topic: str = EEF_POSE
    # several arms (launchers: piper_launch.arms): each arm's flange, its eef_topic under its namespace, drawn
    # where the scene puts its base (sim.scene.arm_bases: side by side along y); empty: one arm at the origin
    arms: list[str] = field(default_factory=list)
    pause_at_s: float = -1.0
    pause_s: float = 0.0
    drop_every_n: int = 0
    jitter_ms: float = 0.0
    seed: int = 0

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not (16 <= self.width <= 4096 and 16 <= self.height <= 4096):
            raise ValueError(f"width/height out of range: {self.width}x{self.height}")
        if not 0.5 <= self.fps <= 240:
            raise ValueError(f"fps must be in [0.5, 240], got {self.fps}")
        if len(self.position) != 3 or len(self.look_at) != 3:
            raise ValueError("position and look_at must be [x, y, z] in metres")
        if self.render_latency_ms < 0 or self.pose_wait_ms < 0:
            raise ValueError("render_latency_ms and pose_wait_ms must be >= 0")
        Intrinsics.from_list(self.width, self.height, self.intrinsics)
        FaultPlan(self.pause_at_s, self.pause_s, self.drop_every_n, self.jitter_ms)


class SimCamera(Node):
    """The sim camera's node: a capture thread rendering and publishing, a 1 Hz status.

    ``name``: the camera's (its parameter section, topics and frame ids); ``parameter_overrides`` go over
    its start-up parameters (the host's ``arms``).
    """

    def __init__(self, name: str = "sim_camera", parameter_overrides: list[Parameter] | None = None) -> None:
        super().__init__(name, parameter_overrides=parameter_overrides)
        self.cfg = declare_config(self, SimCameraConfig)
        cam = self.get_name()
        self.serial = self.cfg.serial or f"sim-{cam}"
        k = Intrinsics.from_list(self.cfg.width, self.cfg.height, self.cfg.intrinsics)
        self.camera = PinholeCamera.looking_at(k, self.cfg.position, self.cfg.look_at)
        # each frame is rendered into the serialized messages it is published as (no per-frame message built)
        self._frame_id = f"{cam}_color_optical_frame"
        self._color_msg = cdr_encode.ImageBuffer(self._frame_id, k.height, k.width, "rgb8", 3 * k.width)
        self._depth_msg = cdr_encode.ImageBuffer(self._frame_id, k.height, k.width, "16UC1", 2 * k.width)
        self.renderer = SceneRenderer(
            self.camera,
            self.cfg.table_z,
            self.cfg.marker_radius_m,
            rgb=np.frombuffer(self._color_msg.pixels, np.uint8).reshape(k.height, k.width, 3),
            depth=np.frombuffer(self._depth_msg.pixels, "<u2").reshape(k.height, k.width),
        )
        # each arm's flange history and where its base stands in the scene (one arm: None, at the origin)
        arms: list[str | None] = list(self.cfg.arms) or [None]
        bases = arm_bases(self.cfg.arms) if self.cfg.arms else {}
        self.histories = {a: PoseHistory() for a in arms}
        self.bases = {a: bases.get(a, np.zeros(3)) if a else np.zeros(3) for a in arms}
        self._start = time.monotonic()
        self.faults = self._fault_plan(self.cfg, self._start)
        self.published = 0
        self._sent = ImageCounts(["color"])  # published frames and their stamps (piper_recorder.process.delivery)
        self.skipped = 0
        self.late_skipped = 0
        self.stale_poses = 0
        # the profiles the launch gives realsense2_camera (names.CAMERA_IMAGE_QOS): a real camera's writers
        image_qos, info_qos = (QoSPresetProfiles[q].value for q in (CAMERA_IMAGE_QOS, CAMERA_INFO_QOS))
        self.pub_color = self.create_publisher(Image, f"~/{COLOR_IMAGE}", image_qos)
        self.pub_depth = self.create_publisher(Image, f"~/{DEPTH_IMAGE}", image_qos)
        self.pub_color_info = self.create_publisher(CameraInfo, f"~/{COLOR_INFO}", info_qos)
        self.pub_depth_info = self.create_publisher(CameraInfo, f"~/{DEPTH_INFO}", info_qos)
        # the arm's 100 Hz pose is taken when a frame is rendered (PolledInputs), not by an executor waking
        # for each pose: the capture loop is the only reader of the history (50: 0.5 s between renders);
        # best-effort, as every reader of the arm's streams (plumbing.qos.stream_qos)
        self.inputs = PolledInputs(self)
        for arm, history in self.histories.items():
            self.inputs.subscribe(
                PoseStamped, arm_topic(arm, self.cfg.eef_topic), functools.partial(self._on_eef, history), stream_qos()
            )
        self.pub_status = self.create_publisher(String, STATUS, 10)
        self.create_timer(1.0, self._publish_status)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._info = self._camera_info(self._frame_id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._capture_loop, name=f"{cam}-capture", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"sim camera {cam} ({self.serial}) {k.width}x{k.height}@{self.cfg.fps:g} at {self.cfg.position} "
            f"looking at {self.cfg.look_at}; render latency {self.cfg.render_latency_ms:g} ms"
        )

    @staticmethod
    def _fault_plan(cfg: SimCameraConfig, origin_s: float) -> FaultPlan:
        return FaultPlan(cfg.pause_at_s, cfg.pause_s, cfg.drop_every_n, cfg.jitter_ms, origin_s, cfg.seed)

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Fault parameters may change at runtime; a new pause counts from the moment it is set."""
        changed = {p.name: p.value for p in params}
        fault_keys = {"pause_at_s", "pause_s", "drop_every_n", "jitter_ms"}
        if not changed.keys() & fault_keys:
            return SetParametersResult(successful=True)
        values = {k: changed.get(k, getattr(self.cfg, k)) for k in fault_keys}
        try:
            plan = FaultPlan(
                float(values["pause_at_s"]),
                float(values["pause_s"]),
                int(values["drop_every_n"]),
                float(values["jitter_ms"]),
                time.monotonic(),
                self.cfg.seed,
            )
        except (TypeError, ValueError) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        for k in fault_keys:
            setattr(self.cfg, k, values[k])
        self.faults = plan
        self.get_logger().info(f"fault plan re-armed: {values}")
        return SetParametersResult(successful=True)

    def counters(self) -> dict[str, int]:
        """Frames published and skipped (faults, stalls), and frames drawn with a stale pose."""
        return {
            "published": self.published,
            "skipped_faults": self.skipped,
            "skipped_stalls": self.late_skipped,
            "stale_poses": self.stale_poses,
        }

    def _publish_status(self) -> None:
        """Publish the counters, and ``fps``: the published rate by capture stamp.

        The dashboard and the HUD judge every subscriber's delivery against ``fps`` (``nominal_fps`` is the
        parameter).
        """
        sent = self._sent.snapshot(time.monotonic(), lambda stamp: int(stamp))["color"]
        self.pub_status.publish(
            String(
                data=json.dumps(
                    {
                        "camera": self.get_name(),
                        **self.counters(),
                        "fps": received_rate(sent),
                        "nominal_fps": self.cfg.fps,
                    }
                )
            )
        )

    @staticmethod
    def _on_eef(history: PoseHistory, msg: PoseStamped, _received_ns: int) -> None:
        p = msg.pose.position
        history.add(stamp_to_ns(msg.header.stamp), (p.x, p.y, p.z))

    def _camera_info(self, frame_id: str) -> bytes:
        """This camera's CameraInfo, serialized once (messages differ only in their stamp: ``cdr_encode.restamp``)."""
        k = self.camera.intrinsics
        info = CameraInfo()
        info.header.frame_id = frame_id
        info.width, info.height = k.width, k.height
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.k = k.k_matrix()
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        return serialize_message(info)

    def _capture_loop(self) -> None:
        """Capture frames on a steady monotonic grid of slots.

        A late wake-up still stamps and renders its slot (from the pose history); slots missed entirely are
        skipped, as a camera would.
        """
        period = 1.0 / self.cfg.fps
        latency_ns = int(self.cfg.render_latency_ms * 1e6)
        slot = time.monotonic()
        index = 0
        while not self._stop.is_set():
            faults = self.faults
            capture = slot + faults.jitter_s()
            delay = capture - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            try:
                if faults.paused(capture) or faults.dropped(index):
                    self.skipped += 1
                else:
                    stamp = self._ros_time_ns(capture) - latency_ns
                    self._publish_frame(stamp)
                    self.published += 1
                    self._sent.on_image(0, stamp)  # the published rate for the delivery health
            except Exception as exc:  # context shut down under us during exit  # noqa: BLE001
                if self._stop.is_set():
                    break
                self.get_logger().error(f"frame {index} failed: {exc!r}")
            index += 1
            slot += period
            behind = time.monotonic() - slot
            if behind > period:  # stalled past whole slots: skip them, never burst
                missed = int(behind / period)
                slot += missed * period
                index += missed
                self.late_skipped += missed
                self.get_logger().warning(
                    f"capture thread woke {behind * 1e3:.0f} ms late: skipped {missed} frame slot(s)",
                    throttle_duration_sec=5.0,
                )

    def _ros_time_ns(self, mono_s: float) -> int:
        """ROS time of the monotonic instant ``mono_s``: the ROS clock read between two monotonic reads.

        A thread switch between the reads (the GIL, a loaded machine) would shift the stamp off the
        capture time by its length, so a read bracketed by more than 1 ms is taken again.
        """
        for _ in range(5):
            m0 = time.monotonic_ns()
            ros = now_ns(self)
            m1 = time.monotonic_ns()
            if m1 - m0 <= 1_000_000:
                break
        return ros - ((m0 + m1) // 2 - int(mono_s * 1e9))

    def _pose_at(self, capture_ns: int) -> tuple[np.ndarray | list[np.ndarray] | None, bool]:
        """(EEF at the capture time, stale); several arms: each arm's flange in the scene.

        Waits briefly until every history brackets the capture time so the pose is interpolated; past ``pose_wait_ms``
        the newest poses are used and flagged stale (drawn yellow). An arm with no pose stream at all has no marker.
        """
        deadline = time.monotonic() + self.cfg.pose_wait_ms / 1000.0
        stale = False
        while True:
            self.inputs.poll()
            latest = [h.latest_stamp() for h in self.histories.values()]
            if all(t is None or t >= capture_ns for t in latest):
                break
            if time.monotonic() >= deadline or self._stop.wait(0.002):
                self.stale_poses += 1
                stale = True
                break
        if len(self.histories) == 1:
            return self.histories[None].at(capture_ns), stale
        points = [(h.at(capture_ns), self.bases[a]) for a, h in self.histories.items()]
        return [p + base for p, base in points if p is not None], stale

    def _publish_frame(self, capture_ns: int) -> None:
        # A depth image nobody subscribes to is not even drawn, an image nobody takes not published.
        with_depth = self.pub_depth.get_subscription_count() > 0
        self.renderer.render(*self._pose_at(capture_ns), depth=with_depth)
        if self.pub_color.get_subscription_count():
            self._color_msg.set_stamp(capture_ns)
            publish_serialized(self.pub_color, self._color_msg.buffer)
        if with_depth:  # aligned to colour: same optical frame id
            self._depth_msg.set_stamp(capture_ns)
            publish_serialized(self.pub_depth, self._depth_msg.buffer)
        for pub in (self.pub_color_info, self.pub_depth_info):  # likewise
            if pub.get_subscription_count():
                pub.publish(cdr_encode.restamp(self._info, capture_ns))

    def on_shutdown(self) -> None:
        """Stop the capture thread and log the counters."""
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.inputs.destroy()
        self.get_logger().info(
            f"published {self.published} frames, skipped {self.skipped} (faults) "
            f"and {self.late_skipped} (stalls); {self.stale_poses} rendered with a stale pose"
        )


def main(args: list[str] | None = None) -> None:
    """Run one camera (console script ``piper-sim-camera``), named by its node name."""
    # Events executor like the other device nodes; it serves the status timer and the parameters only: the
    # capture thread takes the EEF pose, renders and publishes.
    sys.exit(run_node(SimCamera, args))


if __name__ == "__main__":
    main()

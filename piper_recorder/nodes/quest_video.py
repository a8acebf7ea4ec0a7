"""quest_video: camera panels and the HUD to the headset app's video channel (thin adapter).

Its own process, not a thread of quest_bridge: JPEG encoding holding the GIL there would delay the pose
path, and a stalled video link stays apart from the bridge's reconnects. One stream thread takes the images
that arrived since its last tick (``PolledInputs``: no executor wake-up per frame, and each frame a view of
its serialized bytes), encodes each camera's newest frame when it is new and sends it without blocking (a
busy link drops the frame), and renders the HUD at ``hud_hz``. The view tint (red while recording) goes to
quest_bridge as a ``/quest/command`` on each change and every ``tint_refresh_s``. Two arms (``arms``, as the
graph derives it): the HUD shows each arm's clutch and releases (teleop's status) and each arm's
``/<arm>/arm/status``.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image as ImageMsg
from std_msgs.msg import String

from piper_recorder.assembly.messages import image_to_numpy, stamp_to_ns
from piper_recorder.names import (
    ARM_STATUS,
    CAMERA_STATUS_TOPIC_PATTERN,
    COLOR_TOPIC_PATTERN,
    DIAGNOSTICS,
    EPISODE_EVENTS,
    LEROBOT_RECORDER,
    QUEST_COMMAND,
    QUEST_VIDEO_NODE,
    STATUS,
    TELEOP_STATUS,
    arm_topic,
    camera_topic,
    check_topic_pattern,
    node_topic,
    parse_arms,
)
from piper_recorder.nodes.plumbing.callbacks import timer_callback
from piper_recorder.nodes.plumbing.parameters import declare_config
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs
from piper_recorder.nodes.plumbing.qos import live_image_qos
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.process.delivery import ImageCounts, link_health, panel_target, received_rate
from piper_recorder.quest.hud import HudModel, encode_panel, render_hud
from piper_recorder.quest.video import (
    HUD_PANEL,
    MAX_CAMERA_PANELS,
    TINT_IDLE,
    TINT_RECORDING,
    PanelSender,
    SenderConfig,
    color_command,
)

LEVELS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
BRIDGE_STATUS = "quest_bridge: headset"
LATENCY_WINDOW = 300
RECORDER_STALE_S = 3.0
#: The stream thread takes the images at least this often: the live history (``LIVE_IMAGE_DEPTH`` frames)
#: holds a third of a second at 30 fps, and ``fps`` may be as low as 0.5.
POLL_S = 0.1


@dataclass
class QuestVideoConfig:
    """The node's ROS parameters."""

    # the video channel's link settings default to the sender's (one set of defaults)
    host: str = SenderConfig.host
    port: int = SenderConfig.port
    cameras: list[str] = field(default_factory=list)  # panels 0..2, left to right
    image_topic_pattern: str = COLOR_TOPIC_PATTERN  # the recorders' parameter: names, one placeholder {cam}
    fps: float = 15.0
    quality: int = 70
    max_width: int = 640
    labels: bool = True  # the camera's name in a banner on its panel
    hud: bool = True
    hud_hz: float = 5.0
    hud_quality: int = 80
    recorder: str = LEROBOT_RECORDER  # whose status and events the HUD shows
    arms: list[str] = field(default_factory=list)  # [] one arm; [left, right]: each arm's clutch and state
    tint: bool = True
    tint_refresh_s: float = 5.0
    reconnect_s: float = SenderConfig.reconnect_s
    reconnect_max_s: float = SenderConfig.reconnect_max_s

    def sender(self) -> SenderConfig:
        """The video channel's link settings."""
        return SenderConfig(
            host=self.host, port=self.port, reconnect_s=self.reconnect_s, reconnect_max_s=self.reconnect_max_s
        )

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        self.sender().validate()
        if len(self.cameras) > MAX_CAMERA_PANELS or any(not c.isidentifier() for c in self.cameras):
            raise ValueError(f"cameras: at most {MAX_CAMERA_PANELS} plain names, got {self.cameras}")
        check_topic_pattern("image_topic_pattern", self.image_topic_pattern)
        for name, lo, hi in (("fps", 0.5, 60.0), ("hud_hz", 0.2, 30.0), ("tint_refresh_s", 0.5, 600.0)):
            v = getattr(self, name)
            if not (math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {v!r}")
        for name in ("quality", "hud_quality"):
            if not 1 <= getattr(self, name) <= 95:
                raise ValueError(f"{name} must be in [1, 95]")
        if not 64 <= self.max_width <= 640:
            raise ValueError("max_width must be in [64, 640] (the app's panels)")
        if not self.recorder or "/" in self.recorder:
            raise ValueError("recorder must be a plain node name")
        parse_arms(self.arms)


class QuestVideo(Node):
    """The node: camera images and graph status in, panels and the HUD out to the headset.

    ``~/status`` (1 Hz) reports the link, frames sent / dropped per panel, and per camera the latency from
    capture to the frame's last byte handed to the socket (over the last ``LATENCY_WINDOW`` frames).
    """

    def __init__(self) -> None:
        super().__init__(QUEST_VIDEO_NODE)
        self.cfg = declare_config(self, QuestVideoConfig)
        self._lock = threading.Lock()
        self.model = HudModel(self.cfg.recorder, arms=parse_arms(self.cfg.arms))
        self.sender = PanelSender(self.cfg.sender())
        self._latest: dict[int, tuple[int, Any]] = {}  # panel -> (seq, image message)
        self._sent_seq: dict[int, int] = {}
        self._latency_ms: dict[int, deque[float]] = {
            i: deque(maxlen=LATENCY_WINDOW) for i in range(len(self.cfg.cameras))
        }
        self._encode_ms: dict[int, deque[float]] = {
            i: deque(maxlen=LATENCY_WINDOW) for i in range(len(self.cfg.cameras))
        }
        self._counts = ImageCounts(self.cfg.cameras)  # frames received per camera (delivery health)
        self._sent_counts = ImageCounts(self.cfg.cameras)  # panels sent per camera, for their rate
        self._camera_fps: dict[str, float | None] = {}  # each camera's published rate (its ~/status)
        self._recorder_status: dict[str, Any] = {}
        self._recorder_status_t = -math.inf
        self.skipped_frames = 0  # camera frames that arrived but were never sent (the camera outran fps)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        # taken by the stream thread at each tick (its history holds what arrives between two ticks)
        self.inputs = PolledInputs(self)
        for idx, cam in enumerate(self.cfg.cameras):
            self.inputs.subscribe(
                ImageMsg,
                camera_topic(self.cfg.image_topic_pattern, cam),
                functools.partial(self._on_image, idx),
                live_image_qos(),
            )
        self.create_subscription(String, node_topic(self.cfg.recorder, STATUS), self._on_recorder_status, reliable)
        for cam in self.cfg.cameras:  # the cameras' published rates (sim_camera; a realsense has no status)
            self.create_subscription(
                String,
                camera_topic(CAMERA_STATUS_TOPIC_PATTERN, cam),
                functools.partial(self._on_camera_status, cam),
                10,
            )
        self.create_subscription(String, EPISODE_EVENTS, self._on_episode_event, reliable)
        self.create_subscription(String, TELEOP_STATUS, self._on_teleop_status, reliable)
        self.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, 10)
        for arm in parse_arms(self.cfg.arms) or (None,):  # each arm's status under its namespace
            self.create_subscription(
                DiagnosticArray, arm_topic(arm, ARM_STATUS), functools.partial(self._on_arm_status, arm), reliable
            )
        self.pub_command = self.create_publisher(String, QUEST_COMMAND, reliable)
        self.pub_status = self.create_publisher(String, STATUS, reliable)
        self.create_timer(1.0, timer_callback(self._publish_status))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._stream, name="quest-video", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"streaming {self.cfg.cameras} at {self.cfg.fps:g} fps q{self.cfg.quality} "
            f"+ HUD at {self.cfg.hud_hz:g} Hz to {self.cfg.host}:{self.cfg.port}"
        )

    # ---- inputs (images: the stream thread's poll; the rest: the executor thread, store only) ------
    def _on_image(self, idx: int, msg: Any, _received_ns: int) -> None:
        with self._lock:
            prev = self._latest.get(idx, (0, None))[0]
            if prev and self._sent_seq.get(idx, 0) != prev:
                self.skipped_frames += 1  # the previous frame was never sent: expected when the camera outruns fps
            self._latest[idx] = (prev + 1, msg)
            self._counts.on_image(idx, msg.header)

    @staticmethod
    def _json(msg: String) -> dict[str, Any] | None:
        try:
            obj = json.loads(msg.data)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def _on_recorder_status(self, msg: String) -> None:
        if (st := self._json(msg)) is not None:
            with self._lock:
                self.model.on_recorder_status(time.time(), st)
                self._recorder_status, self._recorder_status_t = st, time.monotonic()

    def _on_camera_status(self, cam: str, msg: String) -> None:
        if (st := self._json(msg)) is not None:
            fps = st.get("fps")
            with self._lock:
                self._camera_fps[cam] = (
                    float(fps) if isinstance(fps, (int, float)) and not isinstance(fps, bool) else None
                )

    def _on_episode_event(self, msg: String) -> None:
        if (ev := self._json(msg)) is not None:
            with self._lock:
                self.model.on_episode_event(time.time(), ev)

    def _on_teleop_status(self, msg: String) -> None:
        if (st := self._json(msg)) is not None:
            with self._lock:
                self.model.on_teleop_status(time.time(), st)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name == BRIDGE_STATUS:
                values = {kv.key: kv.value for kv in st.values}
                try:
                    rate: float | None = float(values.get("frame_rate_hz", "nan"))
                except ValueError:
                    rate = None
                with self._lock:
                    self.model.on_headset(
                        values.get("state", ""), rate if rate is not None and math.isfinite(rate) else None
                    )

    def _on_arm_status(self, arm: str | None, msg: DiagnosticArray) -> None:
        if not msg.status:
            return
        worst = max(
            msg.status, key=lambda s: int.from_bytes(s.level, "little") if isinstance(s.level, bytes) else int(s.level)
        )
        level = int.from_bytes(worst.level, "little") if isinstance(worst.level, bytes) else int(worst.level)
        with self._lock:
            self.model.on_arm(time.time(), LEVELS.get(level, str(level)), worst.message, arm)

    # ---- stream thread ------------------------------------------------------------------------
    def _stream(self) -> None:
        period = 1.0 / self.cfg.fps
        hud_period = 1.0 / self.cfg.hud_hz
        next_t = time.monotonic()
        next_hud = next_t
        tint: tuple[float, float, float, float] | None = None
        tint_sent = -math.inf
        while not self._stop.is_set():
            self.inputs.poll()  # every frame is counted (delivery health), linked or not
            now = time.monotonic()
            if now < next_t:  # between two panel ticks (a low fps): only take the images, whose history is bounded
                if self._stop.wait(min(next_t - now, POLL_S)):
                    break
                continue
            linked = self.sender.ensure_connected()  # nothing is encoded while the headset is away
            for idx in range(len(self.cfg.cameras)):
                if linked:
                    self._send_camera(idx)
            now = time.monotonic()
            if now >= next_hud:
                next_hud = max(next_hud + hud_period, now - hud_period)
                with self._lock:
                    state = self.model.state(time.time())
                if self.cfg.hud and linked:
                    self.sender.send(HUD_PANEL, render_hud(state, self.cfg.hud_quality))
                want = TINT_RECORDING if state.recording else TINT_IDLE
                if self.cfg.tint and (want != tint or now - tint_sent >= self.cfg.tint_refresh_s):
                    self.pub_command.publish(String(data=json.dumps(color_command(want))))
                    tint, tint_sent = want, now
            next_t += period
            if next_t < time.monotonic() - period:
                next_t = time.monotonic()  # fell behind: resync, never burst

    def _send_camera(self, idx: int) -> None:
        with self._lock:
            seq, msg = self._latest.get(idx, (0, None))
            if msg is None or self._sent_seq.get(idx) == seq:
                return
            self._sent_seq[idx] = seq
        try:
            rgb = image_to_numpy(msg)
        except ValueError as exc:
            self.get_logger().warning(f"{self.cfg.cameras[idx]}: {exc}", throttle_duration_sec=10.0)
            return
        if rgb.ndim != 3:
            return
        t0 = time.perf_counter()
        jpeg = encode_panel(
            np.ascontiguousarray(rgb[..., :3]),
            self.cfg.quality,
            self.cfg.max_width,
            self.cfg.cameras[idx] if self.cfg.labels else "",
        )
        t1 = time.perf_counter()
        if self.sender.send(idx, jpeg):
            stamp = stamp_to_ns(msg.header.stamp)
            with self._lock:
                self._encode_ms[idx].append((t1 - t0) * 1e3)
                if stamp > 0:
                    self._latency_ms[idx].append((time.time_ns() - stamp) / 1e6)

    # ---- status --------------------------------------------------------------------------------
    def _publish_status(self) -> None:
        st = self.sender.stats

        def pct(values: deque[float]) -> dict[str, float]:
            if not values:
                return {"n": 0}
            a = np.asarray(values)
            return {
                "n": int(a.size),
                "p50": round(float(np.percentile(a, 50)), 2),
                "p99": round(float(np.percentile(a, 99)), 2),
                "max": round(float(a.max()), 2),
            }

        now = time.monotonic()
        with self._lock:
            received = self._counts.snapshot(now)
            cams = {
                cam: {
                    "received": received[cam]["count"],
                    "sent": st.sent.get(i, 0),
                    "latency_ms": pct(self._latency_ms[i]),
                    "encode_ms": pct(self._encode_ms[i]),
                }
                for i, cam in enumerate(self.cfg.cameras)
            }
            skipped = self.skipped_frames
            self._sent_counts.count[:] = [st.sent.get(i, 0) for i in range(len(self.cfg.cameras))]
            sent = self._sent_counts.snapshot(now)
            published = dict(self._camera_fps)
            # a recorder silent for 3 s is not judged on its last delivery (its silence shows elsewhere)
            recorder = dict(self._recorder_status) if now - self._recorder_status_t <= RECORDER_STALE_S else {}
        panels = {}
        for cam in self.cfg.cameras:
            # the target: our fps, or what the camera delivered to us if less (frames never received cannot be sent)
            target, floor = panel_target(self.cfg.fps, published.get(cam) or received_rate(received[cam]))
            panels[cam] = {"fps": sent[cam]["fps"], "target_fps": round(target, 2), "min_fps": round(floor, 2)}
        status = {
            "state": st.state,
            "endpoint": f"{self.cfg.host}:{self.cfg.port}",
            "connects": st.connects,
            "connect_failures": st.connect_failures,
            "disconnects": st.disconnects,
            "sent": {str(k): v for k, v in sorted(st.sent.items())},
            "dropped": {str(k): v for k, v in sorted(st.dropped.items())},
            "bytes_sent": st.bytes_sent,
            "camera_frames_skipped": skipped,
            "cameras": cams,
            "last_error": st.last_error,
            "images_received": received,
            "panels": panels,
        }
        # The HUD's health: our panels and the primary recorder's delivery, per camera (piper_recorder.process.delivery);
        # panels are judged only while the headset link is up (nothing is encoded while it is away).
        mine = status if st.state == "connected" else {**status, "panels": {}}
        links = link_health({"quest_video": mine, self.cfg.recorder: recorder}, published)
        degraded = [link.why for link in links if not link.ok]
        if isinstance(recorder, dict) and recorder.get("falling_behind"):  # its writer is behind real time
            degraded.insert(0, f"{self.cfg.recorder} writer {recorder.get('writer_lag_s', '?')} s behind")
        with self._lock:
            self.model.on_delivery(degraded)
        self.pub_status.publish(String(data=json.dumps(status)))

    def on_shutdown(self) -> None:
        """Stop the stream thread and close the link."""
        self._stop.set()
        self._thread.join(2.0)
        self.inputs.destroy()
        self.sender.close()


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-quest-video``)."""
    sys.exit(run_node(QuestVideo, args))


if __name__ == "__main__":
    main()

"""rgbd_recorder: one RGB-D camera + arm -> optimized RGB-D HDF5 (T+1 observations per T transitions).

obs k = (colour/depth capture at or before t_k, arm_joint/arm_eef/gripper at t_k); transition k =
(commanded EEF (7, wxyz) + commanded gripper (1) at t_k, /reward at t_k or 0). The last transition
is terminal when the episode is stopped with stop_episode (success) and a timeout when max_episode_s
ends it. Threads and timing: see recorder_base.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from sensor_msgs.msg import Image
from std_msgs.msg import Float32

from piper_recorder.assembly import DepthPairer
from piper_recorder.assembly.messages import image_to_numpy
from piper_recorder.recording.targets import RgbdTarget

from .common import now_ns, run_node, stamp_to_ns
from .recorder_base import RecorderConfig, RecorderNode


@dataclass
class RgbdRecorderConfig(RecorderConfig):
    path: str = "rgbd.hdf5"
    camera: str = "cam_front"
    depth_topic_pattern: str = "/{cam}/aligned_depth_to_color/image_raw"
    reward_topic: str = "/reward"        # optional; rewards are 0 without it
    rgb_jpeg_quality: int = 88
    depth_codec: str = "jpeg2000"        # jpeg2000 | htj2k
    depth_min_m: float = 0.1
    depth_max_m: float = 6.0

    def camera_list(self) -> list[str]:
        return [self.camera]

    def validate(self) -> None:
        if not self.camera:
            raise ValueError("camera must name the RGB-D camera")
        super().validate()
        if not self.path.endswith((".hdf5", ".h5")):
            raise ValueError(f"path must be an .hdf5 file, got {self.path!r}")
        if "{cam}" not in self.depth_topic_pattern:
            raise ValueError("depth_topic_pattern must contain '{cam}'")


def make_writer(cfg: RgbdRecorderConfig, env_args: dict):
    from rgbd_writer.writer import RgbdConfig, RgbdWriter

    return RgbdWriter(cfg.path, RgbdConfig(
        width=cfg.camera_width, height=cfg.camera_height, rgb_jpeg_quality=cfg.rgb_jpeg_quality,
        depth_codec=cfg.depth_codec, depth_min_m=cfg.depth_min_m, depth_max_m=cfg.depth_max_m,
        rgb_source=cfg.image_topic_pattern.format(cam=cfg.camera),
        depth_source=cfg.depth_topic_pattern.format(cam=cfg.camera), env_args=env_args))


class RgbdRecorder(RecorderNode):
    config_class = RgbdRecorderConfig
    cfg: RgbdRecorderConfig

    def __init__(self) -> None:
        self._pairer = DepthPairer()
        self._pair_lock = threading.Lock()
        super().__init__("rgbd_recorder")

    def make_target(self) -> RgbdTarget:
        env = {"source": "piper_recorder rgbd_recorder", "robot": "agilex_piper", "fps": self.cfg.fps,
               "camera": self.cfg.camera, "state_terms": ["arm_joint", "arm_eef", "gripper"],
               "action": "commanded eef pose (x, y, z, qw, qx, qy, qz) + gripper width (m)"}
        return RgbdTarget(make_writer(self.cfg, env), self.cfg.camera)

    def subscribe_cameras(self) -> None:
        cam, g = self.cfg.camera, self.subs_group
        self.create_subscription(Image, self.cfg.image_topic_pattern.format(cam=cam), self._on_color,
                                 self.image_qos, callback_group=g)
        self.create_subscription(Image, self.cfg.depth_topic_pattern.format(cam=cam), self._on_depth,
                                 self.image_qos, callback_group=g)
        if self.cfg.reward_topic:
            self.create_subscription(Float32, self.cfg.reward_topic,
                                     lambda m: self.controller.add_reward(now_ns(self), float(m.data)), 10,
                                     callback_group=g)

    def _image(self, msg: Image, depth: bool):
        try:
            img = image_to_numpy(msg)
        except ValueError as exc:
            self.get_logger().error(f"{self.cfg.camera}: {exc}", throttle_duration_sec=5.0)
            return None
        return img if self.check_image(self.cfg.camera, img, depth=depth) else None

    def _on_color(self, msg: Image) -> None:
        img = self._image(msg, depth=False)
        if img is not None:
            with self._pair_lock:
                pair = self._pairer.add_color(stamp_to_ns(msg.header.stamp), img)
            self._forward(pair)

    def _on_depth(self, msg: Image) -> None:
        img = self._image(msg, depth=True)
        if img is not None:
            with self._pair_lock:
                pair = self._pairer.add_depth(stamp_to_ns(msg.header.stamp), img)
            self._forward(pair)

    def _forward(self, pair) -> None:
        if pair is not None:
            stamp, rgb, depth = pair
            self.controller.add_frame(self.cfg.camera, stamp, rgb, depth)

    def camera_record(self) -> dict:
        rec = super().camera_record()
        rec[self.cfg.camera]["depth"] = {"topic": self.cfg.depth_topic_pattern.format(cam=self.cfg.camera),
                                         "encoding": "16UC1", "unit": "mm", "aligned_to": "color"}
        return rec

    def recording_settings(self) -> dict:
        c = self.cfg
        return {**super().recording_settings(), "path": c.path, "depth_codec": c.depth_codec,
                "rgb_jpeg_quality": c.rgb_jpeg_quality, "depth_min_m": c.depth_min_m, "depth_max_m": c.depth_max_m}


def main(args=None):
    sys.exit(run_node(RgbdRecorder, args))

"""lerobot_recorder: arm topics + cameras -> LeRobot v2.0 dataset episodes through the four Trigger services.

Threads and timing: see recorder_base. Rows follow the exact 1/fps grid (piper_recorder.assembly);
frames go to the writer's per-camera encoders with their capture time (``timestamp_mode: capture``)
or one per row re-stamped to the row time (``nominal``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from sensor_msgs.msg import Image
from std_msgs.msg import String

from piper_recorder.assembly.messages import image_to_numpy
from piper_recorder.recording.targets import LeRobotTarget

from .common import now_ns, run_node, stamp_to_ns
from .recorder_base import RecorderConfig, RecorderNode


@dataclass
class LeRobotRecorderConfig(RecorderConfig):
    root: str = "lerobot_dataset"
    cameras: list[str] = field(default_factory=lambda: ["cam_front", "cam_wrist"])
    camera_heights: list[int] = field(default_factory=list)   # per camera; empty = camera_height for all
    camera_widths: list[int] = field(default_factory=list)
    raw_quest_topic: str = "/quest/raw"
    save_raw_quest: bool = True
    robot_type: str = "agilex_piper"
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    crf: int = 23
    preset: str = "veryfast"
    gop: int = 0                         # 0 = the writer's measured default
    chunks_size: int = 1000
    rotation_type: str = "quat_wxyz"     # or "quaternion" (GR00T N1.5)
    combined_columns: bool = True
    on_binding_change: str = "warn"      # warn | refuse

    def camera_list(self) -> list[str]:
        return list(self.cameras)

    def validate(self) -> None:
        super().validate()
        if not self.root:
            raise ValueError("root must be a directory path")
        for name in ("camera_heights", "camera_widths"):
            v = getattr(self, name)
            if v and (len(v) != len(self.cameras) or min(v) <= 0):
                raise ValueError(f"{name} needs one positive entry per camera {self.cameras}")
        if self.on_binding_change not in ("warn", "refuse"):
            raise ValueError(f"on_binding_change must be 'warn' or 'refuse', got {self.on_binding_change!r}")
        if self.rotation_type not in ("quat_wxyz", "quaternion"):
            raise ValueError(f"rotation_type must be 'quat_wxyz' or 'quaternion', got {self.rotation_type!r}")
        if self.gop < 0 or not 0 <= self.crf <= 51 or self.chunks_size <= 0:
            raise ValueError("gop must be >= 0, crf in 0..51, chunks_size > 0")
        if not float(self.fps).is_integer():
            raise ValueError(f"fps must be a whole number for LeRobot, got {self.fps}")

    def size(self, camera: str) -> tuple[int, int]:
        i = self.cameras.index(camera)
        return (self.camera_heights[i] if self.camera_heights else self.camera_height,
                self.camera_widths[i] if self.camera_widths else self.camera_width)


def make_writer(cfg: LeRobotRecorderConfig):
    from piper_recorder.lerobot.features import piper_features
    from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, VideoConfig, WriterConfig

    video = dict(codec=cfg.codec, pix_fmt=cfg.pix_fmt, crf=cfg.crf, preset=cfg.preset, bf=0)
    if cfg.gop:
        video["gop"] = cfg.gop
    wcfg = WriterConfig(
        fps=int(cfg.fps), robot_type=cfg.robot_type,
        cameras={cam: CameraSpec(height=cfg.size(cam)[0], width=cfg.size(cam)[1]) for cam in cfg.cameras},
        features=piper_features(), video=VideoConfig(**video), chunks_size=cfg.chunks_size,
        save_raw_quest=cfg.save_raw_quest, rotation_type=cfg.rotation_type,
        combined_columns=cfg.combined_columns, on_binding_change=cfg.on_binding_change)
    return LeRobotWriter(cfg.root, wcfg)


class LeRobotRecorder(RecorderNode):
    config_class = LeRobotRecorderConfig
    cfg: LeRobotRecorderConfig

    def __init__(self) -> None:
        super().__init__("lerobot_recorder")

    def make_target(self) -> LeRobotTarget:
        return LeRobotTarget(make_writer(self.cfg), save_raw_quest=self.cfg.save_raw_quest)

    def camera_size(self, camera: str) -> tuple[int, int]:
        return self.cfg.size(camera)

    def subscribe_cameras(self) -> None:
        for cam in self.cfg.cameras:
            self.create_subscription(Image, self.cfg.image_topic_pattern.format(cam=cam),
                                     lambda m, cam=cam: self._on_image(cam, m), self.image_qos,
                                     callback_group=self.subs_group)
        if self.cfg.save_raw_quest:
            self.create_subscription(String, self.cfg.raw_quest_topic, self._on_raw, 1000,
                                     callback_group=self.subs_group)

    def _on_image(self, cam: str, msg: Image) -> None:
        try:
            rgb = image_to_numpy(msg)
        except ValueError as exc:
            self.frames_rejected[cam] = self.frames_rejected.get(cam, 0) + 1
            self.get_logger().error(f"{cam}: {exc}", throttle_duration_sec=5.0)
            return
        if self.check_image(cam, rgb):
            self.controller.add_frame(cam, stamp_to_ns(msg.header.stamp), rgb)

    def _on_raw(self, msg: String) -> None:
        self.controller.add_raw_quest(now_ns(self), msg.data)

    def recording_settings(self) -> dict:
        c = self.cfg
        return {**super().recording_settings(), "root": c.root,
                "video": {"codec": c.codec, "pix_fmt": c.pix_fmt, "crf": c.crf, "preset": c.preset,
                          "gop": c.gop or "writer default", "bf": 0},
                "rotation_type": c.rotation_type, "combined_columns": c.combined_columns,
                "save_raw_quest": c.save_raw_quest}


def main(args=None):
    sys.exit(run_node(LeRobotRecorder, args))

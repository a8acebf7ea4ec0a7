"""rgbd_recorder: one RGB-D camera + arm -> optimized RGB-D HDF5 (T+1 observations per T transitions).

obs k = (the colour/depth capture paired with row k, see assembly.frame_assign; arm_joint/arm_eef/gripper
at t_k); colour and depth pair by nearest stamp within half a frame period (assembly.pairing); transition k =
(commanded EEF (7, wxyz) + commanded gripper (1) at t_k, /reward at t_k or 0). The last transition
is terminal when the episode is stopped with stop_episode (success) and a timeout when max_episode_s
ends it. Threads and timing: see recorder_base.
"""
from __future__ import annotations

import sys

from sensor_msgs.msg import Image
from std_msgs.msg import Float32

from piper_recorder.assembly.messages import image_to_numpy, stamp_ns
from piper_recorder.recording.config import RgbdRecorderConfig, rgbd_writer_config
from piper_recorder.recording.targets import RgbdTarget

from .common import now_ns, run_node
from .recorder_base import RecorderNode


class RgbdRecorder(RecorderNode):
    config_class = RgbdRecorderConfig
    cfg: RgbdRecorderConfig

    def __init__(self) -> None:
        super().__init__(RgbdRecorderConfig.node_name)

    def make_target(self) -> RgbdTarget:
        from rgbd_writer.writer import RgbdWriter

        return RgbdTarget(RgbdWriter(self.cfg.path, rgbd_writer_config(self.cfg)), self.cfg.camera)

    def subscribe_cameras(self) -> None:
        cam = self.cfg.camera
        self.create_subscription(Image, self.cfg.image_topic_pattern.format(cam=cam), self._on_color,
                                 self.image_qos)
        self.create_subscription(Image, self.cfg.depth_topic_pattern.format(cam=cam), self._on_depth,
                                 self.image_qos)
        if self.cfg.reward_topic:
            self.create_subscription(Float32, self.cfg.reward_topic,
                                     lambda m: self.controller.add_reward(now_ns(self), float(m.data)), 10)

    def _image(self, msg: Image, depth: bool):
        try:
            img = image_to_numpy(msg)
        except ValueError as exc:
            self.get_logger().error(f"{self.cfg.camera}: {exc}", throttle_duration_sec=5.0)
            return None
        return img if self.check_image(self.cfg.camera, img, depth=depth) else None

    def _on_color(self, msg: Image) -> None:   # paired with its depth image by nearest stamp (DepthPairer)
        img = self._image(msg, depth=False)
        if img is not None:
            self.controller.add_color(self.cfg.camera, stamp_ns(msg), img)

    def _on_depth(self, msg: Image) -> None:
        img = self._image(msg, depth=True)
        if img is not None:
            self.controller.add_depth(self.cfg.camera, stamp_ns(msg), img)


def main(args=None):
    sys.exit(run_node(RgbdRecorder, args))

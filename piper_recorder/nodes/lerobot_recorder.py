"""lerobot_recorder: arm topics + cameras -> LeRobot v2.0 dataset episodes through the four Trigger services.

Threads and timing: see recorder_base. Rows follow the exact 1/fps grid (piper_recorder.assembly);
frames go to the writer's per-camera encoders one per row re-stamped to the row time
(``timestamp_mode: nominal``, the default) or with their capture time (``capture``). A frame waits up to ``encoder_max_block_s``
on the writer thread for encoder queue space before it is dropped and counted (trade-off: see
``LeRobotRecorderConfig`` in piper_recorder.recording.config).
"""
from __future__ import annotations

import sys

from sensor_msgs.msg import Image
from std_msgs.msg import String

from piper_recorder.assembly.messages import image_to_numpy, stamp_ns
from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config
from piper_recorder.recording.targets import LeRobotTarget

from .common import now_ns, run_node
from .recorder_base import RecorderNode


class LeRobotRecorder(RecorderNode):
    config_class = LeRobotRecorderConfig
    cfg: LeRobotRecorderConfig

    def __init__(self) -> None:
        super().__init__(LeRobotRecorderConfig.node_name)

    def make_target(self) -> LeRobotTarget:
        from piper_recorder.lerobot.writer import LeRobotWriter

        writer = LeRobotWriter(self.cfg.root, lerobot_writer_config(self.cfg))
        return LeRobotTarget(writer, save_raw_quest=self.cfg.save_raw_quest)

    def subscribe_cameras(self) -> None:
        for cam in self.cfg.cameras:
            self.create_subscription(Image, self.cfg.image_topic_pattern.format(cam=cam),
                                     lambda m, cam=cam: self._on_image(cam, m), self.image_qos)
        if self.cfg.save_raw_quest:
            self.create_subscription(String, self.cfg.raw_quest_topic, self._on_raw, 1000)

    def _on_image(self, cam: str, msg: Image) -> None:
        try:
            rgb = image_to_numpy(msg)
        except ValueError as exc:
            self.frames_rejected[cam] = self.frames_rejected.get(cam, 0) + 1
            self.get_logger().error(f"{cam}: {exc}", throttle_duration_sec=5.0)
            return
        if self.check_image(cam, rgb):
            self.controller.add_frame(cam, stamp_ns(msg), rgb)

    def _on_raw(self, msg: String) -> None:
        self.controller.add_raw_quest(now_ns(self), msg.data)


def main(args=None):
    sys.exit(run_node(LeRobotRecorder, args))

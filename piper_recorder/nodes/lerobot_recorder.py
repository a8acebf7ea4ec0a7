"""lerobot_recorder: arm topics + cameras -> LeRobot v2.0 dataset episodes through the four Trigger services.

Threads and timing: see recorder_base. Rows follow the exact 1/fps grid (piper_recorder.assembly);
frames go to the writer's per-camera encoders one per row re-stamped to the row time
(``timestamp_mode: nominal``, the default) or with their capture time (``capture``). A frame waits up to ``encoder_max_block_s``
on the writer thread for encoder queue space before it is dropped and counted (trade-off: see
``LeRobotRecorderConfig`` in piper_recorder.recording.config). Its columns are the feature table's
(plus any extra inputs of its ``mapping``).
"""

from __future__ import annotations

import sys

from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config
from piper_recorder.recording.inputs import TopicMap
from piper_recorder.recording.targets import LeRobotTarget

from piper_recorder.nodes.plumbing.run_node import run_node
from .recorder_base import RecorderNode


class LeRobotRecorder(RecorderNode):
    config_class = LeRobotRecorderConfig
    fmt = "lerobot"
    cfg: LeRobotRecorderConfig

    def __init__(self) -> None:
        super().__init__(LeRobotRecorderConfig.node_name)

    def make_target(self, topics: TopicMap) -> LeRobotTarget:
        from piper_recorder.lerobot.writer import LeRobotWriter

        writer = LeRobotWriter(self.cfg.root, lerobot_writer_config(self.cfg, topics.cameras, table=topics.table))
        return LeRobotTarget(
            writer,
            save_raw_quest=self.cfg.save_raw_quest,
            table=topics.table,
            verdict=self.verdict_cfg,
            fps=self.cfg.fps,
            cameras=tuple(topics.cameras),
        )


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(LeRobotRecorder, args))

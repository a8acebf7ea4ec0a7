"""lerobot_recorder: arm topics + cameras -> LeRobot v2.0 episodes, driven by the four Trigger services.

Rows follow the exact 1/fps grid (piper_recorder.assembly); each camera's frames go to its encoder one per
row re-stamped to the row time (``timestamp_mode: nominal``, the default) or at their capture time
(``capture``). A frame waits up to ``encoder_max_block_s`` for encoder queue space, then is dropped and
counted. Columns are the feature table's. Threads and timing: see recorder_base.
"""

from __future__ import annotations

import sys

from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config
from piper_recorder.recording.inputs import TopicMap
from piper_recorder.recording.targets import LeRobotTarget

from .recorder_base import RecorderNode


class LeRobotRecorder(RecorderNode):
    """The recorder node writing LeRobot v2.0 episodes."""

    config_class = LeRobotRecorderConfig
    fmt = "lerobot"
    cfg: LeRobotRecorderConfig

    def __init__(self) -> None:
        super().__init__(LeRobotRecorderConfig.node_name)

    def make_target(self, topics: TopicMap) -> LeRobotTarget:
        """A LeRobot writer for these topics' cameras and feature table, behind its recording target."""
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
    """Run the node (console script ``piper-lerobot-recorder``)."""
    sys.exit(run_node(LeRobotRecorder, args))

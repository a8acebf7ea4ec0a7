"""rgbd_recorder: one RGB-D camera + arm -> optimized RGB-D HDF5 (T+1 observations per T transitions).

obs k = (the colour/depth capture paired with row k, see assembly.frame_assign; the feature table's
state terms arm_joint/arm_eef/gripper at t_k); colour and depth pair by nearest stamp within half a
frame period (assembly.pairing); transition k = (commanded EEF (7, wxyz) + commanded gripper (1) at
t_k, /reward at t_k or 0). The last transition is terminal when the episode is stopped with
stop_episode (success) and a timeout when max_episode_s ends it. Threads and timing: see recorder_base.
"""

from __future__ import annotations

import sys

from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.recording.config import RgbdRecorderConfig, rgbd_writer_config
from piper_recorder.recording.inputs import TopicMap
from piper_recorder.recording.targets import RgbdTarget

from .recorder_base import RecorderNode


class RgbdRecorder(RecorderNode):
    """The recorder node writing one camera's RGB-D episodes to HDF5."""

    config_class = RgbdRecorderConfig
    fmt = "rgbd"
    cfg: RgbdRecorderConfig

    def __init__(self) -> None:
        super().__init__(RgbdRecorderConfig.node_name)

    def make_target(self, topics: TopicMap) -> RgbdTarget:
        """An RGB-D writer for these topics' first camera, behind its recording target."""
        from rgbd_writer import RgbdWriter

        writer = RgbdWriter(self.cfg.path, rgbd_writer_config(self.cfg, topics.cameras, table=topics.table))
        return RgbdTarget(writer, next(iter(topics.cameras)), topics.table, verdict=self.verdict_cfg, fps=self.cfg.fps)


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-rgbd-recorder``)."""
    sys.exit(run_node(RgbdRecorder, args))

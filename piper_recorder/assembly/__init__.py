"""Stamped events -> episode rows and frames, shared by the live recorders and the rosbag converter (no ROS).

The assembler (``EpisodeAssembler``: its rules, use and determinism in ``assembler``), its configuration, the
camera frame assignment, depth pairing and the sinks that hand rows to the LeRobot and RGB-D writers.
"""

from .assembler import STATE_INPUTS, TIMESTAMP_MODES, AssemblyConfig, Counters, EpisodeAssembler, Frame, Row, Sink
from .frame_assign import CaptureHistory, window_captures
from .pairing import DepthPairer
from .sinks import LEROBOT_COLUMNS, RGBD_STATE_TERMS, LeRobotSink, RgbdSink

__all__ = [
    "LEROBOT_COLUMNS",
    "RGBD_STATE_TERMS",
    "STATE_INPUTS",
    "TIMESTAMP_MODES",
    "AssemblyConfig",
    "CaptureHistory",
    "Counters",
    "DepthPairer",
    "EpisodeAssembler",
    "Frame",
    "LeRobotSink",
    "RgbdSink",
    "Row",
    "Sink",
    "window_captures",
]

"""The streaming LeRobot v2.0 / v2.1 writer (``LeRobotWriter``) and its configuration (``WriterConfig``,
``CameraSpec``, ``VideoConfig``); inside it, the video encoders, meta builders, statistics sketches and its own
open-time crash repair (``crash_repair``; the explicit ``piper-recover`` is ``maintenance.recover``). Imports
``format`` only.
"""

from .config import CameraSpec, WriterConfig
from .dataset_writer import LeRobotWriter
from .video_encoder import VideoConfig

__all__ = ["CameraSpec", "LeRobotWriter", "VideoConfig", "WriterConfig"]

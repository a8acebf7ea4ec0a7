"""The streaming LeRobot v2.0 / v2.1 writer (``LeRobotWriter``) and its configuration; imports ``format`` only.

Configuration: ``WriterConfig``, ``CameraSpec``, ``VideoConfig``. Inside: the video encoders, meta builders,
statistics sketches and the open-time crash repair (``crash_repair``; the explicit ``piper-recover`` is
``maintenance.recover``).
"""

from .config import CameraSpec, WriterConfig
from .dataset_writer import LeRobotWriter
from .video_encoder import VideoConfig

__all__ = ["CameraSpec", "LeRobotWriter", "VideoConfig", "WriterConfig"]

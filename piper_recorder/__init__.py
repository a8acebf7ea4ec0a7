"""piper_recorder: ROS 2 teleoperation data collection for the AgileX Piper arm."""

__version__ = "0.1.0"

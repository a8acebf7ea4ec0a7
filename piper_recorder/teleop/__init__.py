"""Teleoperation math: clutch, XR-to-robot frames, filters and limits (no ROS)."""

"""LeRobot v2.0 dataset writer, statistics, finalize and validation (no ROS imports)."""

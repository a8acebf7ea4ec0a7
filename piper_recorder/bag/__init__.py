"""rosbag2 -> dataset conversion with the rosbags library (no ROS runtime)."""

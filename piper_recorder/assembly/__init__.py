"""Stamped events -> episode rows and camera frames; shared by the live recorders and the bag converter (no ROS)."""

"""Self-contained HTML reports of recorded datasets (LeRobot v2.0 roots and RGB-D HDF5 files); no ROS."""

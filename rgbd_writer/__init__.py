"""Optimized RGB-D HDF5 (rlroverlab.offline_rgbd_v2): writer, reader/loader, codecs, validation (no ROS)."""

"""Simulated RGB-D cameras without ROS.

Pinhole geometry, a cheap pre-rendered scene with the arm's end effector drawn as a marker, pose
interpolation to the capture time, and fault schedules. The sim_camera node (nodes/sim_camera.py) is a
thin adapter around this package.
"""

"""Inference runtime: backends, observation builder, chunk executor, safety, binding check.

No ROS and no torch: the ``policy`` node (nodes/policy.py) is a thin adapter over this package.
"""

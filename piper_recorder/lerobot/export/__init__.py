"""``piper-export``: one of our v2.0 / v2.1 roots to LeRobot v2.1 or v3.0.

``operation.export`` is the operation; ``v21`` and ``v30`` build the layouts, ``video_concat`` the v3.0 video
files by remux. Imports ``format`` only.
"""

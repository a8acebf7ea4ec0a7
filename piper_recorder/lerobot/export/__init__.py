"""``piper-export``: one of our v2.0 / v2.1 roots to LeRobot v2.1 or v3.0 (``operation.export``; the
layouts in ``v21`` and ``v30``, v3.0 video files by remux in ``video_concat``). Imports ``format`` only.
"""

"""The QoS profiles of the graph's image subscribers: a recorder's (reliable, a second of slack) and a live
viewer's (best-effort, the newest frames).
"""

from __future__ import annotations

import math

from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy


#: Frames a live (best-effort) image subscriber keeps while its process is off the CPU: a third of a second
#: at 30 fps. With 2 (the policy node) or 5 (``qos_profile_sensor_data``: quest_video, the dashboard) a
#: busy 2-core machine overwrote 1.8 % of 3 cameras' frames in the reader history before the executor took
#: them; history slots hold a frame only while it waits, so a deeper one costs nothing when the process keeps up.
LIVE_IMAGE_DEPTH = 10


#: Seconds of frames a recorder's (reliable) image subscription keeps while its process is off the CPU.
#: With 10 frames (a third of a second) a recorder descheduled for ~0.4 s beside two busy loops lost the two
#: oldest of 12 frames that reached its reader history meanwhile (reliable delivery ends at the reader's
#: history), and a row repeated a frame; a second covers the stalls seen there. Slots hold a frame only while
#: it waits, so a deeper history costs memory only while the recorder is behind.
RECORDER_IMAGE_SLACK_S = 1.0


def recorder_image_qos(fps: float, reliable: bool = True) -> QoSProfile:
    """QoS of a recorder's image subscription: reliable (every frame is a row's; ``image_reliability`` may
    choose best-effort), keep-last ``RECORDER_IMAGE_SLACK_S`` of frames at ``fps`` (at least
    ``LIVE_IMAGE_DEPTH``).
    """
    return QoSProfile(
        depth=max(LIVE_IMAGE_DEPTH, math.ceil(RECORDER_IMAGE_SLACK_S * fps)),
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
    )


def live_image_qos() -> QoSProfile:
    """QoS of a subscriber that shows or acts on the newest frames (quest_video, the policy node, the
    dashboard): best-effort, so a slow one never holds the camera's writer back (the recorders, which must
    keep every frame, subscribe reliable: ``recorder_base``), keep-last ``LIVE_IMAGE_DEPTH``.
    """
    return QoSProfile(
        depth=LIVE_IMAGE_DEPTH, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT
    )

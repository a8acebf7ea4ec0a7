"""The QoS profiles of the graph's image subscribers.

A recorder's is reliable with a second of slack; a live viewer's is best-effort, keeping the newest frames.
History slots hold a frame only while it waits, so a deeper history costs nothing while the process keeps up.
"""

from __future__ import annotations

import math

from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

#: Frames a live (best-effort) image subscriber keeps while its process is off the CPU: a third of a second
#: at 30 fps. Shallower histories (``qos_profile_sensor_data``'s 5) lose frames on a busy 2-core machine.
LIVE_IMAGE_DEPTH = 10


#: Seconds of frames a recorder's (reliable) image subscription keeps while its process is off the CPU.
#: Reliable delivery ends at the reader's history, so a recorder descheduled longer than its history loses
#: frames; a second covers the stalls seen beside two busy loops.
RECORDER_IMAGE_SLACK_S = 1.0


def recorder_image_qos(fps: float, reliable: bool = True) -> QoSProfile:
    """QoS of a recorder's image subscription.

    Reliable (every frame is a row's; ``image_reliability`` may choose best-effort), keep-last
    ``RECORDER_IMAGE_SLACK_S`` of frames at ``fps`` (at least ``LIVE_IMAGE_DEPTH``).
    """
    return QoSProfile(
        depth=max(LIVE_IMAGE_DEPTH, math.ceil(RECORDER_IMAGE_SLACK_S * fps)),
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
    )


def live_image_qos() -> QoSProfile:
    """QoS of a subscriber that shows or acts on the newest frames (quest_video, the policy node, the dashboard).

    Best-effort, so a slow one never holds the camera's writer back (the recorders, which must
    keep every frame, subscribe reliable: ``recorder_base``), keep-last ``LIVE_IMAGE_DEPTH``.
    """
    return QoSProfile(
        depth=LIVE_IMAGE_DEPTH, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT
    )

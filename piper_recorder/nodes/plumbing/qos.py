"""The QoS profiles of the graph's subscribers: images, the 100 Hz streams, the recorders' other inputs.

A recorder's image subscription is reliable with a second of slack; a live viewer's is best-effort, keeping the
newest frames. A reader of a stream whose samples supersede each other (the arm's feedback and commands, its
targets) is best-effort (``stream_qos``): each sample a reliable reader takes costs the publishing process a
timed event (Fast DDS's per-reader NACK suppression: ~930 wake-ups a second in a piper_arm read by both
recorders), while a lost sample is replaced by the next one (a recorder's row keeps the one before it, whose
age is checked). History slots hold a message only while it waits, so a deeper history costs nothing while the
process keeps up. Publishers stay reliable, so every subscriber (``ros2 topic echo``, a bag) matches them.
"""

from __future__ import annotations

import math

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from piper_recorder.recording.router import IMAGE, LATCHED, STREAM, TEXT

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


#: Samples a subscription to a 100 Hz stream keeps between two polls of its reader: half a second.
STREAM_DEPTH = 50
#: Raw headset lines a recorder keeps between two polls (90 Hz, bursty after a reconnect).
RECORDER_TEXT_DEPTH = 1000


def stream_qos(depth: int = STREAM_DEPTH) -> QoSProfile:
    """QoS of a reader of a high-rate stream whose samples supersede each other: best-effort, keep-last ``depth``."""
    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)


def recorder_input_qos(kind: str, fps: float, image_reliable: bool = True) -> QoSProfile:
    """QoS of a recorder's subscription to one input (``kind``: the route's, ``recording.router``).

    Images: ``recorder_image_qos``. A stream (``InputSpec.stream``: the arm's feedback and commands at 100 Hz):
    ``stream_qos``. A latched input gets the current value on joining (transient local); everything else (raw
    headset lines, a mapping's own inputs, the RGB-D reward) is reliable: a lost one would be lost from the record.
    """
    if kind == IMAGE:
        return recorder_image_qos(fps, image_reliable)
    if kind == STREAM:
        return stream_qos()
    if kind == LATCHED:  # the policy's actor: its current value on joining, and every change after it
        return QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    depth = RECORDER_TEXT_DEPTH if kind == TEXT else STREAM_DEPTH
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)

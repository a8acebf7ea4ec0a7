"""The recorders' subscription QoS per input kind: the arm's streams best-effort, the record's other inputs reliable."""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed

from rclpy.qos import DurabilityPolicy, ReliabilityPolicy  # noqa: E402

from piper_recorder.features.table import PIPER_TABLE  # noqa: E402
from piper_recorder.nodes.plumbing.qos import recorder_input_qos  # noqa: E402
from piper_recorder.recording.config import LeRobotRecorderConfig, RgbdRecorderConfig  # noqa: E402
from piper_recorder.recording.inputs import topic_map  # noqa: E402
from piper_recorder.recording.router import LATCHED, InputRouter  # noqa: E402


class _Sink:
    def __getattr__(self, name):
        return lambda *args: None


def _qos_by_topic(fmt: str, cfg) -> dict[str, tuple[ReliabilityPolicy, DurabilityPolicy, int]]:
    router = InputRouter(topic_map(fmt, cfg), _Sink(), depth=fmt == "rgbd")
    out = {}
    for r in router.routes:
        q = recorder_input_qos(r.kind, cfg.fps, cfg.image_reliability == "reliable")
        out[r.topic] = (q.reliability, q.durability, q.depth)
    return out


def test_recorders_take_the_arm_streams_best_effort_and_the_rest_of_the_record_reliably():
    streams = {s.name for s in PIPER_TABLE.inputs if s.stream}
    assert streams == {"joint_states", "eef_pose", "commanded_pose", "commanded_gripper"}
    lerobot = _qos_by_topic("lerobot", LeRobotRecorderConfig(raw_quest_topic="/quest/raw"))
    for topic in ("/arm/joint_states", "/arm/eef_pose", "/arm/commanded_pose", "/arm/commanded_gripper"):
        assert lerobot[topic] == (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, 50), topic
    assert lerobot["/quest/raw"][:2] == (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE)
    assert lerobot["/quest/raw"][2] >= 900  # ten seconds of 90 Hz lines between two polls
    latched = recorder_input_qos(LATCHED, 30.0)  # the policy's actor: its current value on joining
    assert (latched.reliability, latched.durability) == (ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL)
    images = [t for t in lerobot if t.endswith("/color/image_raw")]
    assert images and all(lerobot[t][0] == ReliabilityPolicy.RELIABLE and lerobot[t][2] >= 30 for t in images)
    rgbd = _qos_by_topic("rgbd", RgbdRecorderConfig(reward_topic="/reward", image_reliability="best_effort"))
    assert rgbd["/arm/eef_pose"][0] == ReliabilityPolicy.BEST_EFFORT
    assert rgbd["/reward"][0] == ReliabilityPolicy.RELIABLE  # a sparse input: a lost one is lost from the record
    depth_topics = [t for t in rgbd if "depth" in t]
    assert depth_topics and all(rgbd[t][0] == ReliabilityPolicy.BEST_EFFORT for t in depth_topics)  # as configured

"""Several arms in the recorders' settings: the arms' names, their topics under each arm's namespace, the feature
table and its columns, the session record and its binding keys per arm; one arm keeps every name it had.
"""

from __future__ import annotations

import pytest
import yaml

from piper_recorder.features.table import PIPER_TABLE, arms_table
from piper_recorder.lerobot.format.features import combined_names, combined_specs, lerobot_features
from piper_recorder.lerobot.format.provenance import BINDING_KEYS, binding_changes, binding_keys, lookup
from piper_recorder.names import arm_topic, parse_arms
from piper_recorder.recording.config import LeRobotRecorderConfig, RgbdRecorderConfig, rgbd_writer_config
from piper_recorder.recording.config import session_record as record_of
from piper_recorder.recording.inputs import topic_map

ARMS = ("left", "right")


def test_arm_names_are_namespace_tokens_given_once_and_at_least_two():
    assert parse_arms("left,right") == ARMS == parse_arms([" left", "right "])
    assert parse_arms("") == () == parse_arms([])
    for bad, words in (
        ("left,Right", "lower-case"),
        ("left,right/x", "lower-case"),
        ("arm,right", "other than 'arm'"),
        ("left,left", "each name once"),
        ("left", "two or more"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_arms(bad)
    assert arm_topic("left", "/arm/enable") == "/left/arm/enable" and arm_topic(None, "/arm/enable") == "/arm/enable"


def test_one_arm_keeps_the_piper_table_and_two_arms_prefix_every_name():
    assert arms_table(()) is PIPER_TABLE
    t = arms_table(ARMS)
    cols = [f.column for f in t.features if f.column]
    assert cols == [
        "observation.left_arm_joint",
        "observation.left_arm_eef",
        "observation.left_gripper",
        "observation.right_arm_joint",
        "observation.right_arm_eef",
        "observation.right_gripper",
        "action.left_arm_eef",
        "action.left_gripper",
        "action.right_arm_eef",
        "action.right_gripper",
    ]
    # GR00T's modality names per arm; each column's names as one arm's
    slices = {s[0] for f in lerobot_features(t) for s in f.slices()}
    assert {"left_arm_joint", "left_eef_pos", "left_eef_rot", "left_gripper", "right_eef_rot"} <= slices
    combined = {k: combined_names(v) for k, v in combined_specs(lerobot_features(t)).items()}
    assert len(combined["observation.state"]) == 28 and len(combined["action"]) == 16
    assert combined["action"][:8] == [f"left_arm_eef.{n}" for n in ("x", "y", "z", "qw", "qx", "qy", "qz")] + [
        "left_gripper.width"
    ]
    # the RGB-D action: every pose, then every gripper; its names follow the LeRobot columns'
    assert t.rgbd_keys("action") == ("left_cmd_eef", "right_cmd_eef", "left_cmd_gripper", "right_cmd_gripper")
    assert t.rgbd_names("action")[14:] == ("left_gripper.width", "right_gripper.width")
    assert PIPER_TABLE.rgbd_keys("action") == ("cmd_eef", "cmd_gripper")  # one arm: as it was
    assert t.rgbd_keys("state") == tuple(f"{a}_{p}" for a in ARMS for p in ("arm_joint", "arm_eef", "gripper"))
    assert {s.name: s.arm for s in t.inputs}["right_commanded_pose"] == "right"
    assert t.input("reward").arm is None


def test_the_recorder_subscribes_each_arm_under_its_namespace(tmp_path):
    cfg = LeRobotRecorderConfig(arms=list(ARMS), eef_topic="/arm/tcp_pose")
    cfg.validate()
    tm = topic_map("lerobot", cfg)
    topics = {spec.name: b.topic for spec, b in tm.active()}
    assert topics["left_joint_states"] == "/left/arm/joint_states"
    assert topics["right_eef_pose"] == "/right/arm/tcp_pose"  # a renamed topic, under each arm's namespace
    assert topics["right_commanded_gripper"] == "/right/arm/commanded_gripper"
    assert "joint_states" not in topics and tm.provenance is None
    assert tm.provenance_topics() == {"left": "/left/arm/provenance", "right": "/right/arm/provenance"}
    assert "/right/arm/provenance" in tm.optional()
    # a mapping renames one arm's topic and its provenance
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"left_eef_pose": "/puppet/left/pose", "right_provenance": None}))
    tm = topic_map("lerobot", cfg, m)
    assert tm.topic("left_eef_pose") == "/puppet/left/pose" and tm.topic("right_eef_pose") == "/right/arm/tcp_pose"
    assert tm.provenance_topics() == {"left": "/left/arm/provenance"}
    # one arm: the names it always had
    one = topic_map("lerobot", LeRobotRecorderConfig())
    assert one.topic("joint_states") == "/arm/joint_states" and one.provenance_topics() == {None: "/arm/provenance"}
    assert "arms" not in one.to_dict() and one.to_dict()["joint_states"] == "/arm/joint_states"
    with pytest.raises(ValueError, match="arms"):
        LeRobotRecorderConfig(arms=["left"]).validate()


def test_each_arm_has_its_provenance_and_binding_keys():
    cfg = LeRobotRecorderConfig(arms=list(ARMS))
    left = {"backend": "impedance", "kp": 10.0, "firmware": "S-V1.6-3", "can_channel": "can_left"}
    right = {**left, "firmware": "S-V1.8-8", "can_channel": "can_right"}
    rec = record_of(cfg, "lerobot_recorder", {"left": left, "right": right}, None)
    assert "arm" not in rec and "control" not in rec and rec["recording"]["arms"] == list(ARMS)
    keys = binding_keys(rec)
    assert keys[0] == "arms.left.control.backend" and keys[-1] == "recording.fps" and len(keys) == 13
    assert [lookup(rec, f"arms.{a}.arm.firmware") for a in ARMS] == ["S-V1.6-3", "S-V1.8-8"]
    assert lookup(rec, "arms.right.arm.can_channel") == "can_right"
    # the binding warning compares arm by arm: a firmware change on the right arm only
    later = record_of(cfg, "lerobot_recorder", {"left": left, "right": {**right, "firmware": "S-V1.8-9"}}, None)
    assert binding_changes(rec, later) == [("arms.right.arm.firmware", "S-V1.8-8", "S-V1.8-9")]
    # an arm that reported nothing is unknown; going from one arm to two changes every key
    partial = record_of(cfg, "lerobot_recorder", {"left": left}, None)
    assert lookup(partial, "arms.right.control.backend") == "unknown"
    one = record_of(LeRobotRecorderConfig(), "lerobot_recorder", left, None)
    assert binding_keys(one) == BINDING_KEYS and "arms" not in one["recording"]
    changed = {k for k, _, _ in binding_changes(one, rec)}
    assert "control.backend" in changed and "arms.left.control.backend" in changed and "recording.fps" not in changed


def test_the_rgbd_file_names_the_arms_and_its_action_elements():
    pytest.importorskip("rgbd_writer.writer")
    cfg = RgbdRecorderConfig(arms=list(ARMS))
    env = rgbd_writer_config(cfg, table=arms_table(ARMS)).env_args
    assert env["arms"] == list(ARMS) and env["action_names"][:3] == [
        "left_arm_eef.x",
        "left_arm_eef.y",
        "left_arm_eef.z",
    ]
    assert env["state_terms"][3:] == ["right_arm_joint", "right_arm_eef", "right_gripper"]
    one = rgbd_writer_config(RgbdRecorderConfig()).env_args
    assert "arms" not in one and "action_names" not in one

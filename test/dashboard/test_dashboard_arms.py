"""The dashboard's view model with two arms: each arm's joints, feedback, commands and clutch under its name, each
arm's piper_arm expected; one arm's view keeps exactly what it had. Pure: the model fed plain values, no server.
"""

from __future__ import annotations

import json

import pytest

from piper_recorder.dashboard.model import JOINTS, POSE, DashboardConfig, DashboardModel, rate_topics

ARMS = ["left", "right"]
JOINT_NAMES = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]
# every key of the one-arm view (the page and the graph tests read them)
ONE_ARM_VIEW = {"t", "graph", "recorders", "episode", "cameras", "joints", "teleop", "headset", "events"}


def _feed(m: DashboardModel, topic: str, t0: float, hz: float, n: int) -> None:
    for k in range(n):
        m.tick(topic, t0 + k / hz)


def _arm(engaged: bool, releases: int = 0, reason: str | None = None) -> dict:
    return {
        "engaged": engaged,
        "limits_active": [],
        "last_release": reason,
        "last_release_age_s": None,
        "forced_releases": releases,
    }


def test_one_arm_watches_and_shows_what_it_always_did():
    assert rate_topics() == [
        ("/arm/joint_states", JOINTS, True),
        ("/quest/right/pose", POSE, True),
        ("/arm/commanded_pose", POSE, False),
    ]
    cfg = DashboardConfig()
    assert cfg.expected_nodes() == ["quest_bridge", "teleop", "piper_arm", "lerobot_recorder", "rgbd_recorder"]
    m = DashboardModel(cfg)
    for topic, _what, required in rate_topics():
        m.watch_topic(topic, required)
    m.on_joints(JOINT_NAMES, [0.1, 0.2, -0.3, 0.0, 0.5, 0.0, 0.02], 10.0)
    m.on_joints(JOINT_NAMES, [9.0] * 7, 10.0, "left")  # an arm this dashboard does not show: ignored
    m.on_teleop_status({"engaged": True, "forced_releases": 1, "last_release": "menu"}, 10.0)
    v = m.view(10.5)
    assert set(v) == ONE_ARM_VIEW
    assert [j["position"] for j in v["joints"]["joints"]] == [0.1, 0.2, -0.3, 0.0, 0.5, 0.0]
    assert v["joints"]["age_s"] == 0.5 and v["joints"]["gripper"]["position"] == 0.02
    assert [t["topic"] for t in v["graph"]["topics"]] == [
        "/arm/joint_states",
        "/quest/right/pose",
        "/arm/commanded_pose",
    ]
    assert [n["name"] for n in v["graph"]["nodes"]] == cfg.nodes
    assert set(v["teleop"]) == {
        "present",
        "stale",
        "age_s",
        "engaged",
        "recording",
        "limits",
        "counters",
        "last_alarm",
        "calls_in_flight",
        "invalid_fields",
        "last_release",
    }
    assert v["teleop"]["invalid_fields"] == []


def test_two_arms_watch_each_arms_topics_and_expect_each_piper_arm():
    assert rate_topics(("left", "right")) == [
        ("/left/arm/joint_states", JOINTS, True),
        ("/right/arm/joint_states", JOINTS, True),
        ("/quest/left/pose", POSE, True),
        ("/quest/right/pose", POSE, True),
        ("/left/arm/commanded_pose", POSE, False),
        ("/right/arm/commanded_pose", POSE, False),
    ]
    cfg = DashboardConfig(arms=ARMS)
    cfg.validate()
    assert cfg.expected_nodes() == [
        "quest_bridge",
        "teleop",
        "left/piper_arm",
        "right/piper_arm",
        "lerobot_recorder",
        "rgbd_recorder",
    ]
    # the list the graph passes already names each arm's node: kept as it is
    given = DashboardConfig(arms=ARMS, nodes=["left/piper_arm", "right/piper_arm", "teleop"])
    assert given.expected_nodes() == ["left/piper_arm", "right/piper_arm", "teleop"]
    m = DashboardModel(cfg)
    for topic, _what, required in rate_topics(cfg.arm_names()):
        m.watch_topic(topic, required)
        _feed(m, topic, 9.0, 50.0, 51)
    m.set_nodes({"quest_bridge", "teleop", "left/piper_arm", "lerobot_recorder", "rgbd_recorder"}, 10.0)
    g = m.view(10.0)["graph"]
    assert {n["name"]: n["present"] for n in g["nodes"]} == {
        "quest_bridge": True,
        "teleop": True,
        "left/piper_arm": True,
        "right/piper_arm": False,
        "lerobot_recorder": True,
        "rgbd_recorder": True,
    }
    assert not g["healthy"]
    m.set_nodes({*cfg.expected_nodes()}, 10.0)
    assert m.view(10.0)["graph"]["healthy"]
    _feed(m, "/left/arm/joint_states", 10.02, 50.0, 250)  # the right arm's feedback falls silent
    g = m.view(15.0)["graph"]
    silent = [t["topic"] for t in g["topics"] if t["required"] and not t["ok"]]
    assert "/right/arm/joint_states" in silent and "/left/arm/joint_states" not in silent and not g["healthy"]


def test_two_arms_show_each_arms_joints_feedback_commands_and_clutch():
    cfg = DashboardConfig(arms=ARMS)
    m = DashboardModel(cfg)
    for topic, _what, required in rate_topics(cfg.arm_names()):
        m.watch_topic(topic, required)
    _feed(m, "/left/arm/joint_states", 9.0, 200.0, 201)
    _feed(m, "/right/arm/joint_states", 6.0, 100.0, 101)  # silent since 7.0: out of the rate window
    _feed(m, "/left/arm/commanded_pose", 9.5, 200.0, 101)
    m.on_joints(JOINT_NAMES, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.01], 10.0, "left")
    m.on_joints(JOINT_NAMES, [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, 0.05], 9.0, "right")
    m.on_joints(JOINT_NAMES, [7.0] * 7, 10.0, "middle")  # not one of the arms: ignored
    m.on_teleop_status(
        {
            "engaged": True,
            "forced_releases": 1,
            "last_release": "arm feedback stale",
            "arms": {"left": _arm(True), "right": _arm(False, 1, "arm feedback stale")},
        },
        10.0,
    )
    v = m.view(10.5)
    json.dumps(v, allow_nan=False)
    assert set(v) == ONE_ARM_VIEW | {"arms"}
    assert v["joints"] == {"joints": [], "gripper": None, "age_s": None}  # nothing on the one arm's topic
    left, right = v["arms"]
    assert left["name"] == "left" and right["name"] == "right"
    assert [j["position"] for j in left["joints"]] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert [j["position"] for j in right["joints"]] == [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]
    assert left["gripper"]["position"] == 0.01 and right["gripper"]["position"] == 0.05
    assert left["age_s"] == 0.5 and right["age_s"] == 1.5  # feedback age, each arm's own
    assert left["feedback_topic"] == "/left/arm/joint_states" and right["feedback_topic"] == "/right/arm/joint_states"
    assert left["feedback_rate_hz"] == pytest.approx(200.0, abs=1.0) and right["feedback_rate_hz"] == 0.0
    assert left["commanded"]["rate_hz"] == pytest.approx(200.0, abs=1.0) and left["commanded"]["age_s"] == 0.5
    assert right["commanded"] == {"rate_hz": 0.0, "age_s": None}  # never commanded
    assert left["clutch"]["engaged"] is True and left["clutch"]["last_release"] is None
    assert right["clutch"]["engaged"] is False and right["clutch"]["last_release"] == "arm feedback stale"
    assert right["clutch"]["forced_releases"] == 1 and not right["clutch"]["stale"]
    assert m.view(20.0)["arms"][1]["clutch"]["stale"]  # teleop silent: its clutch is old news
    # the teleop section keeps teleop's one-arm keys (any arm engaged, the summed count)
    assert v["teleop"]["engaged"] and v["teleop"]["counters"]["forced_releases"] == 1


def test_two_arms_before_anything_arrives_and_with_malformed_arms():
    m = DashboardModel(DashboardConfig(arms=ARMS))
    v = m.view(1.0)
    assert [a["name"] for a in v["arms"]] == ARMS
    assert v["arms"][0]["joints"] == [] and v["arms"][0]["age_s"] is None and v["arms"][0]["clutch"] is None
    m.on_teleop_status({"engaged": False, "arms": {"left": {"engaged": "yes", "forced_releases": -1}}}, 1.0)
    v = m.view(1.0)
    assert v["arms"][0]["clutch"]["engaged"] is None and v["arms"][0]["clutch"]["forced_releases"] is None
    assert v["arms"][1]["clutch"] is None  # teleop said nothing of it
    assert {"arms.left.engaged", "arms.left.forced_releases"} <= set(v["teleop"]["invalid_fields"])
    m.on_teleop_status({"engaged": False, "arms": ["left"]}, 2.0)
    assert "arms" in m.view(2.0)["teleop"]["invalid_fields"] and m.view(2.0)["arms"][0]["clutch"] is None
    with pytest.raises(ValueError, match="two or more"):
        DashboardConfig(arms=["left"]).validate()

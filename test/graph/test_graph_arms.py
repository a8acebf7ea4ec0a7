"""Several arms in the graph's plan: one piper_arm per arm under its namespace, each with its own parameters, and the
nodes that follow the arms told them; one arm keeps the plan it had. Planning starts no process.
"""

from __future__ import annotations

import pytest
import yaml

from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.graph_node import launch_graph
from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.params.derived import LAUNCH_SECTION, effective_params
from piper_recorder.params.params_file import node_params, read_params_file

SIM = ["piper_launch.sim_quest.port=0"]


def test_two_arms_start_a_piper_arm_under_each_namespace(tmp_path):
    plan = plan_graph(
        "sim", config_path("sim"), [*SIM, "right/piper_arm.emulator_firmware=S-V1.8-8"], tmp_path, arms="left,right"
    )
    names = [p.name for p in plan.processes]
    assert names[:4] == ["sim_quest", "left/piper_arm", "right/piper_arm", "quest_bridge"]
    assert "piper_arm" not in names and set(plan.node_names) >= {"left/piper_arm", "right/piper_arm"}
    left = next(p for p in plan.processes if p.name == "left/piper_arm")
    i = left.argv.index("--ros-args")
    assert left.argv[i:] == [
        "--ros-args",
        "-r",
        "__node:=piper_arm",
        "-r",
        "__ns:=/left",
        "--params-file",
        str(plan.params_file),
    ]
    # the file the nodes read: each arm's section is the shared piper_arm section with the arm's own on top
    cfg = read_params_file(plan.params_file)
    assert cfg["left/piper_arm"]["emulate"] is True and cfg["right/piper_arm"]["emulate"] is True
    assert (
        cfg["right/piper_arm"]["emulator_firmware"] == "S-V1.8-8" and "emulator_firmware" not in cfg["left/piper_arm"]
    )
    assert cfg[LAUNCH_SECTION]["arms"] == ["left", "right"]
    for node in ("lerobot_recorder", "rgbd_recorder", "teleop", "quest_video"):
        assert cfg[node]["arms"] == ["left", "right"], node
    assert cfg["quest_video"]["cameras"]  # its panels beside its arms
    # one arm: the plan it had (no namespace, no arms anywhere)
    one = plan_graph("sim", config_path("sim"), SIM, tmp_path / "one")
    assert "piper_arm" in [p.name for p in one.processes]
    assert "-r" in (arm := next(p for p in one.processes if p.name == "piper_arm")).argv
    assert not any(a.startswith("__ns:=") for a in arm.argv)
    assert "arms" not in read_params_file(one.params_file)["lerobot_recorder"]
    assert "arms" not in read_params_file(one.params_file)["quest_video"]


def test_the_dashboard_follows_the_arms(tmp_path):
    """The dashboard shows each arm and expects each arm's piper_arm; a section of its own that names other arms
    is refused like any follower's; one arm: no arms, the plain piper_arm.
    """
    plan = plan_graph("sim", config_path("sim"), SIM, tmp_path, dashboard="true", arms="left,right")
    dash = read_params_file(plan.params_file)["dashboard"]
    assert dash["arms"] == ["left", "right"]
    assert {"left/piper_arm", "right/piper_arm"} <= set(dash["nodes"]) and "piper_arm" not in dash["nodes"]
    one = read_params_file(plan_graph("sim", config_path("sim"), SIM, tmp_path / "one", dashboard="true").params_file)
    assert "arms" not in one["dashboard"] and "piper_arm" in one["dashboard"]["nodes"]
    with pytest.raises(LaunchError, match=r"dashboard.arms \['a', 'b'\] contradicts"):
        plan_graph(
            "sim",
            config_path("sim"),
            [*SIM, "dashboard.arms=[a, b]"],
            tmp_path / "bad",
            dashboard="true",
            arms="left,right",
        )


def test_the_arms_come_from_the_config_and_the_launch_files_see_the_same(tmp_path):
    doc = read_params_file(config_path("robot"))
    doc[LAUNCH_SECTION]["arms"] = ["left", "right"]
    doc["left/piper_arm"] = {"can_channel": "can_left"}
    doc["right/piper_arm"] = {"can_channel": "can_right", "backend": "impedance"}
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump({n: {"ros__parameters": p} for n, p in doc.items()}))
    arms = [n for n in launch_graph("robot", path) if n.name == "piper_arm"]
    assert [(n.namespace, n.key) for n in arms] == [("left", "left/piper_arm"), ("right", "right/piper_arm")]
    assert [n.parameters["can_channel"] for n in arms] == ["can_left", "can_right"]
    assert arms[1].parameters["backend"] == "impedance" and arms[0].parameters.get("backend") != "impedance"
    # what the bag converter and piper-recover read from the same file: the recorders follow the arms
    eff = effective_params(doc)
    assert eff["lerobot_recorder"]["arms"] == ["left", "right"]
    # two arms on one CAN channel are refused on the robot, naming both sections
    doc["right/piper_arm"]["can_channel"] = "can_left"
    path.write_text(yaml.safe_dump({n: {"ros__parameters": p} for n, p in doc.items()}))
    with pytest.raises(LaunchError, match=r"left/piper_arm and right/piper_arm both drive CAN channel 'can_left'"):
        launch_graph("robot", path)
    assert node_params(doc, "left/piper_arm") == {"can_channel": "can_left"}


def test_bad_arms_are_refused_before_anything_starts(tmp_path):
    for arms, words in (("left", "two or more"), ("left,Left", "lower-case"), ("left,left", "each name once")):
        with pytest.raises(LaunchError, match=words):
            plan_graph("sim", config_path("sim"), SIM, tmp_path, arms=arms)
    with pytest.raises(LaunchError, match="piper_launch.arms"):
        plan_graph("sim", config_path("sim"), [*SIM, "piper_launch.arms=[left]"], tmp_path)
    with pytest.raises(LaunchError, match=r"teleop.arms \['a', 'b'\] contradicts"):
        plan_graph("sim", config_path("sim"), [*SIM, "teleop.arms=[a, b]"], tmp_path, arms="left,right")
    assert not list(tmp_path.glob("*.log"))

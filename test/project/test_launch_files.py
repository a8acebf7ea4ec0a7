"""Launch files and configs: always checked statically (AST + YAML against setup.py and the node
config classes); with `launch_ros` importable, their launch descriptions are evaluated too.
"""

from __future__ import annotations

import ast
import dataclasses

import pytest

from piper_recorder.graph.executables import NODE_EXECUTABLES
from piper_recorder.graph.graph_node import launch_graph
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.realsense import realsense_parameters
from piper_recorder.params.derived import LAUNCH_SECTION, effective_params
from piper_recorder.params.params_file import read_params_file

from support.node_configs import config_classes
from support.paths import ROOT

LAUNCH = {name: ROOT / "launch" / f"{name}.launch.py" for name in ("sim", "robot")}
CONFIG = {name: ROOT / "config" / f"{name}.yaml" for name in ("sim", "robot")}
OUR_NODES = ("quest_bridge", "teleop", "piper_arm", "lerobot_recorder", "rgbd_recorder", "quest_video")
REALSENSE_PARAMS = {
    "camera_name",
    "serial_no",
    "rgb_camera.color_profile",
    "depth_module.depth_profile",
    "align_depth.enable",
    "enable_sync",
    "enable_color",
    "enable_depth",
    "pointcloud.enable",
}


def _setup_executables() -> set[str]:
    return set(NODE_EXECUTABLES)


def _node_calls(tree: ast.AST) -> list[dict[str, object]]:
    """Keyword literals of every Node(...) call in a launch file."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Node":
            calls.append(
                {k.arg: (k.value.value if isinstance(k.value, ast.Constant) else k.value) for k in node.keywords}
            )
    return calls


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_launch_file_references_declared_executables(name):
    """The launch file turns graph.graph_node.launch_graph (the graph piper-launch starts too) into launch_ros
    actions; every executable of that graph is declared in setup.py and every node has a config section.
    """
    tree = ast.parse(LAUNCH[name].read_text(), filename=str(LAUNCH[name]))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    assert _node_calls(tree)
    assert "launch_graph" in {getattr(n.func, "id", "") for n in ast.walk(tree) if isinstance(n, ast.Call)}
    executables = _setup_executables()
    cfg = read_params_file(CONFIG[name])
    cameras = cfg[LAUNCH_SECTION]["cameras"]
    graph = launch_graph(name, CONFIG[name])
    camera_nodes = [p for p in graph if set(p.node_names) & set(cameras)]
    ours = [
        (p.name, p.executable) for p in graph if p.package == "piper_recorder" and p.ros_node and p not in camera_nodes
    ]
    assert {n for n, _ in ours} == set(OUR_NODES)
    for node_name, exe in ours:
        assert exe in executables, f"{name} graph uses executable {exe!r} not declared in setup.py"
        assert node_name in cfg, f"{node_name} has no section in {name}.yaml"
    assert [c for p in camera_nodes for c in p.node_names if c in cameras] == cameras
    optional = launch_graph(name, CONFIG[name], dashboard="true", policy="hold")
    extra = [(p.name, p.executable) for p in optional if p.name not in {q.name for q in graph}]
    assert extra == [("policy", "policy"), ("dashboard", "dashboard")]  # started by launch arguments only
    assert all(exe in executables for _, exe in extra)
    if name == "robot":
        assert {p.executable for p in graph if p.package != "piper_recorder"} == {"realsense2_camera_node"}
        assert all(p.package == "realsense2_camera" and p.namespace == "" for p in camera_nodes)
    else:  # one process runs every sim camera, each under its own name (a name remap would rename them all)
        assert [(p.name, p.executable, p.hosts) for p in camera_nodes] == [
            ("sim_cameras", "sim_cameras", tuple(cameras))
        ]
        assert camera_nodes[0].parameters == {"cameras": cameras} and "sim_cameras" in executables
        headset = [p for p in graph if not p.ros_node]
        assert [p.executable for p in headset] == ["sim_quest"] and "sim_quest" in executables
        assert headset[0].args[headset[0].args.index("--video-port") + 1] == "8736"  # quest_video's peer


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_config_keys_are_declared_parameters(name):
    """Every parameter in the YAML is a field of the node's config dataclass (rclpy would ignore a typo)."""
    pytest.importorskip("rclpy")
    cfg = read_params_file(CONFIG[name])
    cameras = cfg[LAUNCH_SECTION]["cameras"]
    assert cameras and set(OUR_NODES) <= set(cfg)
    for node in OUR_NODES + (tuple(cameras) if name == "sim" else ()):
        declared = set()
        for cls, prefix in config_classes("sim_camera" if node in cameras else node):
            declared |= {prefix + f.name for f in dataclasses.fields(cls)}
        unknown = set(cfg[node]) - declared
        assert not unknown, f"{name}.yaml {node}: unknown parameters {sorted(unknown)}"
    eff = effective_params(cfg)  # what the nodes get: the cameras' lists derived from piper_launch.cameras
    assert eff["lerobot_recorder"]["cameras"] == cameras and eff["rgbd_recorder"]["camera"] == cameras[0]
    assert eff["lerobot_recorder"]["camera_serials"] == [
        cfg[c]["serial_no" if name == "robot" else "serial"] for c in cameras
    ]
    if name == "robot":
        for cam in cameras:
            assert set(cfg[cam]) <= REALSENSE_PARAMS, set(cfg[cam]) - REALSENSE_PARAMS
            node = {**cfg[cam], **realsense_parameters(cfg, cam)}  # its section, then the launch's
            assert node["align_depth.enable"] is True and node["enable_sync"] is True
            assert isinstance(node["serial_no"], str) and node["camera_name"] == cam
            assert node["rgb_camera.color_profile"] == node["depth_module.depth_profile"] == "640x480x30"
    else:
        assert cfg["piper_arm"]["emulate"] is True


def test_pip_launcher_plan_matches_config(tmp_path):
    plan = plan_graph(
        "sim",
        CONFIG["sim"],
        ["piper_launch.sim_quest.port=0", "cam_front.width=320", "lerobot_recorder.task=stack"],
        tmp_path,
        cameras="cam_front",
    )
    names = [p.name for p in plan.processes]
    assert names == [
        "sim_quest",
        "piper_arm",
        "quest_bridge",
        "teleop",
        "sim_cameras",
        "lerobot_recorder",
        "rgbd_recorder",
        "quest_video",
    ]
    cfg = read_params_file(plan.params_file)  # the effective file every node gets
    assert cfg["quest_bridge"]["port"] == cfg[LAUNCH_SECTION]["sim_quest"]["port"] > 0
    # the headset's video channel: a free port too, shared by quest_video and the sim headset; its panels follow
    # the chosen cameras
    vport = cfg[LAUNCH_SECTION]["sim_quest"]["video_port"]
    assert cfg["quest_video"]["port"] == vport > 0 and vport != cfg["quest_bridge"]["port"]
    assert cfg["quest_video"]["cameras"] == ["cam_front"]
    headset = next(p for p in plan.processes if p.name == "sim_quest")
    assert headset.argv[headset.argv.index("--video-port") + 1] == str(vport)
    off = plan_graph(
        "sim", CONFIG["sim"], ["piper_launch.sim_quest.port=0", "piper_launch.headset_video=false"], tmp_path
    )
    assert "quest_video" not in [p.name for p in off.processes] and "quest_video" not in off.config
    assert cfg["cam_front"]["width"] == 320 and cfg["lerobot_recorder"]["task"] == "stack"
    assert cfg["lerobot_recorder"]["cameras"] == ["cam_front"]
    assert cfg["lerobot_recorder"]["camera_serials"] == ["sim-front-0001"]
    cam = next(p for p in plan.processes if p.name == "sim_cameras")
    nice = cfg[LAUNCH_SECTION]["bulk_nice"]
    assert nice > 0 and cam.argv[:3] == ["nice", "-n", str(nice)]  # bulk work yields to the control chain
    assert cam.argv[3].endswith("piper-sim-cameras")
    assert cam.argv[4:] == ["--ros-args", "--params-file", str(plan.params_file)]  # no remap: cameras keep their names
    assert cfg["sim_cameras"] == {"cameras": ["cam_front"]} and cam.hosts == ("cam_front",)
    assert plan.node_names == [  # what the launcher waits for: the cameras too
        *("piper_arm", "quest_bridge", "teleop", "sim_cameras", "cam_front"),
        *("lerobot_recorder", "rgbd_recorder", "quest_video"),
    ]
    arm = next(p for p in plan.processes if p.name == "piper_arm")
    assert arm.argv[0].endswith("piper-arm")
    assert "&" not in plan.params_file.read_text()  # rcl rejects YAML aliases


# ---- with launch / launch_ros installed (a full ROS 2 install) ---------------------------------------


def _describe(name: str, **args: str):
    pytest.importorskip("launch_ros")
    from launch.actions import OpaqueFunction
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from launch.utilities import perform_substitutions

    from launch import LaunchContext

    ld = PythonLaunchDescriptionSource(str(LAUNCH[name])).get_launch_description(LaunchContext())
    ctx = LaunchContext()
    ctx.launch_configurations.update(
        {a.name: a.default_value[0].text if a.default_value else "" for a in ld.get_launch_arguments()}
    )
    ctx.launch_configurations.update(config=str(CONFIG[name]), **args)
    actions = []
    for entity in ld.entities:
        if isinstance(entity, OpaqueFunction):
            actions += entity.execute(ctx) or []
    return actions, ctx, perform_substitutions


def _nodes(actions, ctx, perform):
    from launch_ros.actions import Node

    def text(v):
        return v if v is None or isinstance(v, str) else perform(ctx, v)

    out = {}
    for a in actions:
        if isinstance(a, Node):
            out[text(a._Node__node_name)] = (
                text(a.node_package),
                text(a.node_executable),
                text(a._Node__node_namespace),
                a._Node__parameters,
            )
    return out


def test_sim_launch_description():
    actions, ctx, perform = _describe("sim", task="stack", root="/tmp/x", cameras="cam_front")
    nodes = _nodes(actions, ctx, perform)
    assert set(nodes) == {*OUR_NODES, "cam_front"}
    assert nodes["cam_front"][:2] == ("piper_recorder", "sim_camera")
    assert all(pkg == "piper_recorder" for pkg, *_ in nodes.values())
    from launch.actions import ExecuteProcess
    from launch_ros.actions import Node

    headset = [a for a in actions if isinstance(a, ExecuteProcess) and not isinstance(a, Node)]
    assert len(headset) == 1
    cmd = [perform(ctx, part) if not isinstance(part, str) else part for part in headset[0].cmd[1:]]
    assert cmd[cmd.index("--script") + 1] == "demo" and "--no-buttons" in cmd
    # bulk work (sim cameras, recorders) at a lower CPU priority, as piper-launch starts it
    prefixes = {a._Node__node_name: perform(ctx, a.process_description.prefix) for a in actions if isinstance(a, Node)}
    nice = f"nice -n {read_params_file(CONFIG['sim'])[LAUNCH_SECTION]['bulk_nice']}"
    assert {n for n, p in prefixes.items() if p == nice} == {"cam_front", "lerobot_recorder", "rgbd_recorder"}
    assert all(p in ("", nice) for p in prefixes.values())
    # each process's output is labelled by its node, not by the prefix's first word ("nice")
    labels = {a._Node__node_name: perform(ctx, a.process_description.name) for a in actions if isinstance(a, Node)}
    assert labels == {n: n for n in labels}


def test_robot_launch_description():
    actions, ctx, perform = _describe("robot", cameras="cam_front,cam_wrist", backend="impedance")
    nodes = _nodes(actions, ctx, perform)
    assert set(nodes) == {*OUR_NODES, "cam_front", "cam_wrist"}
    for cam in ("cam_front", "cam_wrist"):
        pkg, exe, ns, _params = nodes[cam]
        assert (pkg, exe, ns) == ("realsense2_camera", "realsense2_camera_node", "")

"""The launch files' graph builders run here, where `launch`/`launch_ros` are not installed (#16.10).

The launch files are evaluated with stand-in `launch`, `launch_ros` and `ament_index_python` modules
that record each action's arguments, so what `ros2 launch` would start is checked on every machine:
each process labelled with its node name (launch labels a process with ``exec_name``, else with the
basename of the first word of its command line, which a ``prefix`` such as ``nice -n 5`` replaces:
launch/descriptions/executable.py), the RealSense profiles under both wrapper generations' names,
and the pip launcher finding its scripts in a colcon install. test_launch_files.py evaluates the same
files with the real `launch_ros` wherever it is importable. The stand-in ament index knows this package
and, when a test installs one, a realsense2_camera of a given version (its package.xml).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from piper_recorder.graph import install as package_install
from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.executables import NODE_EXECUTABLES
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.rosenv import PROFILE_VARS, dds_features
from piper_recorder.params.derived import LAUNCH_SECTION
from piper_recorder.params.params_file import read_params_file

from support.launch_stub import (
    Action,
    ExecuteProcess,
    LogInfo,
    Node,
    SetEnvironmentVariable,
    UnsetEnvironmentVariable,
    graph,
    install_realsense,
)
from support.paths import ROOT

OUR_NODES = {"quest_bridge", "teleop", "piper_arm", "lerobot_recorder", "rgbd_recorder", "quest_video"}


def label(action: Action) -> str:
    """The output label launch gives a process (launch/descriptions/executable.py: ``name`` (a Node's
    ``exec_name``) if given, else the basename of the command's first word after the prefix).
    """
    kw = action.kwargs
    given = kw.get("exec_name") if isinstance(action, Node) else kw.get("name")
    if given:
        return given
    cmd = shlex.split(kw.get("prefix") or "") + [kw.get("executable") or "<cmd>"]
    return os.path.basename(cmd[0])


def test_sim_launch_labels_every_process_by_its_node_even_behind_nice(stub_launch):
    actions = graph("sim", task="stack", cameras="cam_front,cam_wrist")
    nodes = {a.kwargs["exec_name"]: a for a in actions if isinstance(a, Node)}
    assert set(nodes) == OUR_NODES | {"sim_cameras"}
    assert {n: a.kwargs["name"] for n, a in nodes.items() if a.kwargs["name"] != n} == {"sim_cameras": None}
    # the cameras' process: unnamed (a name would remap every camera's), its node given the cameras
    assert nodes["sim_cameras"].kwargs["executable"] == "sim_cameras"
    assert nodes["sim_cameras"].kwargs["parameters"][1] == {"cameras": ["cam_front", "cam_wrist"]}
    nice = f"nice -n {read_params_file(ROOT / 'config' / 'sim.yaml')[LAUNCH_SECTION]['bulk_nice']}"
    bulk = {"sim_cameras", "lerobot_recorder", "rgbd_recorder", "quest_video"}
    assert {n for n, a in nodes.items() if a.kwargs.get("prefix") == nice} == bulk  # still niced
    assert {n: label(a) for n, a in nodes.items()} == {n: n for n in nodes}  # not "nice"
    (headset,) = [a for a in actions if isinstance(a, ExecuteProcess)]
    assert label(headset) == "sim_quest"
    cmd = [str(c) for c in headset.kwargs["cmd"]]
    assert cmd[cmd.index("--video-port") + 1] == "8736"  # where quest_video sends the panels (its default port)
    assert nodes["quest_video"].kwargs["parameters"][1]["cameras"] == ["cam_front", "cam_wrist"]
    assert nodes["lerobot_recorder"].kwargs["parameters"][1]["task"] == "stack"
    assert nodes["rgbd_recorder"].kwargs["parameters"][1]["task"] == "stack"


def _launch_env(mode: str) -> tuple[dict[str, str], set[str]]:
    """The variables a launch file sets, and those it unsets, for every node."""
    spec = importlib.util.spec_from_file_location(f"{mode}_launch", ROOT / "launch" / f"{mode}.launch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (ld,) = mod.generate_launch_description().args
    return (
        dict(a.args for a in ld if isinstance(a, SetEnvironmentVariable)),
        {a.args[0] for a in ld if isinstance(a, UnsetEnvironmentVariable)},
    )


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_launch_keeps_dds_on_loopback_with_frames_in_shared_memory(stub_launch, monkeypatch, mode):
    for var in PROFILE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ROS_LOCALHOST_ONLY", "1")  # a shell's stale setting: unset for the nodes
    env, unset = _launch_env(mode)
    # the one variable this install's Fast DDS reads (both where no ROS library is found: the ROS-free leg)
    profile_vars = set(dds_features().profile_vars)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"  # the profile below restricts transports
    assert unset == {"ROS_LOCALHOST_ONLY"} and set(env) == profile_vars | {"ROS_AUTOMATIC_DISCOVERY_RANGE"}
    (profile,) = {Path(env[var]) for var in profile_vars}
    assert profile.name == "fastdds_loopback.xml" and profile.is_file()
    import xml.etree.ElementTree as ET

    ns = {"d": "http://www.eprosima.com"}
    (shm,) = [
        t
        for t in ET.parse(profile).getroot().iterfind(".//d:transport_descriptor", ns)
        if t.findtext("d:type", namespaces=ns) == "SHM"
    ]
    assert int(shm.findtext("d:segment_size", namespaces=ns)) >= 8 * 1280 * 720 * 3  # frames of history, not < 1


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_launch_keeps_a_users_own_dds_profile(stub_launch, monkeypatch, tmp_path, mode):
    own = tmp_path / "lan.xml"
    own.write_text("<dds/>")
    monkeypatch.setenv(dds_features().profile_vars[0], str(own))
    assert _launch_env(mode) == ({}, set())  # nothing changed: the shell's profile applies to every node


def test_robot_launch_sets_the_realsense_profiles_for_old_and_new_wrappers(stub_launch):
    actions = graph("robot", cameras="cam_front,cam_wrist")
    cams = [a for a in actions if isinstance(a, Node) and a.kwargs["package"] == "realsense2_camera"]
    cfg = read_params_file(ROOT / "config" / "robot.yaml")
    assert [a.kwargs["name"] for a in cams] == ["cam_front", "cam_wrist"]
    for a in cams:
        cam = a.kwargs["name"]
        config_file, extra = a.kwargs["parameters"]
        assert Path(config_file) == ROOT / "config" / "robot.yaml" and a.kwargs["namespace"] == ""
        section = {**cfg[cam], **extra}  # what the node gets: its section, then the launch file's dict
        assert section["rgb_camera.color_profile"] == section["rgb_camera.profile"] == "640x480x30"  # >= 4.55.1
        assert section["depth_module.depth_profile"] == section["depth_module.profile"] == "640x480x30"  # 4.0.1-4.54.1
        assert section["camera_name"] == cam and label(a) == cam
    assert {label(a) for a in actions if isinstance(a, Node)} >= OUR_NODES


def robot_config(tmp_path: Path, **sections: dict) -> Path:
    """config/robot.yaml with each named camera section updated by the given parameters."""
    raw = yaml.safe_load((ROOT / "config" / "robot.yaml").read_text())
    for cam, params in sections.items():
        raw[cam]["ros__parameters"].update(params)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def camera_nodes(actions: list[Action]) -> dict[str, dict]:
    """Camera -> what its realsense2_camera_node gets: its config section, then the launch file's dict."""
    out = {}
    for a in actions:
        if isinstance(a, Node) and a.kwargs["package"] == "realsense2_camera":
            config_file, extra = a.kwargs["parameters"]
            out[a.kwargs["name"]] = {**read_params_file(config_file).get(a.kwargs["name"], {}), **extra}
    return out


def test_robot_launch_sets_the_image_qos_a_recorder_needs_on_every_camera(stub_launch):
    """realsense2_camera's default image QoS, SYSTEM_DEFAULT, is a keep-last 1 writer on Fast DDS: the launch
    names a reliable profile with a history of its own but bounded in memory, for the colour (and so the
    aligned depth) and the depth stream, and keeps camera_info at the driver's DEFAULT.
    """
    pytest.importorskip("rclpy")  # the profiles' contents are rclpy's
    from rclpy.qos import HistoryPolicy, QoSPresetProfiles, ReliabilityPolicy

    from piper_recorder.nodes.plumbing.qos import recorder_image_qos

    nodes = camera_nodes(graph("robot"))
    assert list(nodes) == ["cam_front", "cam_wrist"]
    for cam, params in nodes.items():
        assert params["color_qos"] == params["depth_qos"] == "DEFAULT", cam
        assert params["color_info_qos"] == params["depth_info_qos"] == "DEFAULT", cam
    image = QoSPresetProfiles[nodes["cam_front"]["color_qos"]].value
    # reliable, as the recorders subscribe; a history that keeps a reader's recent frames (not the driver's
    # own keep-last 1) but stays bounded in memory: a crashed reader pins a writer's whole history
    assert image.reliability == ReliabilityPolicy.RELIABLE and image.history == HistoryPolicy.KEEP_LAST
    assert 10 <= image.depth <= recorder_image_qos(30.0).depth


def test_robot_launch_refuses_an_image_qos_the_driver_does_not_know(stub_launch, tmp_path):
    with pytest.raises(
        LaunchError,
        match=r"cam_wrist.color_qos 'BEST_EFFORT': realsense2_camera takes "
        r"one of SYSTEM_DEFAULT, DEFAULT",
    ):
        graph("robot", config=str(robot_config(tmp_path, cam_wrist={"color_qos": "BEST_EFFORT"})))
    nodes = camera_nodes(graph("robot", config=str(robot_config(tmp_path, cam_wrist={"depth_qos": "PARAMETERS"}))))
    assert nodes["cam_wrist"]["depth_qos"] == "PARAMETERS" and nodes["cam_front"]["depth_qos"] == "DEFAULT"


def test_robot_launch_gives_a_d405_its_colour_profile_under_the_depth_module(stub_launch, tmp_path):
    """A D405 (device_type d405) streams colour from its stereo module: realsense2_camera reads that profile
    from depth_module.color_profile and ignores rgb_camera.color_profile there; every other model keeps
    rgb_camera.color_profile (and rgb_camera.profile for the older wrappers).
    """
    nodes = camera_nodes(graph("robot", config=str(robot_config(tmp_path, cam_wrist={"device_type": "d405"}))))
    wrist, front = nodes["cam_wrist"], nodes["cam_front"]
    assert wrist["depth_module.color_profile"] == wrist["depth_module.depth_profile"] == "640x480x30"
    assert wrist["depth_module.profile"] == "640x480x30"  # 4.0.1-4.54.1: one profile per module
    assert not {"rgb_camera.color_profile", "rgb_camera.profile"} & set(wrist)
    assert front["rgb_camera.color_profile"] == front["rgb_camera.profile"] == "640x480x30"
    assert "depth_module.color_profile" not in front
    # a D405's own size reaches the recorders, as an rgb_camera.color_profile of another model does
    cfg = robot_config(tmp_path, cam_wrist={"device_type": "D405", "depth_module.color_profile": "848x480x30"})
    actions = graph("robot", config=str(cfg))
    assert camera_nodes(actions)["cam_wrist"]["depth_module.depth_profile"] == "848x480x30"
    (rec,) = [a for a in actions if isinstance(a, Node) and a.kwargs["name"] == "lerobot_recorder"]
    assert rec.kwargs["parameters"][1]["camera_widths"] == [640, 848]
    with pytest.raises(
        LaunchError,
        match=r"cam_wrist.rgb_camera.color_profile: cam_wrist is a D405 .* "
        r"depth_module.color_profile",
    ):
        graph(
            "robot",
            config=str(
                robot_config(tmp_path, cam_wrist={"device_type": "d405", "rgb_camera.color_profile": "848x480x30"})
            ),
        )


def test_robot_launch_refuses_a_realsense_driver_whose_cameras_would_share_topics(stub_launch, tmp_path):
    """realsense2_camera 4.54.1 and older name topics relative to the node's namespace: both cameras, started in
    the root namespace, would publish /color/image_raw. The launch refuses it, naming the version and the
    fix; 4.55.1 and later (Jazzy's 4.55-4.58) start; without the driver in the index the check is a note.
    """
    xml = install_realsense(stub_launch, tmp_path, "4.54.1")
    with pytest.raises(LaunchError) as err:
        graph("robot")
    msg = str(err.value)
    assert f"realsense2_camera 4.54.1 ({xml})" in msg and "/color/image_raw" in msg
    assert "Install realsense2_camera >= 4.55.1" in msg and "ros-$ROS_DISTRO-realsense2-camera" in msg
    with pytest.raises(LaunchError, match="4.54.1"):  # piper-launch robot: the same graph, refused too
        plan_graph("robot", ROOT / "config" / "robot.yaml", [], tmp_path / "run")
    for version in ("4.55.1", "4.58.0"):
        install_realsense(stub_launch, tmp_path, version)
        actions = graph("robot")
        assert not [a for a in actions if isinstance(a, LogInfo)], version
        assert list(camera_nodes(actions)) == ["cam_front", "cam_wrist"]
    del stub_launch["realsense2_camera"]
    actions = graph("robot")
    (note,) = [a.kwargs["msg"] for a in actions if isinstance(a, LogInfo)]  # once, however many cameras
    assert "realsense2_camera not found through the ament index: its version was not checked" in note
    assert list(camera_nodes(actions)) == ["cam_front", "cam_wrist"]
    plan = plan_graph("robot", ROOT / "config" / "robot.yaml", [], tmp_path / "run")
    assert plan.notes == [note]
    assert not [a for a in graph("sim") if isinstance(a, LogInfo)]  # the sim graph starts no driver


def test_pip_launcher_robot_params_carry_both_profile_names(tmp_path):
    plan = plan_graph("robot", ROOT / "config" / "robot.yaml", [], tmp_path)
    cfg = read_params_file(plan.params_file)
    for cam in cfg[LAUNCH_SECTION]["cameras"]:
        assert cfg[cam]["rgb_camera.profile"] == cfg[cam]["rgb_camera.color_profile"]
        assert cfg[cam]["depth_module.profile"] == cfg[cam]["depth_module.depth_profile"]


def test_pip_launcher_finds_its_scripts_and_config_in_a_colcon_install(tmp_path, monkeypatch):
    """`ros2 run piper_recorder piper-launch sim` in a colcon install: the system Python runs it, the
    package sits in <install>/lib/python3.X/site-packages, the scripts in <install>/lib/piper_recorder
    (setup.cfg), the config in <install>/share/piper_recorder/config; none of them on PATH.
    """
    install = tmp_path / "install" / "piper_recorder"
    site = install / "lib" / "python3.12" / "site-packages"
    (site / "piper_recorder").mkdir(parents=True)
    scripts = install / "lib" / "piper_recorder"
    scripts.mkdir(parents=True)
    for exe in (script for script, _ in NODE_EXECUTABLES.values()):
        (scripts / exe).write_text("#!/usr/bin/python3\n")
        (scripts / exe).chmod(0o755)
    share = install / "share" / "piper_recorder" / "config"
    share.mkdir(parents=True)
    (share / "sim.yaml").write_text((ROOT / "config" / "sim.yaml").read_text())
    system_bin = tmp_path / "usr" / "bin"
    system_bin.mkdir(parents=True)
    monkeypatch.setattr(package_install, "PACKAGE_ROOT", site)  # where the package was imported from
    monkeypatch.setattr(sys, "executable", str(system_bin / "python3"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "usr"))
    monkeypatch.setenv("PATH", str(system_bin))
    config = package_install.config_path("sim")
    assert config == share / "sim.yaml"
    plan = plan_graph("sim", config, [], tmp_path / "run")
    argv0 = {p.name: Path(next(a for a in p.argv if "/" in a)) for p in plan.processes}
    assert argv0["sim_quest"] == scripts / "piper-sim-quest"
    assert argv0["sim_cameras"] == scripts / "piper-sim-cameras"
    assert argv0["lerobot_recorder"] == scripts / "piper-lerobot-recorder"


def test_dashboard_is_an_on_off_launch_argument(stub_launch, tmp_path):
    names = lambda acts: {a.kwargs["name"] for a in acts if isinstance(a, Node)}  # noqa: E731
    assert "dashboard" not in names(graph("sim")) and "dashboard" not in names(graph("robot"))
    for mode in ("sim", "robot"):
        actions = graph(mode, dashboard="true", root="/data/cube", cameras="cam_front")
        (dash,) = [a for a in actions if isinstance(a, Node) and a.kwargs["name"] == "dashboard"]
        assert dash.kwargs["executable"] == "dashboard" and dash.kwargs["exec_name"] == "dashboard"
        params = dash.kwargs["parameters"][1]
        assert params["roots"] == ["/data/cube"]  # the recording root, for the re-alignment view
        # every node it starts, each sim camera by its own name beside the process that runs them
        assert set(params["nodes"]) == OUR_NODES | {"cam_front"} | ({"sim_cameras"} if mode == "sim" else set())
    # piper-launch: the same argument, or piper_launch.dashboard in the config (what --set reaches)
    plan = plan_graph("sim", ROOT / "config" / "sim.yaml", [], tmp_path, dashboard="true")
    assert plan.node_names[-1] == "dashboard" and plan.processes[-1].argv[0].endswith("piper-dashboard")
    assert set(plan.config["dashboard"]["nodes"]) == set(plan.node_names) - {"dashboard"}
    plan = plan_graph("sim", ROOT / "config" / "sim.yaml", ["piper_launch.dashboard=true"], tmp_path)
    assert "dashboard" in plan.node_names
    plan = plan_graph("sim", ROOT / "config" / "sim.yaml", ["piper_launch.dashboard=true"], tmp_path, dashboard="false")
    assert "dashboard" not in plan.node_names


def test_sim_graph_without_the_sim_headset_keeps_the_bridge_on_an_external_one(stub_launch, tmp_path):
    """The sim graph always started piper-sim-quest and overwrote quest_bridge's host/port
    (a --set quest_bridge.port=... was silently replaced by the sim headset's).
    """
    cfg = ROOT / "config" / "sim.yaml"
    ext = ["quest_bridge.host=192.168.1.50", "quest_bridge.port=9911", "quest_video.port=9912"]
    for kw, sets in (({"sim_headset": "false"}, ext), ({}, [*ext, "piper_launch.sim_quest.enabled=false"])):
        plan = plan_graph("sim", cfg, sets, tmp_path, **kw)
        assert "sim_quest" not in [p.name for p in plan.processes]
        eff = read_params_file(plan.params_file)
        assert (eff["quest_bridge"]["host"], eff["quest_bridge"]["port"]) == ("192.168.1.50", 9911)
        assert eff["quest_video"]["port"] == 9912 and "host" not in eff["quest_video"]
        assert {"piper_arm", "teleop", "cam_front", "lerobot_recorder"} <= set(plan.node_names)
    # the launch file: the same launch argument
    names = {a.kwargs["name"] for a in graph("sim", sim_headset="false")}
    assert "sim_quest" not in names and {"quest_bridge", "teleop", "piper_arm"} <= names
    (bridge,) = [a for a in graph("sim", sim_headset="false") if a.kwargs["name"] == "quest_bridge"]
    assert bridge.kwargs["parameters"][1] == {}  # the config's (or the user's) host/port, untouched
    assert "sim_quest" in {a.kwargs["name"] for a in graph("sim")}
    with pytest.raises(LaunchError, match="expected true or false"):
        plan_graph("sim", cfg, [], tmp_path, sim_headset="maybe")


def test_a_set_the_sim_graph_would_overwrite_is_refused_with_the_way_out(tmp_path):
    cfg = ROOT / "config" / "sim.yaml"
    with pytest.raises(LaunchError) as err:
        plan_graph("sim", cfg, ["quest_bridge.port=9911"], tmp_path)
    msg = str(err.value)
    assert "--set quest_bridge.port=9911 conflicts with the simulated headset's port" in msg
    assert "--no-sim-headset" in msg and "piper_launch.sim_quest.enabled=false" in msg
    with pytest.raises(LaunchError, match="quest_video.port=9912 conflicts with the simulated headset's video channel"):
        plan_graph("sim", cfg, ["quest_video.port=9912"], tmp_path)
    # the same value as the simulated headset's is no conflict; moving the headset moves the bridge
    plan = plan_graph("sim", cfg, ["piper_launch.sim_quest.port=9911", "quest_bridge.port=9911"], tmp_path)
    assert read_params_file(plan.params_file)["quest_bridge"]["port"] == 9911
    # a policy run records who acted on its own topic: another actor_topic is refused, not replaced
    with pytest.raises(
        LaunchError, match="lerobot_recorder.actor_topic='/mine' conflicts with the policy node's actor topic"
    ):
        plan_graph("sim", cfg, ["lerobot_recorder.actor_topic=/mine"], tmp_path, policy="hold")
    # robot mode derives no headset: the bridge's --set is the bridge's
    plan = plan_graph("robot", ROOT / "config" / "robot.yaml", ["quest_bridge.port=9911"], tmp_path)
    assert read_params_file(plan.params_file)["quest_bridge"]["port"] == 9911


def test_headset_web_starts_the_page_server_where_the_bridge_and_video_connect(stub_launch, tmp_path):
    """``headset:=web`` (launch files and ``piper-launch --headset web``) starts quest_web, a plain
    process listening where quest_bridge and quest_video connect; no simulated headset; nothing of the
    nodes' parameters changes.
    """
    for mode in ("sim", "robot"):
        actions = graph(mode, headset="web")
        (web,) = [a for a in actions if isinstance(a, ExecuteProcess)]
        assert label(web) == "quest_web"
        cmd = [str(c) for c in web.kwargs["cmd"]]
        assert web.kwargs["cmd"][0].args == ("quest_web", "piper_recorder")  # ExecutableInPackage
        assert cmd[cmd.index("--port") + 1] == "8737" and cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert cmd[cmd.index("--bridge-port") + 1] == "8735" and cmd[cmd.index("--video-port") + 1] == "8736"
        (bridge,) = [a for a in actions if isinstance(a, Node) and a.kwargs["name"] == "quest_bridge"]
        assert "port" not in bridge.kwargs["parameters"][1]
    cfg = ROOT / "config" / "sim.yaml"
    plan = plan_graph(
        "sim",
        cfg,
        ["quest_bridge.port=9911", "quest_video.port=9912", "piper_launch.headset_video=false"],
        tmp_path,
        headset="web",
    )
    (web,) = [p for p in plan.processes if p.name == "quest_web"]
    assert (
        web.argv[web.argv.index("--bridge-port") + 1] == "9911" and web.argv[web.argv.index("--video-port") + 1] == "-1"
    )
    assert "sim_quest" not in [p.name for p in plan.processes]
    assert read_params_file(plan.params_file)["quest_bridge"]["port"] == 9911
    assert "sim_quest" in [p.name for p in plan_graph("sim", cfg, [], tmp_path, headset="sim").processes]
    assert not {"sim_quest", "quest_web"} & {
        p.name for p in plan_graph("sim", cfg, [], tmp_path, headset="native").processes
    }
    with pytest.raises(LaunchError, match="needs the sim graph"):
        plan_graph("robot", ROOT / "config" / "robot.yaml", [], tmp_path, headset="sim")
    with pytest.raises(LaunchError, match="native | web | sim"):
        plan_graph("sim", cfg, [], tmp_path, headset="apk")
    with pytest.raises(LaunchError, match="contradict"):
        plan_graph("sim", cfg, [], tmp_path, headset="web", sim_headset="true")


def test_contradictory_launch_settings_are_refused_naming_both(stub_launch, tmp_path):
    """The simulated headset asked for and turned off, a headset asked for in a SpaceMouse graph, the page on
    the port its relay binds for quest_bridge: each refused while planning, naming both settings, through
    piper-launch's plan and the launch files' arguments alike; nothing is planned (no parameter file).
    """
    cfg = ROOT / "config" / "sim.yaml"
    refused = [  # (mode, sets, plan_graph's launch arguments, what the message says)
        (
            "sim",
            [],
            {"sim_headset": "false", "headset": "sim"},
            "--headset sim (headset:=sim) and --no-sim-headset (sim_headset:=false) contradict",
        ),
        (
            "sim",
            ["piper_launch.sim_quest.enabled=false"],
            {"headset": "sim"},
            "--headset sim (headset:=sim) and piper_launch.sim_quest.enabled=false contradict",
        ),
        (
            "sim",
            [],
            {"teleop_input": "spacemouse", "headset": "web"},
            "--headset web (headset:=web) contradicts teleop input spacemouse",
        ),
        (
            "robot",
            [],
            {"teleop_input": "spacemouse", "headset": "native"},
            "--headset native (headset:=native) contradicts teleop input spacemouse",
        ),
        ("sim", ["teleop.input=spacemouse"], {"headset": "sim"}, "contradicts teleop input spacemouse"),
        (
            "sim",
            [],
            {"teleop_input": "spacemouse", "sim_headset": "true"},
            "sim_headset:=true contradicts teleop input spacemouse",
        ),
        ("robot", [], {"sim_headset": "true"}, "sim_headset:=true needs the sim graph"),
        (
            "sim",
            ["piper_launch.quest_web.port=8735"],
            {"headset": "web"},
            "piper_launch.quest_web.port=8735 and quest_bridge.port=8735",
        ),
        (
            "robot",
            ["piper_launch.quest_web.port=8736"],
            {"headset": "web"},
            "piper_launch.quest_web.port=8736 and quest_video.port=8736",
        ),
        ("sim", ["quest_video.port=8735"], {"headset": "web"}, "quest_bridge.port=8735 and quest_video.port=8735"),
        (
            "sim",
            [
                "piper_launch.quest_web.host=0.0.0.0",
                "piper_launch.quest_web.insecure_http=true",
                "piper_launch.quest_web.port=8735",
            ],
            {"headset": "web"},
            "piper_launch.quest_web.port=8735 and quest_bridge.port=8735",
        ),
        (
            "robot",
            ["piper_launch.quest_web.host=0.0.0.0"],
            {"headset": "web"},
            "piper_launch.quest_web.host='0.0.0.0' is not a loopback address: set piper_launch.quest_web.cert",
        ),
    ]
    for mode, sets, kw, needle in refused:
        run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        with pytest.raises(LaunchError) as err:
            plan_graph(mode, ROOT / "config" / f"{mode}.yaml", sets, run_dir, **kw)
        assert needle in str(err.value), (mode, sets, kw, str(err.value))
        assert not run_dir.exists()
    # the launch files: the same arguments, the same refusals
    with pytest.raises(LaunchError, match=r"and --no-sim-headset \(sim_headset:=false\) contradict"):
        graph("sim", sim_headset="false", headset="sim")
    for mode in ("sim", "robot"):
        with pytest.raises(LaunchError, match="contradicts teleop input spacemouse"):
            graph(mode, teleop_input="spacemouse", headset="web")
    clashing = tmp_path / "clash.yaml"
    clashing.write_text(
        cfg.read_text().replace(
            "piper_launch:\n  ros__parameters:\n", "piper_launch:\n  ros__parameters:\n    quest_web: {port: 8735}\n"
        )
    )
    with pytest.raises(LaunchError, match="piper_launch.quest_web.port=8735 and quest_bridge.port=8735"):
        graph("sim", headset="web", config=str(clashing))
    # settings that agree still plan: no headset in a SpaceMouse graph, the page on a free port, the page on
    # another address than the bridge's
    assert (
        "sim_quest"
        not in plan_graph("sim", cfg, [], tmp_path / "ok1", teleop_input="spacemouse", sim_headset="false").node_names
    )
    plan = plan_graph("sim", cfg, ["piper_launch.quest_web.port=0"], tmp_path / "ok2", headset="web")
    assert "quest_web" in [p.name for p in plan.processes]
    plan_graph(
        "sim",
        cfg,
        ["piper_launch.quest_web.host=127.0.0.2", "piper_launch.quest_web.port=8735"],
        tmp_path / "ok3",
        headset="web",
    )
    plan = plan_graph(
        "robot",
        ROOT / "config" / "robot.yaml",
        ["piper_launch.quest_web.host=0.0.0.0", "piper_launch.quest_web.insecure_http=true"],
        tmp_path / "ok4",
        headset="web",
    )
    (web,) = [p for p in plan.processes if p.name == "quest_web"]
    assert web.argv[web.argv.index("--host") + 1] == "0.0.0.0" and "--insecure-http" in web.argv
    # piper-quest-web itself refuses the same clash when started by hand
    from piper_recorder.quest.web_server import WebConfig

    with pytest.raises(ValueError, match="port and bridge_port are both 8735"):
        WebConfig(port=8735).validate()
    with pytest.raises(ValueError, match="bridge_port and video_port are both 9000"):
        WebConfig(bridge_port=9000, video_port=9000).validate()
    WebConfig(bridge_port=9000, video_port=-1, port=9000, host="127.0.0.2").validate()

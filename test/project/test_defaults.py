"""One default per setting: the layers that carry a setting agree on its default (node
config classes, which the nodes declare as parameters; the cores they build; the bag converter, which
loads the recorder classes without --config; command-line defaults), and the shipped parameter files
set only what differs from the defaults.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.graph.arguments import launch_overrides
from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.headset import QuestWebSettings, SimQuestSettings
from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.params.derived import LAUNCH_SECTION, SERIAL_KEYS, derived_params, effective_params
from piper_recorder.params.params_file import read_params_file
from piper_recorder.recording.config import (
    RECORDER_CONFIGS,
    LeRobotRecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    load_config,
    rgbd_writer_config,
)

from support.node_configs import config_classes
from support.paths import ROOT

TIMING = ("timestamp_mode", "lateness_s")
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))


def _default(cls, name):
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize("fmt", sorted(RECORDER_CONFIGS))
def test_timing_defaults_agree_between_layers(fmt):
    cls = RECORDER_CONFIGS[fmt]
    assembler = {k: _default(AssemblyConfig, k) for k in TIMING}
    assert assembler["timestamp_mode"] == "nominal"  # the mode every loader accepts
    assert {k: _default(cls, k) for k in TIMING} == assembler  # recorder class = node parameters
    assert {k: getattr(cls().assembly(), k) for k in TIMING} == assembler
    converter = load_config(cls, None)  # piper-bag2dataset without --config
    assert {k: getattr(converter, k) for k in TIMING} == assembler


@pytest.mark.parametrize("fmt", sorted(RECORDER_CONFIGS))
def test_recorder_defaults_build_the_cores_defaults(fmt):
    """A recorder with no parameters assembles, encodes and writes with the cores' own defaults."""
    cfg = RECORDER_CONFIGS[fmt]()
    assert cfg.assembly(cameras=AssemblyConfig().cameras) == AssemblyConfig()
    if fmt == "lerobot":
        from piper_recorder.lerobot.writer import CameraSpec, VideoConfig, WriterConfig

        live = lerobot_writer_config(cfg)
        assert dataclasses.replace(live, cameras={}) == WriterConfig()
        assert live.video == VideoConfig()  # incl. the encoder wait (max_block_s)
        assert live.cameras == {cam: CameraSpec() for cam in AssemblyConfig().cameras}
    else:
        from rgbd_writer import RgbdConfig

        core = _fields(rgbd_writer_config(cfg))
        skip = {"rgb_source", "depth_source", "env_args"}  # filled from the topics
        assert {k: v for k, v in core.items() if k not in skip} == {
            k: v for k, v in _fields(RgbdConfig()).items() if k not in skip
        }


def test_node_configs_build_their_cores_defaults():
    pytest.importorskip("rclpy")  # the config classes live beside the nodes
    from piper_recorder.nodes.quest_bridge import QuestBridgeConfig
    from piper_recorder.nodes.teleop import TeleopNodeConfig
    from piper_recorder.quest.client import ClientConfig
    from piper_recorder.quest.clock import ClockMapperConfig
    from piper_recorder.teleop.recorder_calls import RecorderCallConfig

    assert QuestBridgeConfig().client() == ClientConfig()
    assert QuestBridgeConfig().clock() == ClockMapperConfig()
    assert TeleopNodeConfig().calls() == RecorderCallConfig()
    assert TeleopNodeConfig().recorders == [c.node_name for c in RECORDER_CONFIGS.values()]


def test_command_line_defaults_are_the_config_defaults():
    """piper-sim-quest's options default to its SimConfig; the sim graph's headset to the same, except
    that the graph drives episodes through the recorders' services (no A/B presses).
    """
    from piper_recorder.quest.sim_server import SimConfig, _parser

    args = _parser().parse_args([])
    cli = {
        "host": args.host,
        "port": args.port,
        "rate": args.rate,
        "script": args.script,
        "replay": args.replay,
        "buttons": not args.no_buttons,
        "seed": args.seed,
        "delay_ms": args.delay_ms,
        "jitter_ms": args.jitter_ms,
        "mono_offset_s": args.mono_offset,
        "stall_after_s": args.stall_after,
        "stall_s": args.stall_for,
        "stall_burst": args.stall_burst,
        "lag_after_s": args.lag_after,
        "lag_rate": args.lag_rate,
        "lag_max_s": args.lag_max,
    }
    sim = _fields(SimConfig())
    assert cli == {k: sim[k] for k in cli}
    graph = _fields(SimQuestSettings())
    # the graph's headset: services, quest_video's channel, no report; enabled: whether the graph starts it at all
    own = {"buttons", "video_port", "report", "enabled"}
    assert {k: v for k, v in graph.items() if k not in own} == {k: sim[k] for k in graph if k not in own}
    assert graph["buttons"] is False and graph["report"] == "" and sim["video_port"] == -1 and graph["enabled"] is True
    assert args.video_port == sim["video_port"]
    from piper_recorder.quest.video import VIDEO_PORT, SenderConfig

    assert graph["video_port"] == VIDEO_PORT == SenderConfig().port


def _node_defaults(node: str, cameras: list[str]) -> dict:
    """Parameter name -> default for every parameter ``node`` declares."""
    out = {}
    for cls, prefix in config_classes("sim_camera" if node in cameras else node):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value = _default(cls, f.name)
            out[prefix + f.name] = float(value) if hints[f.name] is float and value is not None else value
    return out


def test_headset_settings_take_their_section_and_refuse_unknown_keys():
    cfg = {LAUNCH_SECTION: {"sim_quest": {"script": "circle"}, "quest_web": {"allowed_hosts": ["robot.lan"]}}}
    assert SimQuestSettings.from_config(cfg).script == "circle"
    assert QuestWebSettings.from_config(cfg).allowed_hosts == ("robot.lan",)
    assert QuestWebSettings.from_config({}) == QuestWebSettings()
    for name, settings in (("sim_quest", SimQuestSettings), ("quest_web", QuestWebSettings)):
        with pytest.raises(LaunchError, match=rf"{LAUNCH_SECTION}\.{name}: unknown settings \['prot'\]"):
            settings.from_config({LAUNCH_SECTION: {name: {"prot": 1}}})


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_shipped_configs_set_only_what_differs_from_the_defaults(name):
    pytest.importorskip("rclpy")
    cfg = read_params_file(config_path(name))
    cameras = cfg[LAUNCH_SECTION]["cameras"]
    repeated = []
    for node, params in cfg.items():
        if node == LAUNCH_SECTION or (name == "robot" and node in cameras):  # realsense2_camera's own
            continue
        defaults = _node_defaults(node, cameras)
        for key, value in params.items():
            if key in defaults and value == defaults[key] and type(value) is type(defaults[key]):
                repeated.append(f"{node}.{key}: {value!r}")
    quest = cfg[LAUNCH_SECTION].get("sim_quest", {})
    repeated += [
        f"{LAUNCH_SECTION}.sim_quest.{k}: {v!r}" for k, v in quest.items() if v == getattr(SimQuestSettings(), k)
    ]
    assert not repeated, f"config/{name}.yaml repeats code defaults (remove them): {repeated}"


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_shipped_configs_do_not_repeat_timing_defaults(name):
    doc = read_params_file(config_path(name))
    for _fmt, cls in RECORDER_CONFIGS.items():
        params = doc.get(cls.node_name) or {}
        for key in TIMING:
            if key in params:
                assert params[key] != _default(cls, key), (
                    f"config/{name}.yaml: {cls.node_name}.{key} repeats the default {params[key]!r}; remove it"
                )


def test_rotation_types_are_defined_once():
    """The writer writes, the recorder accepts and the validator knows the same quaternion names."""
    from piper_recorder.lerobot import validate
    from piper_recorder.lerobot.format import layout
    from piper_recorder.lerobot.maintenance import action_stats
    from piper_recorder.lerobot.writer import config as writer_config

    assert layout.ROTATION_TYPES == ("quat_wxyz", "quaternion")
    assert writer_config.ROTATION_TYPES is layout.ROTATION_TYPES
    assert set(layout.ROTATION_TYPES) <= validate.GR00T_ROTATION_TYPES
    assert not hasattr(action_stats, "QUAT_ROTATION_TYPES") and not hasattr(validate, "QUAT_ROTATIONS")
    for rot in layout.ROTATION_TYPES:
        LeRobotRecorderConfig(rotation_type=rot).validate()
    with pytest.raises(ValueError, match="rotation_type"):
        LeRobotRecorderConfig(rotation_type="axis_angle").validate()
    assert RgbdRecorderConfig().camera in LeRobotRecorderConfig().cameras


# ---- each camera stated once ------------------------------------------------------------
def _values(params: dict, prefix: str = ""):
    """(dotted key, scalar) for every value of a section, nested mappings and lists included."""
    for key, value in params.items():
        if isinstance(value, dict):
            yield from _values(value, f"{prefix}{key}.")
        else:
            for v in value if isinstance(value, list) else [value]:
                yield f"{prefix}{key}", v


def camera_statements(doc: dict) -> dict[str, list[str]]:
    """Where (``node.key``) a parameter file states each camera's name and each serial: in any section,
    as a whole value or inside one (a topic ``/cam_front/...``), and every value of a key that names a
    serial. A section's key (the camera's own node) is no statement of the name.
    """
    cameras = [str(c) for c in doc.get(LAUNCH_SECTION, {}).get("cameras") or []]
    serials = {
        str(v)
        for node, params in doc.items()
        for k, v in _values(params)
        if "serial" in k.rpartition(".")[2] and v not in (None, "")
    }
    words = {w: re.compile(rf"(?<![\w-]){re.escape(w)}(?![\w-])") for w in (*cameras, *serials)}
    places: dict[str, list[str]] = {w: [] for w in words}
    for node, params in doc.items():
        for key, value in _values(params):
            places.update({w: places[w] + [f"{node}.{key}"] for w, rx in words.items() if rx.search(str(value))})
    return places


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_configs_state_each_camera_name_and_serial_once(path):
    """A camera's name is in piper_launch.cameras and nowhere else, its serial in its own section and
    nowhere else: the recorders, quest_video and the bag converter derive theirs (params.derived).
    """
    doc = read_params_file(path)
    cameras = doc[LAUNCH_SECTION]["cameras"]
    assert cameras and len(set(cameras)) == len(cameras)
    places = camera_statements(doc)
    expected = {cam: [f"{LAUNCH_SECTION}.cameras"] for cam in cameras}
    for cam in cameras:
        (key,) = [k for k in SERIAL_KEYS if k in doc[cam]]  # every camera has a serial, in its own section
        expected[str(doc[cam][key])] = [f"{cam}.{key}"]
    assert places == expected, (
        f"{path.name} restates a camera: state its name once in {LAUNCH_SECTION}.cameras, "
        "its serial once in its own section"
    )


def test_the_restatement_check_finds_the_old_layout():
    """The layout before 23.1 (each node's own camera list and serials, realsense's camera_name) fails it."""
    doc = {
        LAUNCH_SECTION: {"cameras": ["cam_front", "cam_wrist"]},
        "cam_front": {"serial_no": "000000000001", "camera_name": "cam_front"},
        "cam_wrist": {"serial_no": "0002"},
        "lerobot_recorder": {"cameras": ["cam_front", "cam_wrist"], "camera_serials": ["000000000001", "0002"]},
        "rgbd_recorder": {"camera": "cam_front", "camera_serials": ["000000000001"]},
        "quest_video": {"image_topic_pattern": "/cam_wrist/{cam}"},
    }
    places = camera_statements(doc)
    assert places["cam_front"] == [
        "piper_launch.cameras",
        "cam_front.camera_name",
        "lerobot_recorder.cameras",
        "rgbd_recorder.camera",
    ]
    assert places["cam_wrist"] == [
        "piper_launch.cameras",
        "lerobot_recorder.cameras",
        "quest_video.image_topic_pattern",
    ]
    assert places["000000000001"] == [
        "cam_front.serial_no",
        "lerobot_recorder.camera_serials",
        "rgbd_recorder.camera_serials",
    ]
    assert places["0002"] == ["cam_wrist.serial_no", "lerobot_recorder.camera_serials"]


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_the_launchers_and_the_converter_derive_the_same_cameras(mode, tmp_path):
    """One derivation (params.derived.derived_params): the launch files' node parameters, piper-launch's
    effective file and the converter's load_config give each node the same cameras and serials.
    """
    doc = read_params_file(config_path(mode))
    cameras = doc[LAUNCH_SECTION]["cameras"]
    serials = [str(doc[c].get("serial", doc[c].get("serial_no"))) for c in cameras]
    _, launch = launch_overrides(doc)
    plan = read_params_file(plan_graph(mode, config_path(mode), [], tmp_path).params_file)
    for cls in RECORDER_CONFIGS.values():
        converter = load_config(cls, config_path(mode))
        node = cls.node_name
        assert converter.camera_list() == (cameras if node == "lerobot_recorder" else cameras[:1])
        assert converter.camera_serials == serials[: len(converter.camera_list())]
        for key, value in derived_params(doc)[node].items():
            assert launch[node][key] == plan[node][key] == getattr(converter, key) == value, (node, key)
    assert launch["quest_video"]["cameras"] == plan["quest_video"]["cameras"] == cameras[:3]


def _sim(tmp_path, **sections) -> Path:
    raw = yaml.safe_load(config_path("sim").read_text())
    for node, params in sections.items():
        raw.setdefault(node, {"ros__parameters": {}})["ros__parameters"].update(params)
    path = tmp_path / f"params{len(list(tmp_path.glob('params*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_file_of_the_old_layout_loads_when_it_agrees_and_is_refused_when_it_contradicts(tmp_path):
    old = {
        "lerobot_recorder": {
            "cameras": ["cam_front", "cam_wrist"],
            "camera_serials": ["sim-front-0001", "sim-wrist-0002"],
        },
        "rgbd_recorder": {"camera": "cam_wrist", "camera_serials": ["sim-wrist-0002"]},
    }
    path = _sim(tmp_path, **old)
    assert load_config(LeRobotRecorderConfig, path) == load_config(LeRobotRecorderConfig, config_path("sim"))
    rgbd = load_config(RgbdRecorderConfig, path)  # a node's own choice among the cameras stands
    assert (rgbd.camera, rgbd.camera_serials) == ("cam_wrist", ["sim-wrist-0002"])
    sub = load_config(LeRobotRecorderConfig, _sim(tmp_path, lerobot_recorder={"cameras": ["cam_wrist"]}))
    assert (sub.cameras, sub.camera_serials) == (["cam_wrist"], ["sim-wrist-0002"])
    # the launch argument's subset of an old file: its lists restricted to the cameras started
    plan = read_params_file(plan_graph("sim", path, [], tmp_path, cameras="cam_front").params_file)
    assert (plan["lerobot_recorder"]["cameras"], plan["lerobot_recorder"]["camera_serials"]) == (
        ["cam_front"],
        ["sim-front-0001"],
    )
    assert (plan["rgbd_recorder"]["camera"], plan["rgbd_recorder"]["camera_serials"]) == (
        "cam_front",
        ["sim-front-0001"],
    )
    assert launch_overrides(read_params_file(path), cameras="cam_front")[1]["lerobot_recorder"]["cameras"] == [
        "cam_front"
    ]
    # a contradiction names both places, from the converter and the launchers alike
    wrong = _sim(tmp_path, lerobot_recorder={"camera_serials": ["sim-front-0001", "other"]})
    with pytest.raises(
        ValueError,
        match=r"params\d.yaml: lerobot_recorder.camera_serials says cam_wrist is 'other', "
        r"cam_wrist.serial says 'sim-wrist-0002'",
    ):
        load_config(LeRobotRecorderConfig, wrong)
    with pytest.raises(LaunchError, match="cam_wrist.serial says"):
        plan_graph("sim", wrong, [], tmp_path)
    stray = _sim(tmp_path, rgbd_recorder={"camera": "cam_top"})
    with pytest.raises(ValueError, match=r"rgbd_recorder.camera names \['cam_top'\], which piper_launch.cameras"):
        load_config(RgbdRecorderConfig, stray)
    # a file without piper_launch.cameras (a recorder's section alone) keeps its own values
    alone = tmp_path / "alone.yaml"
    alone.write_text(
        yaml.safe_dump({"lerobot_recorder": {"ros__parameters": {"cameras": ["top"], "camera_serials": ["s"]}}})
    )
    assert (
        load_config(LeRobotRecorderConfig, alone).cameras,
        load_config(LeRobotRecorderConfig, alone).camera_serials,
    ) == (["top"], ["s"])


def test_the_cameras_sizes_and_serials_reach_the_recorders(tmp_path):
    """A camera's size and serial are stated in its section only; the launch argument's subset and a
    --set of a camera reach the recorders (piper-launch derives after the sets).
    """
    plan = plan_graph("sim", config_path("sim"), ["cam_front.width=320", "cam_wrist.serial=w-9"], tmp_path)
    eff = read_params_file(plan.params_file)
    assert (eff["lerobot_recorder"]["camera_widths"], eff["lerobot_recorder"]["camera_heights"]) == (
        [320, 640],
        [480, 480],
    )
    assert eff["lerobot_recorder"]["camera_serials"] == ["sim-front-0001", "w-9"]
    assert eff["rgbd_recorder"]["camera_width"] == 320 and "camera_height" not in eff["rgbd_recorder"]
    with pytest.raises(LaunchError, match="state a serial once"):
        plan_graph("sim", config_path("sim"), ["lerobot_recorder.camera_serials=[a, b]"], tmp_path)
    _, wrist = launch_overrides(read_params_file(config_path("sim")), cameras="cam_wrist")
    assert wrist["lerobot_recorder"] == {"cameras": ["cam_wrist"], "camera_serials": ["sim-wrist-0002"]}
    assert wrist["rgbd_recorder"] == {"camera": "cam_wrist", "camera_serials": ["sim-wrist-0002"]}
    robot = read_params_file(config_path("robot"))
    robot["cam_wrist"]["rgb_camera.color_profile"] = "848x480x30"
    derived = effective_params(robot)
    assert derived["lerobot_recorder"]["camera_widths"] == [640, 848]
    assert "camera_width" not in derived["rgbd_recorder"]  # cam_front: the default profile

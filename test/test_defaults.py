"""One default per setting (issue 12.1): the layers that carry a setting agree on its default (node
config classes, which the nodes declare as parameters; the cores they build; the bag converter, which
loads the recorder classes without --config; command-line defaults), and the shipped parameter files
set only what differs from the defaults."""
from __future__ import annotations

import dataclasses
import typing

import pytest

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.launcher import LAUNCH_SECTION, SimQuestSettings, config_path
from piper_recorder.params_file import read_params_file
from piper_recorder.recording.config import (RECORDER_CONFIGS, LeRobotRecorderConfig, RgbdRecorderConfig,
                                             lerobot_writer_config, load_config, rgbd_writer_config)
from test_launch_files import _config_classes

TIMING = ("timestamp_mode", "lateness_s")
# Written out although they equal the default: they must match piper_launch.cameras next to them
# (test_launch_files.test_config_keys_are_declared_parameters checks that they do).
CROSS_NODE = {("lerobot_recorder", "cameras"), ("rgbd_recorder", "camera")}


def _default(cls, name):
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize("fmt", sorted(RECORDER_CONFIGS))
def test_timing_defaults_agree_between_layers(fmt):
    cls = RECORDER_CONFIGS[fmt]
    assembler = {k: _default(AssemblyConfig, k) for k in TIMING}
    assert assembler["timestamp_mode"] == "nominal"                    # the mode every loader accepts
    assert {k: _default(cls, k) for k in TIMING} == assembler           # recorder class = node parameters
    assert {k: getattr(cls().assembly(), k) for k in TIMING} == assembler
    converter = load_config(cls, None)                                   # piper-bag2dataset without --config
    assert {k: getattr(converter, k) for k in TIMING} == assembler


@pytest.mark.parametrize("fmt", sorted(RECORDER_CONFIGS))
def test_recorder_defaults_build_the_cores_defaults(fmt):
    """A recorder with no parameters assembles, encodes and writes with the cores' own defaults."""
    cfg = RECORDER_CONFIGS[fmt]()
    assert cfg.assembly(cameras=AssemblyConfig().cameras) == AssemblyConfig()
    if fmt == "lerobot":
        from piper_recorder.lerobot.writer.dataset_writer import CameraSpec, VideoConfig, WriterConfig

        live = lerobot_writer_config(cfg)
        assert dataclasses.replace(live, cameras={}) == WriterConfig()
        assert live.video == VideoConfig()                        # incl. the encoder wait (max_block_s)
        assert live.cameras == {cam: CameraSpec() for cam in AssemblyConfig().cameras}
    else:
        from rgbd_writer.writer import RgbdConfig

        core = _fields(rgbd_writer_config(cfg))
        skip = {"rgb_source", "depth_source", "env_args"}                # filled from the topics
        assert {k: v for k, v in core.items() if k not in skip} == \
            {k: v for k, v in _fields(RgbdConfig()).items() if k not in skip}


def test_node_configs_build_their_cores_defaults():
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
    that the graph drives episodes through the recorders' services (no A/B presses)."""
    from piper_recorder.quest.sim_server import SimConfig, _parser

    args = _parser().parse_args([])
    cli = {"host": args.host, "port": args.port, "rate": args.rate, "script": args.script,
           "replay": args.replay, "buttons": not args.no_buttons, "seed": args.seed,
           "delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms,
           "mono_offset_s": args.mono_offset, "stall_after_s": args.stall_after, "stall_s": args.stall_for,
           "stall_burst": args.stall_burst, "lag_after_s": args.lag_after, "lag_rate": args.lag_rate,
           "lag_max_s": args.lag_max}
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
    for cls, prefix in _config_classes("sim_camera" if node in cameras else node):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value = _default(cls, f.name)
            out[prefix + f.name] = float(value) if hints[f.name] is float and value is not None else value
    return out


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_shipped_configs_set_only_what_differs_from_the_defaults(name):
    pytest.importorskip("rclpy")
    cfg = read_params_file(config_path(name))
    cameras = cfg[LAUNCH_SECTION]["cameras"]
    repeated = []
    for node, params in cfg.items():
        if node == LAUNCH_SECTION or (name == "robot" and node in cameras):   # realsense2_camera's own
            continue
        defaults = _node_defaults(node, cameras)
        for key, value in params.items():
            if (node, key) not in CROSS_NODE and key in defaults and value == defaults[key] \
                    and type(value) is type(defaults[key]):
                repeated.append(f"{node}.{key}: {value!r}")
    quest = cfg[LAUNCH_SECTION].get("sim_quest", {})
    repeated += [f"{LAUNCH_SECTION}.sim_quest.{k}: {v!r}" for k, v in quest.items()
                 if v == getattr(SimQuestSettings(), k)]
    assert not repeated, f"config/{name}.yaml repeats code defaults (remove them): {repeated}"


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_shipped_configs_do_not_repeat_timing_defaults(name):
    doc = read_params_file(config_path(name))
    for _fmt, cls in RECORDER_CONFIGS.items():
        params = doc.get(cls.node_name) or {}
        for key in TIMING:
            if key in params:
                assert params[key] != _default(cls, key), \
                    f"config/{name}.yaml: {cls.node_name}.{key} repeats the default {params[key]!r}; remove it"


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

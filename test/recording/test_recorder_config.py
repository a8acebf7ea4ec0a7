"""The recorders' config classes, writer settings and session record (piper_recorder.recording.config).

One definition serves the recorder nodes (declared as ROS parameters) and the rosbag converter (loaded
from the same parameter file), so these tests check the shared module itself and that both paths
read a parameter file the same way.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from piper_recorder.graph.arguments import launch_overrides
from piper_recorder.graph.install import config_path
from piper_recorder.lerobot.format.provenance import BINDING_KEYS, lookup
from piper_recorder.params.derived import effective_params
from piper_recorder.params.params_file import read_params_file
from piper_recorder.recording.config import (
    RECORDER_CONFIGS,
    CameraTopics,
    LeRobotRecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    load_config,
    rgbd_writer_config,
    session_record,
)

PROVENANCE = {
    "backend": "impedance",
    "kp": 10.0,
    "kd": 0.8,
    "t_ff": 0.0,
    "gravity_ff": True,
    "firmware": "S-V1.6-3",
    "arm_model": "piper",
    "can_channel": "can0",
    "sdk_version": "0.2.19",
}


def params(tmp_path, node: str, **values):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({node: {"ros__parameters": values}}))
    return p


@pytest.mark.parametrize("mode", ["sim", "robot"])
@pytest.mark.parametrize("fmt", ["lerobot", "rgbd"])
def test_packaged_config_sections_load_into_the_recorder_classes(mode, fmt):
    cls = RECORDER_CONFIGS[fmt]
    # the node's section with what it derives from the file's cameras (its lists, the serials)
    section = effective_params(read_params_file(config_path(mode)))[cls.node_name]
    assert "camera_serials" in section and ("cameras" if fmt == "lerobot" else "camera") in section
    cfg = load_config(cls, config_path(mode))
    assert type(cfg) is cls and section
    for key, value in section.items():
        assert getattr(cfg, key) == value and type(getattr(cfg, key)) is type(dataclasses.asdict(cls())[key]), key
    untouched = {f.name for f in dataclasses.fields(cls)} - set(section)
    assert all(getattr(cfg, k) == getattr(cls(), k) for k in untouched)


def test_packaged_values_that_matter():
    assert load_config(LeRobotRecorderConfig, config_path("robot")).on_binding_change == "refuse"
    sim = load_config(LeRobotRecorderConfig, config_path("sim"))
    assert sim.timestamp_mode == "nominal" and sim.camera_serials == ["sim-front-0001", "sim-wrist-0002"]
    assert load_config(RgbdRecorderConfig, config_path("sim")).path == "demo_output/rgbd.hdf5"


def test_no_file_gives_the_defaults_and_wildcard_section_applies(tmp_path):
    assert load_config(RgbdRecorderConfig) == RgbdRecorderConfig()
    p = tmp_path / "p.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "/**": {"ros__parameters": {"fps": 15, "task": "all"}},
                "lerobot_recorder": {"ros__parameters": {"task": "mine"}},
            }
        )
    )
    cfg = load_config(LeRobotRecorderConfig, p)
    assert (cfg.fps, cfg.task) == (15.0, "mine") and isinstance(cfg.fps, float)
    assert load_config(RgbdRecorderConfig, p).task == "all"


def test_unknown_parameters_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"lerobot_recorder: unknown parameters \['fsp'\]"):
        load_config(LeRobotRecorderConfig, params(tmp_path, "lerobot_recorder", fsp=30))


@pytest.mark.parametrize(
    "key, value",
    [
        ("fps", "thirty"),
        ("save_raw_quest", 1),
        ("crf", 23.0),
        ("camera_serials", [1, 2]),
        ("cameras", "cam_front"),
        ("task", 3),
    ],
)
def test_wrong_types_are_refused_naming_the_parameter(tmp_path, key, value):
    with pytest.raises(ValueError, match=rf"parameter '{key}': expected"):
        load_config(LeRobotRecorderConfig, params(tmp_path, "lerobot_recorder", **{key: value}))


@pytest.mark.parametrize(
    "cls, values, needle",
    [
        (LeRobotRecorderConfig, {"timestamp_mode": "sometimes"}, "timestamp_mode"),
        (LeRobotRecorderConfig, {"fps": 29.97}, "fps"),
        (LeRobotRecorderConfig, {"fps": 0.0}, "fps"),
        (LeRobotRecorderConfig, {"on_shutdown": "explode"}, "on_shutdown"),
        (LeRobotRecorderConfig, {"image_reliability": "sometimes"}, "image_reliability"),
        (LeRobotRecorderConfig, {"max_episode_s": -1.0}, "max_episode_s"),
        (LeRobotRecorderConfig, {"camera_serials": ["only-one"]}, "camera_serials"),
        (LeRobotRecorderConfig, {"camera_heights": [480]}, "camera_heights"),
        (LeRobotRecorderConfig, {"image_topic_pattern": "/color"}, "image_topic_pattern"),
        (LeRobotRecorderConfig, {"root": ""}, "root"),
        (LeRobotRecorderConfig, {"on_binding_change": "ignore"}, "on_binding_change"),
        (LeRobotRecorderConfig, {"rotation_type": "euler"}, "rotation_type"),
        (LeRobotRecorderConfig, {"lerobot_version": "v3.0"}, "lerobot_version"),
        (LeRobotRecorderConfig, {"crf": 60}, "crf"),
        (LeRobotRecorderConfig, {"encoder_max_block_s": -1.0}, "encoder_max_block_s"),
        (LeRobotRecorderConfig, {"cameras": ["cam_front", "cam_front"]}, "duplicate camera"),
        (RgbdRecorderConfig, {"path": "out.txt"}, "path"),
        (RgbdRecorderConfig, {"camera": ""}, "camera"),
        (RgbdRecorderConfig, {"depth_topic_pattern": "/depth"}, "depth_topic_pattern"),
    ],
)
def test_validate_errors_name_the_parameter(tmp_path, cls, values, needle):
    with pytest.raises(ValueError, match=needle):
        cls(**values).validate()
    with pytest.raises(ValueError, match=rf"params.yaml: {cls.node_name}: .*{needle}"):
        load_config(cls, params(tmp_path, cls.node_name, **values))


def test_nodes_declare_the_shared_classes_and_read_a_file_as_load_config(ros_domain):
    """declare_config on a real node started as the launchers start it (config/sim.yaml, then the
    parameters launch_overrides derives: a launch file's ``parameters=[config, derived]``) gives what the
    converter loads from the file.
    """
    rclpy = pytest.importorskip("rclpy")
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from piper_recorder.nodes.lerobot_recorder import LeRobotRecorder
    from piper_recorder.nodes.plumbing.parameters import declare_config
    from piper_recorder.nodes.rgbd_recorder import RgbdRecorder

    assert LeRobotRecorder.config_class is LeRobotRecorderConfig and RgbdRecorder.config_class is RgbdRecorderConfig
    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    _cameras, derived = launch_overrides(read_params_file(config_path("sim")))
    try:
        for cls in (LeRobotRecorderConfig, RgbdRecorderConfig):
            assert derived[cls.node_name]["camera_serials"]
            node = Node(
                cls.node_name,
                context=ctx,
                cli_args=["--ros-args", "--params-file", str(config_path("sim"))],
                parameter_overrides=[Parameter(k, value=v) for k, v in derived[cls.node_name].items()],
            )
            try:
                assert declare_config(node, cls) == load_config(cls, config_path("sim"))
            finally:
                node.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


def test_lerobot_writer_config_live_and_offline():
    cfg = LeRobotRecorderConfig(
        cameras=["cam_front", "cam_wrist"],
        camera_heights=[480, 240],
        camera_widths=[640, 320],
        crf=30,
        rotation_type="quaternion",
        on_binding_change="refuse",
        save_raw_quest=False,
    )
    live = lerobot_writer_config(cfg)
    assert {c: (s.height, s.width) for c, s in live.cameras.items()} == {
        "cam_front": (480, 640),
        "cam_wrist": (240, 320),
    }
    assert (live.fps, live.video.crf, live.video.bf, live.video.gop) == (30, 30, 0, 15)  # gop 0: writer default
    assert live.video.max_block_s == 2.0  # encoder_max_block_s: the live writer thread may wait this long
    assert lerobot_writer_config(dataclasses.replace(cfg, encoder_max_block_s=0.5)).video.max_block_s == 0.5
    assert (live.rotation_type, live.on_binding_change, live.save_raw_quest) == ("quaternion", "refuse", False)
    assert live.lerobot_version == "v2.0"  # the default: the user's spec
    assert lerobot_writer_config(dataclasses.replace(cfg, lerobot_version="v2.1")).lerobot_version == "v2.1"
    offline = lerobot_writer_config(
        dataclasses.replace(cfg, gop=30), {"cam_top": CameraTopics("/top", None, 48, 64)}, offline=True
    )
    assert offline.video.max_block_s is None and offline.video.gop == 30
    assert {c: (s.height, s.width) for c, s in offline.cameras.items()} == {"cam_top": (48, 64)}
    assert dataclasses.replace(offline, cameras=live.cameras, video=live.video) == live  # nothing else differs


def test_rgbd_writer_config_sources_and_producer():
    pytest.importorskip("rgbd_writer.writer")
    cfg = RgbdRecorderConfig(camera="cam_wrist", camera_width=320, camera_height=240, depth_codec="jpeg2000_strict")
    live = rgbd_writer_config(cfg)
    assert (live.width, live.height, live.depth_codec) == (320, 240, "jpeg2000_strict")
    assert live.rgb_source == "/cam_wrist/color/image_raw"
    assert live.depth_source == "/cam_wrist/aligned_depth_to_color/image_raw"
    assert live.env_args["source"] == "piper_recorder rgbd_recorder" and live.env_args["camera"] == "cam_wrist"
    conv = rgbd_writer_config(cfg, {"cam_x": CameraTopics("/x/color", "/x/depth", 48, 64)}, producer="bag2dataset")
    assert (conv.rgb_source, conv.depth_source, conv.width, conv.height) == ("/x/color", "/x/depth", 64, 48)
    assert conv.env_args["source"] == "piper_recorder bag2dataset" and conv.env_args["camera"] == "cam_x"


def test_session_record_binding_keys_resolve():
    cfg = LeRobotRecorderConfig(fps=15.0, camera_serials=["s1", "s2"])
    rec = session_record(cfg, "lerobot_recorder", PROVENANCE, {"app": "quest"})
    assert [lookup(rec, k) for k in BINDING_KEYS] == ["impedance", 10.0, 0.8, 0.0, True, "S-V1.6-3", 15.0]
    assert rec["arm"] == {
        "firmware": "S-V1.6-3",
        "model": "piper",
        "can_channel": "can0",
        "sdk_version": "0.2.19",
        "provenance": PROVENANCE,
    }
    assert rec["headset"] == {"app": "quest"}
    assert rec["cameras"]["cam_wrist"] == {
        "serial": "s2",
        "topic": "/cam_wrist/color/image_raw",
        "profile": {"width": 640, "height": 480, "fps": 15.0, "encoding": "rgb8"},
    }
    assert rec["recording"] == {
        "recorder": "lerobot_recorder",
        "fps": 15.0,
        "timestamp_mode": "nominal",
        "lateness_s": 0.1,
        "stale_s": 0.25,
        "max_episode_s": 600.0,
        "root": "lerobot_dataset",
        "video": {
            "codec": "libx264",
            "pix_fmt": "yuv420p",
            "crf": 23,
            "preset": "veryfast",
            "gop": "writer default",
            "bf": 0,
        },
        "rotation_type": "quat_wxyz",
        "combined_columns": True,
        "lerobot_version": "v2.0",
        "save_raw_quest": True,
    }


def test_session_record_without_provenance_and_for_a_converter():
    cfg = RgbdRecorderConfig(camera_serials=["s1"])
    rec = session_record(cfg, "rgbd_recorder", None, None)
    assert all(lookup(rec, k) == "unknown" for k in BINDING_KEYS if k != "recording.fps")
    assert rec["arm"]["provenance"] == "unknown" and rec["headset"] == "unknown"
    assert rec["cameras"]["cam_front"]["depth"] == {
        "topic": "/cam_front/aligned_depth_to_color/image_raw",
        "encoding": "16UC1",
        "unit": "mm",
        "aligned_to": "color",
    }
    assert rec["recording"]["path"] == "rgbd.hdf5" and rec["recording"]["depth_codec"] == "jpeg2000"
    mapped = {"cam_a": CameraTopics("/a/color", "/a/depth", 48, 64)}
    conv = session_record(cfg, "rgbd_recorder", {"backend": "position"}, None, mapped, output="/out/x.hdf5")
    assert conv["control"]["backend"] == "position" and conv["control"]["impedance"]["kp"] == "unknown"
    assert conv["cameras"] == {
        "cam_a": {
            "serial": "s1",
            "topic": "/a/color",
            "profile": {"width": 64, "height": 48, "fps": 30.0, "encoding": "rgb8"},
            "depth": {"topic": "/a/depth", "encoding": "16UC1", "unit": "mm", "aligned_to": "color"},
        }
    }
    assert conv["recording"]["path"] == "/out/x.hdf5"
    two = session_record(
        LeRobotRecorderConfig(camera_serials=["s1", "s2"]),
        "lerobot_recorder",
        None,
        None,
        {"cam_a": CameraTopics("/a", None, 48, 64)},
    )
    assert two["cameras"]["cam_a"]["serial"] == "unknown"  # serials no longer match the mapped cameras


def test_one_coercion_rule_for_rcl_values_too():
    import array

    from piper_recorder.recording.config import coerce_param

    assert coerce_param("kp", list[float], array.array("d", [1.0, 2])) == [1.0, 2.0]  # rcl gives arrays
    assert coerce_param("cameras", list[str], None) == [] and coerce_param("fps", float, 30) == 30.0
    with pytest.raises(ValueError, match="parameter 'cameras': expected list"):
        coerce_param("cameras", list[str], "cam_front")  # never a list of letters

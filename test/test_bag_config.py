"""The converter reads the recorders' configuration and messages exactly as the recorder nodes do.

``piper_recorder.bag.config`` mirrors the node config dataclasses (the core package cannot import
rclpy; these tests fail as soon as the two drift). ``piper_recorder.assembly.messages`` is shared:
the recorder nodes call the same functions on rclpy messages that the converter calls on rosbags ones.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from piper_recorder.assembly import messages
from piper_recorder.bag.config import LeRobotSettings, RgbdSettings, load_settings, topic_map
from piper_recorder.bag.synth import T, image, joint_state, pose_stamped
from piper_recorder.launcher import config_path

pytest.importorskip("rclpy")

from piper_recorder.nodes import lerobot_recorder, recorder_base, rgbd_recorder  # noqa: E402
from piper_recorder.nodes.lerobot_recorder import LeRobotRecorderConfig  # noqa: E402
from piper_recorder.nodes.rgbd_recorder import RgbdRecorderConfig  # noqa: E402


@pytest.mark.parametrize("mine, node", [(LeRobotSettings, LeRobotRecorderConfig), (RgbdSettings, RgbdRecorderConfig)])
def test_settings_mirror_the_recorder_configs(mine, node):
    assert dataclasses.asdict(mine()) == dataclasses.asdict(node())
    assert [f.name for f in dataclasses.fields(mine)] == [f.name for f in dataclasses.fields(node)]


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_packaged_configs_map_the_graph_topics(mode):
    s = load_settings("lerobot", config_path(mode))
    tm = topic_map("lerobot", s)
    assert tm.cameras["cam_wrist"].color == "/cam_wrist/color/image_raw"
    assert tm.joint_states == "/arm/joint_states" and tm.raw_quest == "/quest/raw"
    r = topic_map("rgbd", load_settings("rgbd", config_path(mode)))
    assert r.cameras["cam_front"].depth == "/cam_front/aligned_depth_to_color/image_raw" and r.reward == "/reward"


def test_unknown_parameters_are_refused(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("lerobot_recorder:\n  ros__parameters:\n    fsp: 30\n")
    with pytest.raises(ValueError, match=r"unknown lerobot_recorder parameters \['fsp'\]"):
        load_settings("lerobot", p)


def test_nodes_and_converter_share_the_message_helpers():
    assert lerobot_recorder.image_to_numpy is rgbd_recorder.image_to_numpy is messages.image_to_numpy
    assert recorder_base.joint_positions is messages.joint_positions and recorder_base.pose is messages.pose


def test_message_helpers_on_rosbags_messages():
    """rosbags messages carry numpy arrays where rclpy has array.array/bytes: same results."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)
    depth = rng.integers(0, 5000, (6, 5), dtype=np.uint16)
    assert np.array_equal(messages.image_to_numpy(image(5, rgb, "rgb8")), rgb)
    assert np.array_equal(messages.image_to_numpy(image(6, depth, "16UC1")), depth)
    bgr = image(7, np.ascontiguousarray(rgb[:, :, ::-1]), "bgr8")
    assert np.array_equal(messages.image_to_numpy(bgr), rgb)
    with pytest.raises(ValueError):
        messages.image_to_numpy(T["sensor_msgs/msg/Image"](header=bgr.header, height=1, width=1, encoding="yuv422",
                                                          is_bigendian=0, step=2, data=np.zeros(2, np.uint8)))
    names = ["gripper"] + [f"joint{i}" for i in range(6, 0, -1)]
    js = joint_state(10, names, np.arange(7.0))
    assert messages.joint_positions(js, {}) == [6, 5, 4, 3, 2, 1, 0]
    assert messages.joint_positions(joint_state(11, ["joint1"], np.zeros(1)), {}) is None
    p = pose_stamped(1_500_000_000, np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 0.6, 0.8]))
    assert messages.pose(p) == ((1.0, 2.0, 3.0), (0.0, 0.0, 0.6, 0.8))
    assert messages.stamp_ns(p) == 1_500_000_000
    grip = joint_state(3, ["joint7"], np.array([40.0]))
    assert messages.gripper_width(grip, "joint7", 0.001) == pytest.approx(0.04)
    assert messages.gripper_width(grip) == 40.0 and messages.gripper_width(grip, "joint8") is None


def test_converter_needs_no_ros_runtime():
    import subprocess
    import sys

    code = ("import sys; import piper_recorder.cli.bag2dataset, piper_recorder.bag.run, piper_recorder.bag.convert, "
            "piper_recorder.bag.merge, piper_recorder.bag.synth, piper_recorder.launcher; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('rclpy', 'sensor_msgs', 'std_msgs', 'geometry_msgs', 'rosbag2_py')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

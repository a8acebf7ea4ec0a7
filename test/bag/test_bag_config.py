"""The converter reads the recorders' topics and messages exactly as the recorder nodes do.

The settings are the recorders' own config classes (``piper_recorder.recording.config``, tested in
test_recorder_config.py). ``piper_recorder.assembly.messages`` is shared: the recorder nodes call the
same functions on rclpy messages that the converter calls on rosbags ones.
"""

from __future__ import annotations

import numpy as np
import pytest

from piper_recorder.assembly import messages
from piper_recorder.bag.config import topic_map
from piper_recorder.bag.synth import T, image, joint_state, pose_stamped
from piper_recorder.graph.install import config_path
from piper_recorder.recording.config import LeRobotRecorderConfig, RgbdRecorderConfig, load_config


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_packaged_configs_map_the_graph_topics(mode):
    s = load_config(LeRobotRecorderConfig, config_path(mode))
    tm = topic_map("lerobot", s)
    assert tm.cameras["cam_wrist"].color == "/cam_wrist/color/image_raw"
    assert tm.topic("joint_states") == "/arm/joint_states" and tm.raw_quest == "/quest/raw"
    r = topic_map("rgbd", load_config(RgbdRecorderConfig, config_path(mode)))
    assert (
        r.cameras["cam_front"].depth == "/cam_front/aligned_depth_to_color/image_raw" and r.topic("reward") == "/reward"
    )


def test_mapping_cameras_take_the_configured_sizes(tmp_path):
    s = LeRobotRecorderConfig(cameras=["cam_front", "cam_wrist"], camera_heights=[48, 96], camera_widths=[64, 128])
    wrist = topic_map("lerobot", s).cameras["cam_wrist"]
    assert (wrist.color, wrist.depth, wrist.height, wrist.width) == ("/cam_wrist/color/image_raw", None, 96, 128)
    m = tmp_path / "map.yaml"
    m.write_text("cameras:\n  cam_wrist: {color: /wrist/image}\n  cam_top: {color: /top/image, width: 320}\n")
    cams = topic_map("lerobot", s, m).cameras
    assert (cams["cam_wrist"].color, cams["cam_wrist"].height, cams["cam_wrist"].width) == ("/wrist/image", 96, 128)
    assert (cams["cam_top"].height, cams["cam_top"].width) == (480, 320)  # unknown camera: the default size


def test_message_helpers_on_rosbags_messages():
    """Rosbags messages carry numpy arrays where rclpy has array.array/bytes: same results."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)
    depth = rng.integers(0, 5000, (6, 5), dtype=np.uint16)
    assert np.array_equal(messages.image_to_numpy(image(5, rgb, "rgb8")), rgb)
    assert np.array_equal(messages.image_to_numpy(image(6, depth, "16UC1")), depth)
    bgr = image(7, np.ascontiguousarray(rgb[:, :, ::-1]), "bgr8")
    assert np.array_equal(messages.image_to_numpy(bgr), rgb)
    with pytest.raises(ValueError):
        messages.image_to_numpy(
            T["sensor_msgs/msg/Image"](
                header=bgr.header,
                height=1,
                width=1,
                encoding="yuv422",
                is_bigendian=0,
                step=2,
                data=np.zeros(2, np.uint8),
            )
        )
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


@pytest.mark.integration
def test_converter_needs_no_ros_runtime():
    import subprocess
    import sys

    code = (
        "import sys; import piper_recorder.cli.bag2dataset, piper_recorder.bag.run, piper_recorder.bag.convert, "
        "piper_recorder.bag.merge, piper_recorder.bag.synth, piper_recorder.graph.plan, "
        "piper_recorder.recording.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('rclpy', 'sensor_msgs', 'std_msgs', 'geometry_msgs', 'rosbag2_py')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""Message adapters shared by the recorders and the bag converter (rclpy messages here), and start-up parameter checks."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from sensor_msgs.msg import Image, JointState

from piper_recorder.assembly.messages import image_to_numpy, joint_positions

from support.proc import BIN


def make(img: np.ndarray, encoding: str, pad: int = 0, big_endian: bool = False) -> Image:
    h, w = img.shape[:2]
    row = img.reshape(h, -1).view(np.uint8) if img.dtype != np.uint8 else img.reshape(h, -1)
    padded = np.zeros((h, row.shape[1] + pad), np.uint8)
    padded[:, : row.shape[1]] = row
    return Image(
        height=h, width=w, encoding=encoding, step=padded.shape[1], is_bigendian=big_endian, data=padded.tobytes()
    )


def test_rgb8_is_a_view_with_row_padding_respected():
    rgb = np.random.default_rng(0).integers(0, 255, (5, 7, 3), dtype=np.uint8)
    msg = make(rgb, "rgb8", pad=3)
    out = image_to_numpy(msg)
    assert np.array_equal(out, rgb)
    assert np.shares_memory(out, np.frombuffer(msg.data, np.uint8))  # no copy


def test_bgr8_and_rgba8_reordered_to_rgb():
    rgb = np.random.default_rng(1).integers(0, 255, (4, 6, 3), dtype=np.uint8)
    assert np.array_equal(image_to_numpy(make(rgb[:, :, ::-1].copy(), "bgr8")), rgb)
    rgba = np.concatenate([rgb, np.full((4, 6, 1), 255, np.uint8)], axis=2)
    assert np.array_equal(image_to_numpy(make(rgba, "rgba8"))[:, :, :3], rgb)


def test_16uc1_depth_little_and_big_endian():
    d = np.arange(20, dtype=np.uint16).reshape(4, 5) * 1000
    out = image_to_numpy(make(d, "16UC1", pad=2))
    assert out.dtype == np.uint16 and np.array_equal(out, d)
    be = make(d.astype(">u2"), "16UC1", big_endian=True)
    out = image_to_numpy(be)
    assert out.dtype == np.uint16 and np.array_equal(out, d)
    with pytest.raises(ValueError, match="unsupported"):
        image_to_numpy(Image(height=1, width=1, encoding="yuv422", step=2, data=b"\0\0"))


def test_joint_state_by_name_in_any_order():
    cache: dict = {}
    names = ["gripper"] + [f"joint{i}" for i in range(6, 0, -1)]
    msg = JointState(name=names, position=[0.07, 6, 5, 4, 3, 2, 1])
    assert joint_positions(msg, cache) == [1, 2, 3, 4, 5, 6, 0.07]
    assert joint_positions(JointState(name=["joint1"], position=[0.0]), cache) is None
    assert joint_positions(JointState(position=[1, 2, 3, 4, 5, 6, 0.01]), cache) == [1, 2, 3, 4, 5, 6, 0.01]


@pytest.mark.parametrize(
    "exe,param,needle",
    [
        ("piper-lerobot-recorder", "timestamp_mode:=sometimes", "timestamp_mode"),
        ("piper-lerobot-recorder", "fps:=29.97", "fps"),
        ("piper-lerobot-recorder", "on_shutdown:=explode", "on_shutdown"),
        ("piper-rgbd-recorder", "path:=out.txt", "path"),
    ],
)
def test_bad_parameters_fail_at_start_naming_the_parameter(ros_domain, tmp_path, exe, param, needle):
    r = subprocess.run(
        [str(BIN / exe), "--ros-args", "-p", f"root:={tmp_path}/ds", "-p", param],
        env=ros_domain.env(),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path / "ds").exists() and not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("exe,param", [("piper-lerobot-recorder", "root"), ("piper-rgbd-recorder", "path")])
def test_dataset_held_by_another_writer_fails_cleanly(ros_domain, tmp_path, exe, param):
    """A second recorder on the same dataset exits with a one-line error, not a traceback."""
    if exe == "piper-lerobot-recorder":
        from piper_recorder.lerobot.writer import LeRobotWriter as Writer

        target = tmp_path / "ds"
    else:
        from rgbd_writer import RgbdWriter as Writer

        target = tmp_path / "sub" / "rgbd.hdf5"  # also: the folder does not exist yet
    with Writer(target):
        r = subprocess.run(
            [str(BIN / exe), "--ros-args", "-p", f"{param}:={target}"],
            env=ros_domain.env(),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=tmp_path,
        )
    assert r.returncode == 2 and "cannot open the dataset" in r.stderr and "Traceback" not in r.stderr, r.stderr

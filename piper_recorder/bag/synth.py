"""Synthesise rosbag2 bags of the robot graph's topics (tests and benchmarks; no ROS runtime).

The bags look like ``ros2 bag record`` of the real graph: arm state at 200 Hz, commands at 100 Hz,
RGB + aligned depth per camera, raw headset lines, the latched provenance and /episode_events.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import get_typestore

from piper_recorder.bag.source import DEFAULT_STORE
from piper_recorder.names import (
    ARM_PROVENANCE,
    CAMERA,
    COLOR_TOPIC_PATTERN,
    COMMANDED_GRIPPER,
    COMMANDED_POSE,
    DEPTH_TOPIC_PATTERN,
    EEF_POSE,
    EPISODE_EVENTS,
    JOINT_STATES,
    QUEST_RAW,
    arm_topic,
    camera_topic,
)

TYPESTORE = get_typestore(DEFAULT_STORE)
T = TYPESTORE.types


def header(stamp_ns: int, frame_id: str = "") -> Any:
    """A std_msgs/Header stamped ``stamp_ns``."""
    stamp = T["builtin_interfaces/msg/Time"](sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def joint_state(stamp_ns: int, names: list[str], positions: np.ndarray) -> Any:
    """A sensor_msgs/JointState of ``positions`` by ``names``."""
    empty = np.zeros(0, dtype=np.float64)
    return T["sensor_msgs/msg/JointState"](
        header=header(stamp_ns),
        name=names,
        position=np.asarray(positions, dtype=np.float64),
        velocity=empty,
        effort=empty,
    )


def pose_stamped(stamp_ns: int, pos: np.ndarray, quat_xyzw: np.ndarray, frame_id: str = "arm_base") -> Any:
    """A geometry_msgs/PoseStamped (ROS xyzw quaternion)."""
    P = T["geometry_msgs/msg/Point"](x=float(pos[0]), y=float(pos[1]), z=float(pos[2]))
    Q = T["geometry_msgs/msg/Quaternion"](
        x=float(quat_xyzw[0]), y=float(quat_xyzw[1]), z=float(quat_xyzw[2]), w=float(quat_xyzw[3])
    )
    return T["geometry_msgs/msg/PoseStamped"](
        header=header(stamp_ns, frame_id), pose=T["geometry_msgs/msg/Pose"](position=P, orientation=Q)
    )


def image(stamp_ns: int, array: np.ndarray, encoding: str, frame_id: str = "") -> Any:
    """A sensor_msgs/Image of ``array`` in ``encoding``."""
    h, w = array.shape[:2]
    data = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
    return T["sensor_msgs/msg/Image"](
        header=header(stamp_ns, frame_id),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=data.size // h,
        data=data,
    )


def string(text: str) -> Any:
    """A std_msgs/String."""
    return T["std_msgs/msg/String"](data=text)


ROBOT_TOPICS = {
    "joint_states": JOINT_STATES,
    "eef_pose": EEF_POSE,
    "commanded_pose": COMMANDED_POSE,
    "commanded_gripper": COMMANDED_GRIPPER,
    "provenance": ARM_PROVENANCE,
    "raw_quest": QUEST_RAW,
}
# AgileX's own piper_ros driver: joint1..joint7 (joint7 = gripper), end pose; no stamped commands; one camera
AGILEX_TOPICS = {
    "joint_states": "/joint_states_single",
    "eef_pose": "/end_pose_stamped",
    "commanded_pose": "",
    "commanded_gripper": "",
    "provenance": "",
    "raw_quest": "",
}


@dataclass
class SynthScenario:
    """A recording: ``episodes`` as (start_s, end_s) within ``duration_s``; one task for all."""

    duration_s: float = 4.0
    cameras: tuple[str, ...] = ("cam_front",)
    width: int = 64
    height: int = 48
    camera_fps: float = float(CAMERA.fps)
    arm_hz: float = 200.0
    command_hz: float = 100.0
    quest_hz: float = 90.0
    episodes: list[tuple[float, float]] = field(default_factory=lambda: [(0.5, 3.5)])
    with_events: bool = True
    task: str = "synthetic task"
    recorder: str = "lerobot_recorder"
    t0_ns: int = 1_700_000_000_000_000_000
    latency_ns: int = 2_000_000  # capture -> bag receive
    seed: int = 0
    topics: dict[str, str] = field(default_factory=lambda: dict(ROBOT_TOPICS))
    joint_names: tuple[str, ...] = tuple(f"joint{i}" for i in range(1, 7)) + ("gripper",)
    gripper_scale_out: float = 1.0  # gripper value in the bag = metres * this
    camera_topic_map: dict[str, tuple[str, str]] = field(default_factory=dict)  # cam -> (color, depth)
    depth: bool = True
    camera_delay_ns: int | None = None  # capture after each camera slot k / camera_fps; None: (i + 1) ms for camera i
    # several arms: each arm's topics under its namespace (names.arm_topic), arm i moving at its own pace and place
    arms: tuple[str, ...] = ()

    def camera_topics(self, cam: str) -> tuple[str, str | None]:
        """Camera ``cam``'s colour and depth topics (depth None when the scenario has none)."""
        color, depth = self.camera_topic_map.get(
            cam, (camera_topic(COLOR_TOPIC_PATTERN, cam), camera_topic(DEPTH_TOPIC_PATTERN, cam))
        )
        return color, depth if self.depth else None


def agilex_scenario(**kw: Any) -> SynthScenario:
    """AgileX driver layout: gripper as joint7 (x1000), one /camera/... RealSense, no events/commands."""
    return SynthScenario(
        topics=dict(AGILEX_TOPICS),
        joint_names=tuple(f"joint{i}" for i in range(1, 8)),
        gripper_scale_out=1000.0,
        with_events=False,
        camera_topic_map={
            "cam_front": (camera_topic(COLOR_TOPIC_PATTERN, "camera"), camera_topic(DEPTH_TOPIC_PATTERN, "camera"))
        },
        **kw,
    )


# (topic, msgtype, stamp_ns, msg) of one stream, and (receive_ns, tie-break, topic, msgtype, msg) for heapq.merge;
# msgs are rosbags typestore dataclasses, generated at runtime (no static type)
_Item = tuple[str, str, int, Any]
_Merged = tuple[int, tuple[int, int], str, str, Any]


def _arm_pose(t: float, arm_i: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Arm ``arm_i``'s flange at ``t``: arm 0 as one arm has always moved; arm 1 faster, beside it (y - 0.3 m)."""
    t = t * (1.0 + 0.5 * arm_i)
    pos = np.array([0.30 + 0.05 * np.sin(0.8 * t), 0.05 * np.cos(0.8 * t) - 0.3 * arm_i, 0.25 + 0.02 * np.sin(1.6 * t)])
    yaw = 0.2 * np.sin(0.5 * t)
    return pos, np.array([0.0, np.sin(yaw / 2), 0.0, np.cos(yaw / 2)])  # pitch-ish rotation, xyzw


def _arms(s: SynthScenario) -> list[tuple[int, str | None]]:
    """(index, arm name) of each arm of the scenario; one arm is (0, None)."""
    return list(enumerate(s.arms)) if s.arms else [(0, None)]


def _gripper_m(t: float, arm_i: int) -> float:
    return 0.03 + 0.02 * np.sin(t * (1.0 + 0.5 * arm_i))


def scenario_messages(s: SynthScenario) -> Iterator[tuple[str, str, int, Any]]:
    """(topic, msgtype, receive_ns, msg) in receive order, generated lazily (hour-long image bags fit)."""
    n_total = int(s.duration_s * 1e9)
    streams = [_provenance(s), _arm(s), _commands(s), _quest(s), _events(s)]
    streams += [_camera(s, i, cam) for i, cam in enumerate(s.cameras)]
    for recv, _seq, topic, msgtype, msg in heapq.merge(*streams):
        if recv - s.t0_ns <= n_total:
            yield topic, msgtype, recv, msg


def _stream(s: SynthScenario, order: int, items: Iterator[_Item]) -> Iterator[_Merged]:
    """(receive_ns, tie-break, topic, msgtype, msg) for heapq.merge; the tie-break never compares msgs."""
    for k, (topic, msgtype, stamp_ns, msg) in enumerate(items):
        yield stamp_ns + s.latency_ns, (order, k), topic, msgtype, msg


def _provenance(s: SynthScenario) -> Iterator[_Merged]:
    prov = {
        "backend": "position",
        "kp": [5, 25, 5, 8, 8, 5],
        "kd": [0.3, 1.2, 0.3, 0.45, 0.45, 0.3],
        "t_ff": 0.0,
        "gravity_ff": False,
        "firmware": "S-V1.6-3",
        "arm_model": "piper",
        "can_channel": "can0",
        "sdk_version": "0.6.2",
    }
    items = [
        (
            arm_topic(arm, s.topics["provenance"]),
            "std_msgs/msg/String",
            s.t0_ns,
            string(json.dumps({**prov, "can_channel": f"can{i}"} if arm else prov)),
        )
        for i, arm in _arms(s)
    ]
    return _stream(s, 0, iter(items if s.topics.get("provenance") else []))


def _arm(s: SynthScenario) -> Iterator[_Merged]:
    def gen() -> Iterator[_Item]:
        for k in range(int(s.duration_s * s.arm_hz)):
            ns = s.t0_ns + int(k * 1e9 / s.arm_hz)
            t = (ns - s.t0_ns) / 1e9
            for i, arm in _arms(s):
                pos, q = _arm_pose(t, i)
                gripper = s.gripper_scale_out * _gripper_m(t, i)
                joints = np.array([0.1 * np.sin(t * (1.0 + 0.5 * i) + j) for j in range(6)] + [gripper])
                yield (
                    arm_topic(arm, s.topics["joint_states"]),
                    "sensor_msgs/msg/JointState",
                    ns,
                    joint_state(ns, list(s.joint_names), joints),
                )
                pose = pose_stamped(ns, pos, q)
                yield arm_topic(arm, s.topics["eef_pose"]), "geometry_msgs/msg/PoseStamped", ns, pose

    return _stream(s, 1, gen())


def _commands(s: SynthScenario) -> Iterator[_Merged]:
    def gen() -> Iterator[_Item]:
        if not s.topics.get("commanded_pose"):
            return
        for k in range(int(s.duration_s * s.command_hz)):
            ns = s.t0_ns + int(k * 1e9 / s.command_hz) + 3_000_000
            for i, arm in _arms(s):
                pos, q = _arm_pose((ns - s.t0_ns) / 1e9 + 0.02, i)
                pose = pose_stamped(ns, pos, q)
                yield arm_topic(arm, s.topics["commanded_pose"]), "geometry_msgs/msg/PoseStamped", ns, pose
                yield (
                    arm_topic(arm, s.topics["commanded_gripper"]),
                    "sensor_msgs/msg/JointState",
                    ns,
                    joint_state(ns, [s.joint_names[-1]], np.array([s.gripper_scale_out * (0.04 - 0.01 * i)])),
                )

    return _stream(s, 2, gen())


def _camera(s: SynthScenario, cam_i: int, cam: str) -> Iterator[_Merged]:
    def gen() -> Iterator[_Item]:
        rng = np.random.default_rng(s.seed + cam_i)
        yy, xx = np.mgrid[0 : s.height, 0 : s.width]
        noise = rng.integers(0, 256, (8, s.height, s.width), dtype=np.uint8)
        color, depth_topic = s.camera_topics(cam)
        delay = 1_000_000 * (cam_i + 1) if s.camera_delay_ns is None else s.camera_delay_ns
        for k in range(int(s.duration_s * s.camera_fps)):
            ns = s.t0_ns + int(k * 1e9 / s.camera_fps) + delay
            rgb = np.empty((s.height, s.width, 3), np.uint8)
            rgb[..., 0] = (xx + k) % 256
            rgb[..., 1] = (yy * 2 + 3 * k) % 256
            rgb[..., 2] = noise[k % 8]
            depth = (800 + 10 * ((xx + yy + k) % 100)).astype(np.uint16)
            yield color, "sensor_msgs/msg/Image", ns, image(ns, rgb, "rgb8", f"{cam}_color")
            if depth_topic:
                yield depth_topic, "sensor_msgs/msg/Image", ns, image(ns, depth, "16UC1", f"{cam}_color")

    return _stream(s, 10 + cam_i, gen())


def _quest(s: SynthScenario) -> Iterator[_Merged]:
    def gen() -> Iterator[_Item]:
        if not s.topics.get("raw_quest"):
            return
        for k in range(int(s.duration_s * s.quest_hz)):
            ns = s.t0_ns + int(k * 1e9 / s.quest_hz)
            yield s.topics["raw_quest"], "std_msgs/msg/String", ns, string(json.dumps({"frame": k, "mono": ns / 1e9}))

    return _stream(s, 3, gen())


def _events(s: SynthScenario) -> Iterator[_Merged]:
    def gen() -> Iterator[_Item]:
        if not s.with_events:
            return
        for i, (a, b) in enumerate(s.episodes):
            start_ns, end_ns = s.t0_ns + int(a * 1e9), s.t0_ns + int(b * 1e9)
            base = {"recorder": s.recorder, "episode_index": i, "task": s.task, "start_ns": start_ns}
            yield (
                EPISODE_EVENTS,
                "std_msgs/msg/String",
                start_ns,
                string(json.dumps({**base, "event": "started", "end_ns": None, "rows": None, "reason": None})),
            )
            yield (
                EPISODE_EVENTS,
                "std_msgs/msg/String",
                end_ns + 100_000_000,
                string(json.dumps({**base, "event": "saved", "end_ns": end_ns, "rows": None, "reason": None})),
            )

    items = sorted(gen(), key=lambda e: e[2])
    return _stream(s, 4, iter(items))


def write_bag(path: Path, messages: Iterator[tuple[str, str, int, Any]], storage: str = "sqlite3") -> Path:
    """Write (topic, msgtype, receive_ns, msg) tuples as a rosbag2 bag; storage 'sqlite3' or 'mcap'."""
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    conns: dict[str, Any] = {}
    with Writer(Path(path), version=9, storage_plugin=plugin) as writer:
        for topic, msgtype, recv, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=TYPESTORE)
            writer.write(conns[topic], recv, TYPESTORE.serialize_cdr(msg, msgtype))
    return Path(path)

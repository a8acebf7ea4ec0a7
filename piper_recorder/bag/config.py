"""Recorder settings and topic mapping for the converter, read from the recorders' own parameter files.

The live recorder nodes declare their parameters from dataclasses in ``piper_recorder/nodes`` (which
import rclpy, so this core package cannot import them). ``LeRobotSettings``/``RgbdSettings`` mirror
those fields and defaults exactly; ``test/test_bag_config.py`` fails if the two drift apart.
``load_settings`` applies a ROS 2 parameter file's ``<recorder>: ros__parameters:`` section (also
``/**``), e.g. config/sim.yaml or config/robot.yaml, so bags of either graph map directly.

Mapping file (``--mapping FILE.yaml``) for other topic layouts; every key is optional and overrides
what the recorder settings give::

    joint_states:                     # sensor_msgs/JointState -> 6 joints (rad) + gripper (m)
      topic: /joint_states_single
      names: [joint1, joint2, joint3, joint4, joint5, joint6, joint7]   # 7 names, gripper last
      gripper_scale: 1.0              # multiplies the gripper position (to metres)
    eef_pose: /end_pose_stamped       # geometry_msgs/PoseStamped (a topic string or {topic: ...})
    commanded_pose: /end_pose_stamped # PoseStamped; action.arm_eef
    commanded_gripper:                # JointState; action.gripper
      topic: /joint_ctrl_single
      name: joint7                    # which joint (default: the first position)
      scale: 1.0
    cameras:                          # replaces the camera set: name -> topics (+ optional size)
      cam_front: {color: /camera/color/image_raw, depth: /camera/aligned_depth_to_color/image_raw,
                  height: 480, width: 640}
    raw_quest: null                   # std_msgs/String headset lines (null: none)
    reward: null                      # std_msgs/Float32 (RGB-D)
    provenance: /arm/provenance       # std_msgs/String JSON
    hello: /quest/hello
    episode_events: /episode_events
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.assembly.messages import ARM_JOINTS

LEROBOT_RECORDER, RGBD_RECORDER = "lerobot_recorder", "rgbd_recorder"
EVENTS_TOPIC = "/episode_events"


@dataclass
class RecorderSettings:
    """Mirror of nodes/recorder_base.RecorderConfig."""

    task: str = ""
    fps: float = 30.0
    timestamp_mode: str = "capture"
    lateness_s: float = 0.1
    stale_s: float = 0.25
    max_episode_s: float = 600.0
    on_shutdown: str = "save"
    camera_height: int = 480
    camera_width: int = 640
    camera_serials: list[str] = field(default_factory=list)
    image_topic_pattern: str = "/{cam}/color/image_raw"
    image_reliability: str = "reliable"
    joint_states_topic: str = "/arm/joint_states"
    eef_topic: str = "/arm/eef_pose"
    commanded_pose_topic: str = "/arm/commanded_pose"
    commanded_gripper_topic: str = "/arm/commanded_gripper"
    provenance_topic: str = "/arm/provenance"
    hello_topic: str = "/quest/hello"
    provenance_wait_s: float = 2.0
    status_hz: float = 2.0

    def camera_list(self) -> list[str]:
        raise NotImplementedError

    def camera_size(self, camera: str) -> tuple[int, int]:
        return self.camera_height, self.camera_width

    def assembly(self, cameras: tuple[str, ...]) -> AssemblyConfig:
        return AssemblyConfig(fps=self.fps, cameras=cameras, timestamp_mode=self.timestamp_mode,
                              lateness_s=self.lateness_s, stale_s=self.stale_s)


@dataclass
class LeRobotSettings(RecorderSettings):
    """Mirror of nodes/lerobot_recorder.LeRobotRecorderConfig."""

    root: str = "lerobot_dataset"
    cameras: list[str] = field(default_factory=lambda: ["cam_front", "cam_wrist"])
    camera_heights: list[int] = field(default_factory=list)
    camera_widths: list[int] = field(default_factory=list)
    raw_quest_topic: str = "/quest/raw"
    save_raw_quest: bool = True
    robot_type: str = "agilex_piper"
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    crf: int = 23
    preset: str = "veryfast"
    gop: int = 0
    chunks_size: int = 1000
    rotation_type: str = "quat_wxyz"
    combined_columns: bool = True
    on_binding_change: str = "warn"

    def camera_list(self) -> list[str]:
        return list(self.cameras)

    def camera_size(self, camera: str) -> tuple[int, int]:
        i = self.cameras.index(camera) if camera in self.cameras else -1
        return (self.camera_heights[i] if self.camera_heights and i >= 0 else self.camera_height,
                self.camera_widths[i] if self.camera_widths and i >= 0 else self.camera_width)


@dataclass
class RgbdSettings(RecorderSettings):
    """Mirror of nodes/rgbd_recorder.RgbdRecorderConfig."""

    path: str = "rgbd.hdf5"
    camera: str = "cam_front"
    depth_topic_pattern: str = "/{cam}/aligned_depth_to_color/image_raw"
    reward_topic: str = "/reward"
    rgb_jpeg_quality: int = 88
    depth_codec: str = "jpeg2000"
    depth_min_m: float = 0.1
    depth_max_m: float = 6.0

    def camera_list(self) -> list[str]:
        return [self.camera]


SETTINGS = {"lerobot": (LEROBOT_RECORDER, LeRobotSettings), "rgbd": (RGBD_RECORDER, RgbdSettings)}


def load_settings(fmt: str, config: str | Path | None = None) -> RecorderSettings:
    """The recorder's defaults, updated from ``config``'s ``<recorder>.ros__parameters`` (if given)."""
    node, cls = SETTINGS[fmt]
    values: dict[str, Any] = {}
    if config is not None:
        doc = yaml.safe_load(Path(config).read_text()) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{config}: not a ROS 2 parameter file (expected a mapping of node names)")
        for key in ("/**", node, f"/{node}"):
            params = (doc.get(key) or {}).get("ros__parameters") or {}
            values.update(params)
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"{config}: unknown {node} parameters {unknown}")
    s = cls()
    for k, v in values.items():
        default = getattr(s, k)
        if isinstance(default, bool):
            v = bool(v)
        elif isinstance(default, float):
            v = float(v)
        elif isinstance(default, int):
            v = int(v)
        elif isinstance(default, list):
            v = list(v or [])
        elif isinstance(default, str):
            v = "" if v is None else str(v)
        setattr(s, k, v)
    s.assembly(tuple(s.camera_list())).validate()
    return s


@dataclass(frozen=True)
class CameraTopics:
    color: str
    depth: str | None = None
    height: int = 480
    width: int = 640


@dataclass
class TopicMap:
    """Which bag topic feeds which assembler input, and how to read it."""

    joint_states: str
    eef_pose: str
    commanded_pose: str
    commanded_gripper: str
    cameras: dict[str, CameraTopics]
    joint_names: tuple[str, ...] = ARM_JOINTS
    gripper_scale: float = 1.0
    commanded_gripper_joint: str | None = None
    commanded_gripper_scale: float = 1.0
    raw_quest: str | None = None
    reward: str | None = None
    provenance: str | None = "/arm/provenance"
    hello: str | None = "/quest/hello"
    episode_events: str | None = EVENTS_TOPIC

    # message type every mapped input needs (the converter checks the bag against this)
    def required(self, depth: bool) -> dict[str, str]:
        req = {self.joint_states: "sensor_msgs/msg/JointState", self.eef_pose: "geometry_msgs/msg/PoseStamped",
               self.commanded_pose: "geometry_msgs/msg/PoseStamped",
               self.commanded_gripper: "sensor_msgs/msg/JointState"}
        for cam in self.cameras.values():
            req[cam.color] = "sensor_msgs/msg/Image"
            if depth:
                if not cam.depth:
                    raise ValueError("RGB-D conversion needs a depth topic for the camera")
                req[cam.depth] = "sensor_msgs/msg/Image"
        return req

    def optional(self) -> dict[str, str]:
        opt = {t: "std_msgs/msg/String" for t in (self.raw_quest, self.provenance, self.hello, self.episode_events)
               if t}
        if self.reward:
            opt[self.reward] = "std_msgs/msg/Float32"
        return opt

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["joint_names"] = list(self.joint_names)
        return d


def topic_map(fmt: str, s: RecorderSettings, mapping: str | Path | None = None) -> TopicMap:
    """The recorder's topics (as its node subscribes them), overridden by a mapping file if given."""
    cams = s.camera_list()
    depth_pattern = getattr(s, "depth_topic_pattern", "/{cam}/aligned_depth_to_color/image_raw")
    tm = TopicMap(
        joint_states=s.joint_states_topic, eef_pose=s.eef_topic, commanded_pose=s.commanded_pose_topic,
        commanded_gripper=s.commanded_gripper_topic,
        cameras={c: CameraTopics(s.image_topic_pattern.format(cam=c), depth_pattern.format(cam=c),
                                 *s.camera_size(c)) for c in cams},
        raw_quest=s.raw_quest_topic if fmt == "lerobot" and getattr(s, "save_raw_quest", False) else None,
        reward=(getattr(s, "reward_topic", "") or None) if fmt == "rgbd" else None,
        provenance=s.provenance_topic or None, hello=s.hello_topic or None)
    if mapping is not None:
        apply_mapping(tm, yaml.safe_load(Path(mapping).read_text()) or {}, str(mapping), s)
    if fmt == "rgbd" and len(tm.cameras) != 1:
        raise ValueError(f"RGB-D conversion needs exactly one camera, mapping gives {sorted(tm.cameras)}")
    return tm


def _topic(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if isinstance(v, dict):
        v = v.get("topic")
    if not isinstance(v, str) or not v.startswith("/"):
        raise ValueError(f"{where}: expected an absolute topic name, got {v!r}")
    return v


def apply_mapping(tm: TopicMap, doc: dict[str, Any], src: str, s: RecorderSettings) -> None:
    known = {"joint_states", "eef_pose", "commanded_pose", "commanded_gripper", "cameras", "raw_quest", "reward",
             "provenance", "hello", "episode_events"}
    if not isinstance(doc, dict) or set(doc) - known:
        raise ValueError(f"{src}: unknown mapping keys {sorted(set(doc) - known) if isinstance(doc, dict) else doc}"
                         f" (known: {sorted(known)})")
    if "joint_states" in doc:
        js = doc["joint_states"]
        tm.joint_states = _topic(js, f"{src}: joint_states") or tm.joint_states
        if isinstance(js, dict):
            names = js.get("names", list(tm.joint_names))
            if len(names) != 7:
                raise ValueError(f"{src}: joint_states.names needs 7 names (6 joints + gripper), got {names}")
            tm.joint_names = tuple(str(n) for n in names)
            tm.gripper_scale = float(js.get("gripper_scale", 1.0))
    for key in ("eef_pose", "commanded_pose"):
        if key in doc:
            setattr(tm, key, _topic(doc[key], f"{src}: {key}"))
    if "commanded_gripper" in doc:
        cg = doc["commanded_gripper"]
        tm.commanded_gripper = _topic(cg, f"{src}: commanded_gripper")
        if isinstance(cg, dict):
            tm.commanded_gripper_joint = cg.get("name")
            tm.commanded_gripper_scale = float(cg.get("scale", 1.0))
    for key in ("raw_quest", "reward", "provenance", "hello", "episode_events"):
        if key in doc:
            setattr(tm, key, _topic(doc[key], f"{src}: {key}"))
    if "cameras" in doc:
        cams = doc["cameras"]
        if not isinstance(cams, dict) or not cams:
            raise ValueError(f"{src}: cameras must map camera names to {{color: ..., depth: ...}}")
        out = {}
        for name, c in cams.items():
            if not isinstance(c, dict) or "color" not in c:
                raise ValueError(f"{src}: camera {name!r} needs a color topic")
            h, w = s.camera_size(name)
            out[str(name)] = CameraTopics(_topic(c["color"], f"{src}: cameras.{name}.color"),
                                          _topic(c.get("depth"), f"{src}: cameras.{name}.depth"),
                                          int(c.get("height", h)), int(c.get("width", w)))
        tm.cameras = out
    for key in ("joint_states", "eef_pose", "commanded_pose", "commanded_gripper"):
        if getattr(tm, key) is None:
            raise ValueError(f"{src}: {key} cannot be null (every row needs it)")

"""Topic mapping for the converter: which bag topics feed which recorder input.

The recorder settings themselves are the live recorders' own config classes
(``piper_recorder.recording.config``, loaded from the same parameter file with ``load_config``, e.g.
config/sim.yaml or config/robot.yaml), so bags of either graph map directly: ``topic_map`` starts
from the topics the recorder node subscribes.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from piper_recorder.assembly.messages import ARM_JOINTS
from piper_recorder.recording.config import CameraTopics, LeRobotRecorderConfig, RecorderConfig, RgbdRecorderConfig

EVENTS_TOPIC = "/episode_events"


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


def topic_map(fmt: str, s: RecorderConfig, mapping: str | Path | None = None) -> TopicMap:
    """The recorder's topics (as its node subscribes them), overridden by a mapping file if given."""
    tm = TopicMap(
        joint_states=s.joint_states_topic, eef_pose=s.eef_topic, commanded_pose=s.commanded_pose_topic,
        commanded_gripper=s.commanded_gripper_topic, cameras=s.camera_topics(),
        raw_quest=s.raw_quest_topic if isinstance(s, LeRobotRecorderConfig) and s.save_raw_quest else None,
        reward=(s.reward_topic or None) if isinstance(s, RgbdRecorderConfig) else None,
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


def apply_mapping(tm: TopicMap, doc: dict[str, Any], src: str, s: RecorderConfig) -> None:
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

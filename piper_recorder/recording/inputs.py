"""Which topic feeds which input, and how its messages are read: the recorder nodes and the converter alike.

``topic_map(fmt, cfg, mapping)`` starts from the topics the recorder's parameters name (each input's
``topic_param`` in the feature table, ``features.table``) and applies a mapping file: the
``mapping`` parameter of a recorder node, ``--mapping`` of piper-bag2dataset. The result drives the
subscriptions (``recording.router``), the assembler's inputs and both writers' columns.

Mapping file (every key optional; overrides the recorder settings)::

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
    actor: /policy/actor              # std_msgs/String (latched) -> complementary_info.actor (LeRobot;
                                      # opt-in: absent/null = no column; see features.table.OPT_IN)
    provenance: /arm/provenance       # std_msgs/String JSON
    hello: /quest/hello
    episode_events: /episode_events
    arms: [left, right]               # several arms (default: the recorder's ``arms``): each arm's inputs
    left_joint_states: /left/joint_states_single   # take the arm's name in front: left_eef_pose,
                                      # left_commanded_pose, left_commanded_gripper, right_... (same forms)
    inputs:                           # extra inputs: one feature-table entry each, appended as columns
      wrench:                         # input name = RGB-D state term /observations/state/wrench
        topic: /ft_sensor/wrench
        adapter: wrench               # message adapter (assembly.messages.ADAPTERS): geometry_msgs/WrenchStamped
        column: observation.wrench    # LeRobot column (default observation.<name>; null: none)
        names: [fx, fy, fz, tx, ty, tz]   # element names (default: the adapter's)
        required: true                # rows wait for its first sample (false: zeros until then)
        rgbd: state                   # RGB-D role: state (default for observation.*) | null
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from piper_recorder.assembly.messages import Adapter, GripperAdapter, JointStateAdapter, make_adapter
from piper_recorder.features.table import OPT_IN, PIPER_TABLE, Feature, FeatureTable, InputSpec, arms_table
from piper_recorder.names import ARM_PROVENANCE, EPISODE_EVENTS, QUEST_HELLO, arm_topic, parse_arms

from .config import CameraTopics, LeRobotRecorderConfig, RecorderConfig

EVENTS_TOPIC = EPISODE_EVENTS
CHANNELS = ("raw_quest", "provenance", "hello", "episode_events")  # string topics, not row inputs


@dataclass
class InputBinding:
    """One input's topic (None: not recorded) and the adapter that reads its messages."""

    topic: str | None
    adapter: Adapter


@dataclass
class TopicMap:
    """Which topic feeds which input (``inputs``, keyed by the table's input names) and camera."""

    inputs: dict[str, InputBinding]
    cameras: dict[str, CameraTopics]
    table: FeatureTable = PIPER_TABLE
    fmt: str = "lerobot"
    raw_quest: str | None = None
    provenance: str | None = ARM_PROVENANCE
    hello: str | None = QUEST_HELLO
    episode_events: str | None = EVENTS_TOPIC
    # several arms: each arm's provenance topic (``provenance`` is None then)
    arm_provenance: dict[str, str | None] = dataclasses.field(default_factory=dict)

    def provenance_topics(self) -> dict[str | None, str]:
        """Each arm's provenance topic that is recorded (key None for one arm)."""
        if self.table.arms:
            return {a: t for a, t in self.arm_provenance.items() if t}
        return {None: self.provenance} if self.provenance else {}

    def topic(self, name: str) -> str | None:
        """The topic of input ``name``, or None when not subscribed."""
        b = self.inputs.get(name)
        return b.topic if b is not None else None

    def active(self) -> list[tuple[InputSpec, InputBinding]]:
        """The inputs this format records from a topic, in table order."""
        out = []
        for spec in self.table.inputs:
            b = self.inputs.get(spec.name)
            if self.fmt in spec.formats and b is not None and b.topic:
                out.append((spec, b))
        return out

    # message type every mapped input needs (the converter checks the bag against this)
    def required(self, depth: bool) -> dict[str, str]:
        """The message type each required topic must carry (the converter checks a bag against it)."""
        req = {b.topic: b.adapter.msg_type for spec, b in self.active() if spec.required and b.topic}
        for cam in self.cameras.values():
            req[cam.color] = "sensor_msgs/msg/Image"
            if depth:
                if not cam.depth:
                    raise ValueError("RGB-D conversion needs a depth topic for the camera")
                req[cam.depth] = "sensor_msgs/msg/Image"
        return req

    def optional(self) -> dict[str, str]:
        """The message type of each optional topic (raw headset lines, provenance, events)."""
        channels = (self.raw_quest, *self.provenance_topics().values(), self.hello, self.episode_events)
        opt = {t: "std_msgs/msg/String" for t in channels if t}
        opt.update({b.topic: b.adapter.msg_type for spec, b in self.active() if not spec.required and b.topic})
        return opt

    def _arm_dict(self, prefix: str) -> dict[str, Any]:
        js, cg = self.inputs[f"{prefix}joint_states"].adapter, self.inputs[f"{prefix}commanded_gripper"].adapter
        arm = {"provenance": self.arm_provenance.get(prefix[:-1])} if prefix else {}
        return {
            **arm,
            "joint_states": self.topic(f"{prefix}joint_states"),
            "eef_pose": self.topic(f"{prefix}eef_pose"),
            "commanded_pose": self.topic(f"{prefix}commanded_pose"),
            "commanded_gripper": self.topic(f"{prefix}commanded_gripper"),
            "joint_names": list(js.joint_names) if isinstance(js, JointStateAdapter) else None,
            "gripper_scale": js.gripper_scale if isinstance(js, JointStateAdapter) else 1.0,
            "commanded_gripper_joint": cg.name if isinstance(cg, GripperAdapter) else None,
            "commanded_gripper_scale": cg.scale if isinstance(cg, GripperAdapter) else 1.0,
        }

    def to_dict(self) -> dict[str, Any]:
        """For provenance (``source.topics``); one arm's inputs keep the layout of earlier releases.

        Several arms: each arm's inputs under ``arms.<name>``.
        """
        arms = self.table.arms
        d: dict[str, Any] = {
            **({"arms": {a: self._arm_dict(f"{a}_") for a in arms}} if arms else self._arm_dict("")),
            "cameras": {k: dataclasses.asdict(c) for k, c in self.cameras.items()},
            "raw_quest": self.raw_quest,
            "reward": self.topic("reward"),
            "provenance": self.provenance,
            "hello": self.hello,
            "episode_events": self.episode_events,
        }
        base = arms_table(self.table.arms).inputs
        extra = [s for s in self.table.inputs if s not in base]
        if extra:
            d["inputs"] = {
                s.name: {"topic": self.topic(s.name), "adapter": s.adapter, **self.inputs[s.name].adapter.options()}
                for s in extra
            }
        return d


def topic_map(fmt: str, s: RecorderConfig, mapping: str | Path | None = None) -> TopicMap:
    """The recorder's topics (as its node subscribes them), overridden by a mapping file.

    The file is ``mapping``, else the recorder's ``mapping`` parameter. A file's ``arms`` replace ``s.arms``, so the
    session record names the arms the data has.
    """
    path = mapping if mapping is not None else (s.mapping or None)
    doc = yaml.safe_load(Path(path).read_text()) or {} if path is not None else {}
    try:
        arms = parse_arms(doc["arms"]) if isinstance(doc, dict) and "arms" in doc else s.arm_names()
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    table = arms_table(arms)
    inputs = {
        spec.name: InputBinding(
            arm_topic(spec.arm, getattr(s, spec.topic_param, "")) if getattr(s, spec.topic_param, "") else None,
            make_adapter(spec.adapter),
        )
        for spec in table.inputs
    }
    tm = TopicMap(
        inputs=inputs,
        cameras=s.camera_topics(),
        table=table,
        fmt=fmt,
        raw_quest=s.raw_quest_topic if isinstance(s, LeRobotRecorderConfig) and s.save_raw_quest else None,
        provenance=s.provenance_topic or None,
        hello=s.hello_topic or None,
    )
    if arms:
        tm.provenance = None
        tm.arm_provenance = {a: arm_topic(a, s.provenance_topic) if s.provenance_topic else None for a in arms}
        s.arms = list(arms)  # a mapping's arms are the session's: its record names them
    if fmt != "rgbd":
        tm.inputs["reward"].topic = None  # the LeRobot dataset has no reward
    for spec, features in OPT_IN:  # joins the table (and the columns) only when it has a topic
        where = f"{path}: {spec.name}"
        topic = (
            _topic(doc[spec.name], where)
            if isinstance(doc, dict) and spec.name in doc
            else getattr(s, spec.topic_param, "") or None
        )
        if topic and fmt in spec.formats:
            tm.table = tm.table.extended(spec, *features)
            tm.inputs[spec.name] = InputBinding(topic, make_adapter(spec.adapter, None, where))
    if path is not None:
        apply_mapping(tm, doc, str(path), s)
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
    """Apply a mapping file's document ``doc`` (read from ``src``) to ``tm``; ValueError naming the key."""
    base = arms_table(tm.table.arms).inputs
    arm_channels = {f"{a}_provenance": a for a in tm.table.arms}
    channels = [c for c in CHANNELS if not (tm.table.arms and c == "provenance")]  # several arms: one per arm
    known = {
        *(spec.name for spec in base),
        *(spec.name for spec, _ in OPT_IN),
        "arms",
        "cameras",
        "inputs",
        *channels,
        *arm_channels,
    }
    if not isinstance(doc, dict) or set(doc) - known:
        raise ValueError(
            f"{src}: unknown mapping keys {sorted(set(doc) - known) if isinstance(doc, dict) else doc}"
            f" (known: {sorted(known)})"
        )
    for spec in base:
        if spec.name in doc:
            v = doc[spec.name]
            b = tm.inputs[spec.name]
            b.topic = _topic(v, f"{src}: {spec.name}")
            if isinstance(v, dict):
                b.adapter = make_adapter(spec.adapter, v, f"{src}: {spec.name}")
    for key in channels:
        if key in doc:
            setattr(tm, key, _topic(doc[key], f"{src}: {key}"))
    for key, arm in arm_channels.items():
        if key in doc:
            tm.arm_provenance[arm] = _topic(doc[key], f"{src}: {key}")
    if "cameras" in doc:
        cams = doc["cameras"]
        if not isinstance(cams, dict) or not cams:
            raise ValueError(f"{src}: cameras must map camera names to {{color: ..., depth: ...}}")
        out = {}
        for name, c in cams.items():
            if not isinstance(c, dict) or "color" not in c:
                raise ValueError(f"{src}: camera {name!r} needs a color topic")
            h, w = s.camera_size(name)
            color = _topic(c["color"], f"{src}: cameras.{name}.color")
            assert color is not None
            out[str(name)] = CameraTopics(
                color,
                _topic(c.get("depth"), f"{src}: cameras.{name}.depth"),
                int(c.get("height", h)),
                int(c.get("width", w)),
            )
        tm.cameras = out
    for name, entry in (doc.get("inputs") or {}).items():
        add_extra_input(tm, str(name), entry, f"{src}: inputs.{name}")
    for spec in tm.table.inputs:
        if spec.required and tm.fmt in spec.formats and not tm.topic(spec.name):
            raise ValueError(f"{src}: {spec.name} cannot be null (every row needs it)")


def add_extra_input(tm: TopicMap, name: str, entry: Any, where: str) -> None:
    """One extra input from a mapping entry: its table entry (input + one feature) and its binding."""
    if not isinstance(entry, dict) or "adapter" not in entry or "topic" not in entry:
        raise ValueError(f"{where}: needs at least {{topic: /..., adapter: {{joint_state|pose|...}}}}")
    unknown = set(entry) - {
        "topic",
        "adapter",
        "column",
        "names",
        "required",
        "rgbd",
        "combined",
        "name",
        "scale",
        "gripper_scale",
    }  # the last three: adapter options
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    adapter = make_adapter(str(entry["adapter"]), entry, where)
    column = entry.get("column", f"observation.{name}")
    names = tuple(str(n) for n in entry.get("names", adapter.names))
    default_role = "state" if column is None or str(column).startswith("observation.") else None
    spec = InputSpec(name, str(entry["adapter"]), adapter.dim, required=bool(entry.get("required", True)))
    feature = Feature(
        name,
        name,
        0,
        adapter.dim,
        None if column is None else str(column),
        names,
        rgbd=entry.get("rgbd", default_role),
        combined=entry.get("combined"),
    )
    try:
        tm.table = tm.table.extended(spec, feature)
        if feature.column is not None:
            from piper_recorder.lerobot.format.features import lerobot_features

            seen: set[tuple[str | None, str]] = set()
            for f in lerobot_features(tm.table):
                f.validate()
                for sl in f.slices():  # modality.json names one slice per group and name
                    if (f.group, sl[0]) in seen:
                        raise ValueError(f"modality name {f.group}.{sl[0]} is taken; choose another column")
                    seen.add((f.group, sl[0]))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    tm.inputs[name] = InputBinding(_topic(entry["topic"], f"{where}.topic"), adapter)

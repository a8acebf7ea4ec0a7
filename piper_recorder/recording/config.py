"""The recorders' parameters, writer settings and session record: one ROS-free definition for both paths.

The recorder nodes declare these dataclasses as ROS parameters (``declare_config``); the rosbag converter loads
the same classes from the same parameter files (``load_config``) and builds its writers and session record with
the same functions, so a bag converts with exactly the settings the live recorder used. The converter differs
only by explicit arguments: cameras from a mapping file (``cameras``), no real-time deadline (``offline``), and
its own producer name.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.assembly.assembler import DEFAULT_LATENESS_S, DEFAULT_TIMESTAMP_MODE
from piper_recorder.errors import RgbdError
from piper_recorder.features import PIPER_TABLE, FeatureTable
from piper_recorder.features.table import arms_table
from piper_recorder.names import (
    ARM_PROVENANCE,
    CAMERA,
    COLOR_TOPIC_PATTERN,
    COMMANDED_GRIPPER,
    COMMANDED_POSE,
    DEPTH_TOPIC_PATTERN,
    EEF_POSE,
    JOINT_STATES,
    LEROBOT_RECORDER,
    QUEST_HELLO,
    QUEST_RAW,
    REWARD,
    RGBD_RECORDER,
    arm_topic,
    camera_topic,
    check_topic_pattern,
    parse_arms,
)
from piper_recorder.params.derived import effective_params
from piper_recorder.params.params_file import node_params, read_params_file

from .verdict import VerdictConfig

if typing.TYPE_CHECKING:
    from piper_recorder.lerobot.writer import WriterConfig
    from rgbd_writer import RgbdConfig

UNKNOWN = "unknown"
CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
IMPEDANCE_KEYS = ("kp", "kd", "t_ff", "gravity_ff")


@dataclass(frozen=True)
class CameraTopics:
    """Where one camera's frames come from and their configured size."""

    color: str
    depth: str | None = None
    height: int = CAMERA.height
    width: int = CAMERA.width


def task_problem(task: Any) -> str | None:
    """Why ``task`` cannot label an episode, or None.

    Both recorder nodes refuse the same tasks (at ``ros2 param set`` and at start_episode), so a start refused by one
    is refused by the other and the LeRobot and RGB-D datasets keep the same episode numbers.
    """
    if not isinstance(task, str) or not task.strip():
        return f"task must be a non-blank string, got {task!r}"
    return None


@dataclass
class RecorderConfig:
    """Parameters both recorders share (each recorder's config class extends this)."""

    node_name: ClassVar[str]
    # The only parameter a running recorder reads again (at every start_episode); every other one is
    # read-only once the node runs (declare_config), since a change could not take effect.
    runtime_params: ClassVar[frozenset[str]] = frozenset({"task"})

    task: str = ""  # read again at every start_episode (ros2 param set)
    fps: float = float(CAMERA.fps)
    timestamp_mode: str = DEFAULT_TIMESTAMP_MODE  # nominal | capture
    lateness_s: float = DEFAULT_LATENESS_S  # a row is assembled once its time + this has passed
    stale_s: float = 0.25  # inputs older than this at a row's time are counted stale
    max_episode_s: float = 600.0  # auto-stop; 0 = unlimited
    # rows wait this long more before they go to the writer, so a stop stamped up to lateness_s + this
    # before its request is handled (a headset press: teleop, DDS and a loaded machine in between;
    # stop_episode_at) still ends the episode exactly there; only delays the writer, costs no CPU
    stop_reach_s: float = 0.1
    on_shutdown: str = "save"  # save | discard the episode in flight on SIGINT/SIGTERM
    camera_height: int = CAMERA.height
    camera_width: int = CAMERA.width
    camera_serials: list[str] = field(
        default_factory=list
    )  # per camera, for provenance (launchers: each camera's section's)
    image_topic_pattern: str = COLOR_TOPIC_PATTERN  # names: one placeholder, {cam}
    image_reliability: str = "reliable"  # reliable | best_effort
    joint_states_topic: str = JOINT_STATES
    eef_topic: str = EEF_POSE
    commanded_pose_topic: str = COMMANDED_POSE
    commanded_gripper_topic: str = COMMANDED_GRIPPER
    # several arms (launchers: piper_launch.arms): their names, each arm's topics above under its namespace
    # (/left/arm/joint_states) and its columns named for it (observation.left_arm_joint); empty: one arm
    arms: list[str] = field(default_factory=list)
    mapping: str = ""  # a mapping file (recording.inputs): input topics, joint names,
    # gripper scales, extra inputs; "" = the topics above as they are
    provenance_topic: str = ARM_PROVENANCE
    hello_topic: str = QUEST_HELLO
    provenance_wait_s: float = 2.0  # at the first start_episode, wait this long for /arm/provenance
    status_hz: float = 2.0
    # a frame that waited longer than this for the writer thread is dropped and counted
    # (frames_dropped_writer_behind): a recorder that cannot keep up sheds frames instead of growing a
    # backlog that stop_episode would wait for (recording.worker); ~/status says falling_behind at half
    writer_max_lag_s: float = 2.0
    # the save-time integrity verdict's thresholds: ROS parameters verdict.* (recording.verdict,
    # declared by the node with that prefix; read from a parameter file's verdict.* keys by load_config)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)

    def check_runtime(self, name: str, value: Any) -> str | None:
        """Why a running recorder refuses ``name = value`` (ros2 param set), or None."""
        return task_problem(value) if name == "task" else f"{name} cannot change at run time"

    def camera_list(self) -> list[str]:
        """The recorded cameras, in order."""
        raise NotImplementedError

    def camera_size(self, camera: str) -> tuple[int, int]:
        """(height, width) of a camera's frames."""
        return self.camera_height, self.camera_width

    def camera_topics(self) -> dict[str, CameraTopics]:
        """Each camera's topics and size, as the node subscribes them."""
        return {
            cam: CameraTopics(camera_topic(self.image_topic_pattern, cam), None, *self.camera_size(cam))
            for cam in self.camera_list()
        }

    def arm_names(self) -> tuple[str, ...]:
        """The arms' names (``names.parse_arms``): () for one arm."""
        return parse_arms(self.arms)

    def provenance_topics(self) -> dict[str | None, str]:
        """Each arm's provenance topic (key None for one arm)."""
        arms: tuple[str | None, ...] = self.arm_names() or (None,)
        return {a: arm_topic(a, self.provenance_topic) for a in arms}

    def assembly(self, cameras: Sequence[str] | None = None, table: FeatureTable = PIPER_TABLE) -> AssemblyConfig:
        """``table``: the feature table with any extra inputs of the mapping (``TopicMap.table``)."""
        return AssemblyConfig(
            fps=self.fps,
            cameras=tuple(self.camera_list() if cameras is None else cameras),
            timestamp_mode=self.timestamp_mode,
            lateness_s=self.lateness_s,
            stale_s=self.stale_s,
            table=table,
        )

    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter for a bad value."""
        arms_table(self.arm_names())
        for cam in self.camera_list():  # names go into topic names and file paths: never "../x" or "a/b"
            if not CAMERA_NAME.fullmatch(cam):
                raise ValueError(
                    f"camera name {cam!r} must be a plain identifier (letters, digits, '_', starting with a letter)"
                )
        self.assembly().validate()
        if self.on_shutdown not in ("save", "discard"):
            raise ValueError(f"on_shutdown must be 'save' or 'discard', got {self.on_shutdown!r}")
        if self.image_reliability not in ("reliable", "best_effort"):
            raise ValueError(f"image_reliability must be 'reliable' or 'best_effort', got {self.image_reliability!r}")
        if self.max_episode_s < 0 or self.status_hz <= 0 or self.provenance_wait_s < 0:
            raise ValueError("max_episode_s and provenance_wait_s must be >= 0, status_hz > 0")
        if not 0 <= self.stop_reach_s <= 5:
            raise ValueError(f"stop_reach_s must be in [0, 5], got {self.stop_reach_s}")
        if not self.writer_max_lag_s > 0:
            raise ValueError(f"writer_max_lag_s must be > 0, got {self.writer_max_lag_s}")
        if self.max_episode_s * self.fps > 2**24:
            raise ValueError("max_episode_s too long for float32 timestamps on the 1/fps grid")
        if self.camera_height <= 0 or self.camera_width <= 0:
            raise ValueError("camera_height and camera_width must be positive")
        if self.camera_serials and len(self.camera_serials) != len(self.camera_list()):
            raise ValueError(f"camera_serials needs one entry per camera {self.camera_list()}")
        check_topic_pattern("image_topic_pattern", self.image_topic_pattern)

    # ---- session record parts ------------------------------------------------------------------
    def recording_record(self, recorder: str, output: str | None = None) -> dict[str, Any]:
        """The ``recording`` block; ``output``: where the data went if not the configured root/path."""
        return {
            "recorder": recorder,
            "fps": self.fps,
            "timestamp_mode": self.timestamp_mode,
            "lateness_s": self.lateness_s,
            "stale_s": self.stale_s,
            "max_episode_s": self.max_episode_s,
            **({"arms": list(self.arm_names())} if self.arms else {}),
        }

    def camera_record(self, cameras: Mapping[str, CameraTopics]) -> dict[str, Any]:
        """The cameras' part of the session record: each camera's topics and size."""
        serials = self.camera_serials if len(self.camera_serials) == len(cameras) else [UNKNOWN] * len(cameras)
        return {
            cam: {
                "serial": serial,
                "topic": c.color,
                "profile": {"width": c.width, "height": c.height, "fps": self.fps, "encoding": "rgb8"},
            }
            for (cam, c), serial in zip(cameras.items(), serials)
        }


@dataclass
class LeRobotRecorderConfig(RecorderConfig):
    """The LeRobot recorder's parameters.

    ``encoder_max_block_s``: how long a frame may wait for space in its camera's encoder queue before it is dropped
    (``VideoConfig.max_block_s``). The wait happens on the recorder's writer thread, never in a ROS callback, so a
    long one only holds back what is queued behind it (in memory: 0.9 MB a 640x480 frame) and the stop-to-saved
    time. Long enough, it rides out a machine that stalls for a moment without losing a frame (in nominal mode every
    lost frame breaks frames == rows); a machine that cannot keep up for that long still drops frames, each counted
    in episodes.jsonl (``frames_rejected_by_encoder``, ``video_dropped_frames.queue_full``).
    """

    node_name: ClassVar[str] = LEROBOT_RECORDER

    root: str = "lerobot_dataset"
    cameras: list[str] = field(default_factory=lambda: ["cam_front", "cam_wrist"])  # launchers: piper_launch.cameras
    camera_heights: list[int] = field(default_factory=list)  # per camera; empty = camera_height for all
    camera_widths: list[int] = field(default_factory=list)
    raw_quest_topic: str = QUEST_RAW
    save_raw_quest: bool = True
    robot_type: str = "agilex_piper"
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    crf: int = 23
    preset: str = "veryfast"
    gop: int = 0  # 0 = the writer's measured default
    encoder_max_block_s: float = 2.0  # wait for encoder queue space, then drop (see the class docstring)
    chunks_size: int = 1000
    rotation_type: str = "quat_wxyz"  # or "quaternion" (GR00T N1.5)
    combined_columns: bool = True
    on_binding_change: str = "warn"  # warn | refuse
    lerobot_version: str = "v2.0"  # v2.0 | v2.1 (adds meta/episodes_stats.jsonl)
    actor_topic: str = ""  # who acted (/policy/actor) -> column complementary_info.actor;
    # "" = no column (piper-launch sets it when the policy node runs)

    def camera_list(self) -> list[str]:
        """The recorded cameras, in order."""
        return list(self.cameras)

    def camera_size(self, camera: str) -> tuple[int, int]:
        """Per-camera size if configured; a camera not in ``cameras`` (converter mapping) gets the default."""
        i = self.cameras.index(camera) if camera in self.cameras else -1
        return (
            self.camera_heights[i] if self.camera_heights and i >= 0 else self.camera_height,
            self.camera_widths[i] if self.camera_widths and i >= 0 else self.camera_width,
        )

    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter for a bad value."""
        super().validate()
        if not self.root:
            raise ValueError("root must be a directory path")
        for name in ("camera_heights", "camera_widths"):
            v = getattr(self, name)
            if v and (len(v) != len(self.cameras) or min(v) <= 0):
                raise ValueError(f"{name} needs one positive entry per camera {self.cameras}")
        if self.on_binding_change not in ("warn", "refuse"):
            raise ValueError(f"on_binding_change must be 'warn' or 'refuse', got {self.on_binding_change!r}")
        if self.rotation_type not in ("quat_wxyz", "quaternion"):
            raise ValueError(f"rotation_type must be 'quat_wxyz' or 'quaternion', got {self.rotation_type!r}")
        if self.actor_topic and not self.actor_topic.startswith("/"):
            raise ValueError(f"actor_topic must be an absolute topic name or empty, got {self.actor_topic!r}")
        if self.lerobot_version not in ("v2.0", "v2.1"):
            raise ValueError(f"lerobot_version must be 'v2.0' or 'v2.1', got {self.lerobot_version!r}")
        if self.gop < 0 or not 0 <= self.crf <= 51 or self.chunks_size <= 0:
            raise ValueError("gop must be >= 0, crf in 0..51, chunks_size > 0")
        if self.encoder_max_block_s < 0:
            raise ValueError(f"encoder_max_block_s must be >= 0, got {self.encoder_max_block_s}")
        if not float(self.fps).is_integer():
            raise ValueError(f"fps must be a whole number for LeRobot, got {self.fps}")

    def recording_record(self, recorder: str, output: str | None = None) -> dict[str, Any]:
        """The recording settings for the session record."""
        return {
            **super().recording_record(recorder),
            "root": self.root if output is None else output,
            "video": {
                "codec": self.codec,
                "pix_fmt": self.pix_fmt,
                "crf": self.crf,
                "preset": self.preset,
                "gop": self.gop or "writer default",
                "bf": 0,
            },
            "rotation_type": self.rotation_type,
            "combined_columns": self.combined_columns,
            "lerobot_version": self.lerobot_version,
            "save_raw_quest": self.save_raw_quest,
        }


@dataclass
class RgbdRecorderConfig(RecorderConfig):
    """The RGB-D recorder's parameters: one camera, its depth codec and the file."""

    node_name: ClassVar[str] = RGBD_RECORDER

    path: str = "rgbd.hdf5"
    camera: str = "cam_front"  # launchers: the first of piper_launch.cameras
    depth_topic_pattern: str = DEPTH_TOPIC_PATTERN
    reward_topic: str = REWARD  # optional; rewards are 0 without it
    rgb_jpeg_quality: int = 88
    depth_codec: str = "jpeg2000"  # jpeg2000 | jpeg2000_strict | htj2k (needs an imagecodecs with HTJ2K)
    depth_min_m: float = 0.1
    depth_max_m: float = 6.0

    def camera_list(self) -> list[str]:
        """The one recorded camera."""
        return [self.camera]

    def camera_topics(self) -> dict[str, CameraTopics]:
        """The one camera's colour, depth and info topics."""
        return {
            cam: dataclasses.replace(c, depth=camera_topic(self.depth_topic_pattern, cam))
            for cam, c in super().camera_topics().items()
        }

    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter for a bad value."""
        if not self.camera:
            raise ValueError("camera must name the RGB-D camera")
        super().validate()
        if not self.path.endswith((".hdf5", ".h5")):
            raise ValueError(f"path must be an .hdf5 file, got {self.path!r}")
        check_topic_pattern("depth_topic_pattern", self.depth_topic_pattern)

    def recording_record(self, recorder: str, output: str | None = None) -> dict[str, Any]:
        """The recording settings for the session record."""
        return {
            **super().recording_record(recorder),
            "path": self.path if output is None else output,
            "depth_codec": self.depth_codec,
            "rgb_jpeg_quality": self.rgb_jpeg_quality,
            "depth_min_m": self.depth_min_m,
            "depth_max_m": self.depth_max_m,
        }

    def camera_record(self, cameras: Mapping[str, CameraTopics]) -> dict[str, Any]:
        """The camera's part of the session record."""
        rec = super().camera_record(cameras)
        for cam, c in cameras.items():
            if c.depth:
                rec[cam]["depth"] = {"topic": c.depth, "encoding": "16UC1", "unit": "mm", "aligned_to": "color"}
        return rec


RECORDER_CONFIGS: dict[str, type[RecorderConfig]] = {"lerobot": LeRobotRecorderConfig, "rgbd": RgbdRecorderConfig}


# ---- writers -----------------------------------------------------------------------------------
def lerobot_writer_config(
    cfg: LeRobotRecorderConfig,
    cameras: Mapping[str, CameraTopics] | None = None,
    offline: bool = False,
    table: FeatureTable = PIPER_TABLE,
) -> WriterConfig:
    """The LeRobot ``WriterConfig`` for ``cfg`` with the columns of ``table``.

    Live, a frame waits ``encoder_max_block_s`` for the encoder; ``offline`` (the converter: no real-time deadline)
    it waits as long as needed, never dropped, and the encoder is deterministic (``VideoConfig.deterministic``): the
    same bag gives the same video whatever the engine, scheduling or retries.
    """
    from piper_recorder.lerobot.format.features import lerobot_features
    from piper_recorder.lerobot.writer import CameraSpec, WriterConfig
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig

    cams = cfg.camera_topics() if cameras is None else cameras
    video: dict[str, Any] = {
        "codec": cfg.codec,
        "pix_fmt": cfg.pix_fmt,
        "crf": cfg.crf,
        "preset": cfg.preset,
        "bf": 0,
        "max_block_s": None if offline else cfg.encoder_max_block_s,
        "deterministic": offline,
    }
    if cfg.gop:
        video["gop"] = cfg.gop
    return WriterConfig(
        fps=int(cfg.fps),
        robot_type=cfg.robot_type,
        cameras={cam: CameraSpec(height=c.height, width=c.width) for cam, c in cams.items()},
        features=lerobot_features(table),
        video=VideoConfig(**video),
        chunks_size=cfg.chunks_size,
        save_raw_quest=cfg.save_raw_quest,
        rotation_type=cfg.rotation_type,
        combined_columns=cfg.combined_columns,
        on_binding_change=cfg.on_binding_change,
        lerobot_version=cfg.lerobot_version,
    )


def rgbd_writer_config(
    cfg: RgbdRecorderConfig,
    cameras: Mapping[str, CameraTopics] | None = None,
    producer: str = RGBD_RECORDER,
    table: FeatureTable = PIPER_TABLE,
) -> RgbdConfig:
    """The ``RgbdConfig`` for ``cfg``'s one camera; ``producer`` is recorded in env_args["source"].

    Raises RgbdError where this install cannot encode ``depth_codec`` (htj2k without an imagecodecs that has it): the
    recorder and the converter say so when they start, not at their first frame.
    """
    from rgbd_writer import RgbdConfig
    from rgbd_writer.codecs import depth_profile_problem

    if problem := depth_profile_problem(cfg.depth_codec):
        raise RgbdError(f"depth_codec: {problem}")
    ((cam, c),) = (cfg.camera_topics() if cameras is None else cameras).items()
    env = {
        "source": f"piper_recorder {producer}",
        "robot": "agilex_piper",
        "fps": cfg.fps,
        "camera": cam,
        "state_terms": list(table.rgbd_keys("state")),
        "action": "commanded eef pose (x, y, z, qw, qx, qy, qz) + gripper width (m)",
    }
    if table.arms:  # several arms: every arm's pose, then every arm's gripper; each element named
        env.update(
            arms=list(table.arms),
            action=f"each arm's commanded eef pose (x, y, z, qw, qx, qy, qz), then each arm's gripper width (m); "
            f"arms in order {', '.join(table.arms)}",
            action_names=list(table.rgbd_names("action")),
        )
    return RgbdConfig(
        width=c.width,
        height=c.height,
        rgb_jpeg_quality=cfg.rgb_jpeg_quality,
        depth_codec=cfg.depth_codec,
        depth_min_m=cfg.depth_min_m,
        depth_max_m=cfg.depth_max_m,
        rgb_source=c.color,
        depth_source=c.depth or "",
        env_args=env,
    )


# ---- session record ----------------------------------------------------------------------------
def session_record(
    cfg: RecorderConfig,
    recorder: str,
    provenance: Mapping[str, Any] | None,
    hello: Any,
    cameras: Mapping[str, CameraTopics] | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """Arm provenance (the /arm/provenance JSON) + cameras + headset hello + recording settings.

    Nested so the writer's binding keys resolve: control.backend, control.impedance.{kp,kd,t_ff,
    gravity_ff}, arm.firmware, recording.fps. Anything the arm did not report is "unknown". Several arms:
    ``provenance`` maps each arm's name to its JSON, and each arm's ``control`` and ``arm`` blocks sit under
    ``arms.<name>`` (binding keys ``arms.left.control.backend``, ...).
    """
    common = {
        "cameras": cfg.camera_record(cfg.camera_topics() if cameras is None else cameras),
        "headset": hello if hello is not None else UNKNOWN,
        "recording": cfg.recording_record(recorder, output),
    }
    arms = cfg.arm_names()
    if arms:
        given = dict(provenance or {})
        return {"arms": {a: _arm_record(given.get(a)) for a in arms}, **common}
    return {**_arm_record(provenance), **common}


def _arm_record(provenance: Mapping[str, Any] | None) -> dict[str, Any]:
    """One arm's ``control`` and ``arm`` blocks from its /arm/provenance JSON."""
    p = dict(provenance or {})
    return {
        "control": {"backend": p.get("backend", UNKNOWN), "impedance": {k: p.get(k, UNKNOWN) for k in IMPEDANCE_KEYS}},
        "arm": {
            "firmware": p.get("firmware", UNKNOWN),
            "model": p.get("arm_model", UNKNOWN),
            "can_channel": p.get("can_channel", UNKNOWN),
            "sdk_version": p.get("sdk_version", UNKNOWN),
            "provenance": p or UNKNOWN,
        },
    }


# ---- parameter files ---------------------------------------------------------------------------
C = TypeVar("C", bound=RecorderConfig)


def load_config(cls: type[C], params_file: str | Path | None = None, node: str | None = None) -> C:
    """``cls`` with the defaults updated from a ROS 2 parameter file, then ``validate()``.

    The file's ``/**`` and ``<node>`` sections (``ros__parameters``) and what the node derives from the file's
    cameras (``params.derived``: the launchers give the live node the same), read with the rules ``declare_config``
    applies. Raises ValueError naming the file and the parameter for unknown names, wrong types and bad values.
    """
    node = node or cls.node_name
    where = f"{params_file}: {node}" if params_file is not None else node
    values: dict[str, Any] = {}
    if params_file is not None:
        doc = read_params_file(params_file)
        try:
            values = node_params(effective_params(doc), node)
        except ValueError as exc:
            raise ValueError(f"{params_file}: {exc}") from exc
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - {"verdict"}
    prefix = "verdict."
    vhints = typing.get_type_hints(VerdictConfig)
    vvalues = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
    values = {k: v for k, v in values.items() if not k.startswith(prefix)}
    unknown = sorted(set(values) - names) + sorted(prefix + k for k in set(vvalues) - set(vhints))
    if unknown:
        raise ValueError(f"{where}: unknown parameters {unknown}")
    try:
        verdict = VerdictConfig(
            **{k: coerce_param(prefix + k, vhints[k], v) for k, v in vvalues.items() if v is not None}
        )
        verdict.validate()
        cfg = cls(**{k: coerce_param(k, hints[k], v) for k, v in values.items() if v is not None}, verdict=verdict)
        cfg.validate()
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    return cfg


def coerce_param(name: str, typ: Any, value: Any) -> Any:
    """A parameter value (from YAML or from rcl) -> the field's type, as rcl types a parameter.

    Ints pass for floats, any non-string sequence for a list (None for an empty one); nothing else converts. The one
    rule for recorder nodes (``declare_config``) and the bag converter (``load_config``).
    """
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typing.get_origin(typ) is list and not isinstance(value, (str, bytes)):
        (inner,) = typing.get_args(typ)
        if value is None:
            return []
        try:
            items = list(value)
        except TypeError:
            items = None
        if items is not None:
            return [coerce_param(name, inner, v) for v in items]
    if typ in (bool, int, str) and type(value) is typ:
        return value
    raise ValueError(f"parameter '{name}': expected {getattr(typ, '__name__', typ)}, got {value!r}")

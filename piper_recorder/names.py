"""The project's names, stated once: nodes, topics, services, image feature keys, the camera profile.

Camera and headset topic patterns take one placeholder each (``{cam}``, ``{device}``). Everything imports
these from here, so a rename is one edit; ``test_module_graph`` forbids the image-feature prefix, the camera
topic suffixes and the graph's topic and service names as literals anywhere else. Every node that follows
cameras takes the same ``image_topic_pattern`` parameter with the same default, so a camera namespace is
set the same way for every image consumer. A leaf: imports nothing of the project.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---- nodes (the names the launchers start them under) ------------------------------------------------
LEROBOT_RECORDER = "lerobot_recorder"
RGBD_RECORDER = "rgbd_recorder"
RECORDER_NODES = (LEROBOT_RECORDER, RGBD_RECORDER)
QUEST_VIDEO_NODE = "quest_video"
TELEOP_NODE = "teleop"
POLICY_NODE = "policy"
REPLAY_NODE = "replay"
DASHBOARD_NODE = "dashboard"
# the simulated graph's camera process: it runs every sim camera as a node of its own (nodes/sim_cameras.py)
SIM_CAMERAS_NODE = "sim_cameras"
PIPER_ARM_NODE = "piper_arm"  # one per arm with several arms, each under its arm's namespace (``node_key``)
STATUS = "~/status"  # every node's String JSON status, under its own name


def node_key(name: str, namespace: str = "") -> str:
    """How the graph names a node: ``piper_arm``, or ``left/piper_arm`` under an arm's namespace.

    ``namespace`` as ROS reports it (``/``, ``/left``) or as a launcher sets it (``left``).
    """
    ns = namespace.strip("/")
    return f"{ns}/{name}" if ns else name


def node_topic(node: str, name: str) -> str:
    """The full name of node ``node``'s private topic or service ``name`` (``~/status``, ``start_episode``).

    The node sits in the root namespace, as the launchers start it: ``node_topic("teleop", STATUS)`` is
    ``/teleop/status``.
    """
    return f"/{node}/{name.removeprefix('~/')}"


# ---- arm (piper_arm publishes, teleop / policy / replay command) ----------------------------------
JOINT_STATES = "/arm/joint_states"
EEF_POSE = "/arm/eef_pose"
COMMANDED_POSE = "/arm/commanded_pose"
COMMANDED_GRIPPER = "/arm/commanded_gripper"
TARGET_POSE = "/arm/target_pose"
TARGET_GRIPPER = "/arm/target_gripper"
# joint names: /arm/joint_states carries ARM_JOINTS; the gripper topics (target, commanded) GRIPPER_JOINTS
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 7)) + ("gripper",)
GRIPPER_JOINTS = ("gripper",)
ARM_STATUS = "/arm/status"
ARM_PROVENANCE = "/arm/provenance"
# Several arms: each arm's nodes and topics live under the arm's namespace (``/left/arm/joint_states``); one arm
# (no names) keeps the names above. An arm name is a ROS namespace token and a dataset column prefix. Two arms
# driven by the headset are named for the hands (the hand of the same name drives each).
BIMANUAL_ARMS = ("left", "right")
_ARM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def parse_arms(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The arm names of ``"left,right"`` (or a list of names); ``()`` for one arm (``""``, ``[]``).

    ValueError for a name that is not a lower-case ROS namespace token, a duplicate, or a single name (one arm
    keeps the unprefixed names).
    """
    parts = value.split(",") if isinstance(value, str) else list(value)
    arms = tuple(str(a).strip() for a in parts if str(a).strip())
    bad = [a for a in arms if not _ARM_NAME.match(a) or a == "arm"]
    if bad:
        raise ValueError(f"arms: names must be lower-case namespace tokens other than 'arm', got {bad}")
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms: each name once, got {list(arms)}")
    if len(arms) == 1:
        raise ValueError(f"arms: name two or more arms (one arm keeps the unprefixed names), got {list(arms)}")
    return arms


def in_namespace(name: str) -> str:
    """``name`` relative to its node's namespace (``/arm/enable`` -> ``arm/enable``).

    A node in the root namespace (one arm) resolves it to ``name``; one started under an arm's namespace
    (``-r __ns:=/left``) to the arm's (``arm_topic``).
    """
    return name.lstrip("/")


def arm_topic(arm: str | None, name: str) -> str:
    """Topic or service ``name`` of arm ``arm``: under its namespace (``/left/arm/enable``); unchanged for None."""
    if not arm:
        return name
    return f"/{arm}{name}" if name.startswith("/") else f"/{arm}/{name}"


# ---- headset (quest_bridge) and the recorders' events ----------------------------------------------
QUEST_HELLO = "/quest/hello"
QUEST_RAW = "/quest/raw"
QUEST_HAPTIC = "/quest/haptic"
QUEST_COMMAND = "/quest/command"  # quest_video's panel commands, relayed by quest_bridge
EPISODE_EVENTS = "/episode_events"
DIAGNOSTICS = "/diagnostics"  # ROS's diagnostics topic: quest_bridge's link health
REWARD = "/reward"  # optional (rgbd_recorder: rewards are 0 without it)

# The headset's tracked devices, one placeholder name, ``{device}``: /quest/head/pose, /quest/right/joy.
DEVICE_PLACEHOLDER = "{device}"
QUEST_DEVICES = ("head", "left", "right")
QUEST_HANDS = ("left", "right")
QUEST_POSE_PATTERN = f"/quest/{DEVICE_PLACEHOLDER}/pose"  # head and hands (PoseStamped)
QUEST_JOY_PATTERN = f"/quest/{DEVICE_PLACEHOLDER}/joy"  # hands (Joy: buttons, trigger, squeeze, stick)


def quest_topic(pattern: str, device: str) -> str:
    """The topic of headset device ``device`` (head, left, right) under ``pattern``."""
    return pattern.format(device=device)


# ---- teleop and policy -------------------------------------------------------------------------------
TELEOP_STATUS = node_topic(TELEOP_NODE, STATUS)  # clutch, limits, input (read by policy, dashboard, quest_video)
POLICY_ACTOR = "/policy/actor"  # who acts (policy | operator), latched: the recorders' actor column
POLICY_PROVENANCE = "/policy/provenance"  # the policy's identity, latched: the recorders' session record

# ---- services: std_srvs/Trigger unless said; a name without a leading '/' is under its node's name --
START_EPISODE = "start_episode"  # each recorder's: /lerobot_recorder/start_episode, ...
STOP_EPISODE = "stop_episode"
DISCARD_EPISODE = "discard_episode"
DELETE_LAST_EPISODE = "delete_last_episode"
LABEL_EPISODE = "label_episode"  # diagnostic_msgs/srv/AddDiagnostics: a JSON label in
STOP_EPISODE_AT = "stop_episode_at"  # AddDiagnostics too: {"end_ns": N}, the stop's time
RECORDER_SERVICES = (START_EPISODE, STOP_EPISODE, DISCARD_EPISODE, DELETE_LAST_EPISODE)
ARM_ENABLE = "/arm/enable"
ARM_DISABLE = "/arm/disable"
ARM_GO_HOME = "/arm/go_home"
POLICY_SERVICES = ("start", "stop", "pause", "resume")  # the policy node's ~/start ... (a rollout)
REPLAY_SERVICES = ("play", "stop")  # the replay node's ~/play, ~/stop


@dataclass(frozen=True)
class Service:
    """One service of the graph, for the generated reference (docs/reference/services.md)."""

    name: str
    node: str
    type: str
    does: str


TRIGGER = "std_srvs/srv/Trigger"
SERVICES = (
    Service(START_EPISODE, "lerobot_recorder, rgbd_recorder", TRIGGER, "start an episode of the node's `task`"),
    Service(
        STOP_EPISODE,
        "lerobot_recorder, rgbd_recorder",
        TRIGGER,
        "end the episode at the request's arrival and save it; the message says rows and verdict",
    ),
    Service(DISCARD_EPISODE, "lerobot_recorder, rgbd_recorder", TRIGGER, "drop the episode in flight"),
    Service(
        DELETE_LAST_EPISODE, "lerobot_recorder, rgbd_recorder", TRIGGER, "delete the last saved episode of this session"
    ),
    Service(
        LABEL_EPISODE,
        "lerobot_recorder, rgbd_recorder",
        "diagnostic_msgs/srv/AddDiagnostics",
        "outcome label (success / failure, a note) for the episode in flight or the last saved one: "
        "a JSON object in the request's `load_namespace` ([Curation](../curation.md))",
    ),
    Service(
        STOP_EPISODE_AT,
        "lerobot_recorder, rgbd_recorder",
        "diagnostic_msgs/srv/AddDiagnostics",
        "end the episode at `end_ns` (ROS-clock ns; teleop sends the headset press's capture stamp), "
        'a JSON `{"end_ns": N}` in `load_namespace`, and save it; refused for a time before the '
        "episode's start (a stop of an earlier episode), never later than the request's arrival",
    ),
    Service(ARM_ENABLE, "piper_arm", TRIGGER, "enable the drivers (waits for them)"),
    Service(ARM_DISABLE, "piper_arm", TRIGGER, "disable the drivers"),
    Service(ARM_GO_HOME, "piper_arm", TRIGGER, "move to the home pose"),
    *(Service(s, "policy", TRIGGER, f"{s} the policy's rollout") for s in POLICY_SERVICES),
    *(
        Service(s, "replay", TRIGGER, "play an episode on the arm" if s == "play" else "stop the replay")
        for s in REPLAY_SERVICES
    ),
)


# ---- cameras: one placeholder name for every pattern -------------------------------------------------
# A camera node publishes these under its own namespace (realsense2_camera, sim_camera: ``~/color/...``).
COLOR_IMAGE = "color/image_raw"
COLOR_INFO = "color/camera_info"
DEPTH_IMAGE = "aligned_depth_to_color/image_raw"
DEPTH_INFO = "aligned_depth_to_color/camera_info"
CAMERA_PLACEHOLDER = "{cam}"
COLOR_TOPIC_PATTERN = f"/{CAMERA_PLACEHOLDER}/{COLOR_IMAGE}"
DEPTH_TOPIC_PATTERN = f"/{CAMERA_PLACEHOLDER}/{DEPTH_IMAGE}"
CAMERA_STATUS_TOPIC_PATTERN = node_topic(CAMERA_PLACEHOLDER, STATUS)  # sim_camera's published rate
# The QoS a camera publishes with, as realsense2_camera takes it: the name of one of rmw's predefined profiles
# (its <stream>_qos and <stream>_info_qos parameters accept nothing else; the aligned depth goes out with the
# colour stream's). The robot launch sets them on every realsense2_camera and sim_camera publishes with the
# same, so the graph tests measure what a real camera delivers. Images: DEFAULT, reliable keep-last 10, a
# writer history bounded in memory; the driver's own default, SYSTEM_DEFAULT, is a keep-last 1 writer on Fast
# DDS. camera_info: DEFAULT too. docs/running.md, "The RealSense driver", gives the measurements behind it.
CAMERA_IMAGE_QOS = "DEFAULT"
CAMERA_INFO_QOS = "DEFAULT"
_CAMERA_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def check_topic_pattern(name: str, pattern: str) -> None:
    """ValueError unless ``pattern`` names its camera with ``{cam}`` and nothing else to fill in."""
    if CAMERA_PLACEHOLDER not in pattern:
        raise ValueError(f"{name} must contain '{CAMERA_PLACEHOLDER}', got {pattern!r}")
    try:
        pattern.format(cam="x")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"{name}: only '{CAMERA_PLACEHOLDER}' may be filled in, got {pattern!r} ({exc})") from None


def camera_topic(pattern: str, cam: str) -> str:
    """The topic of camera ``cam`` under ``pattern`` (e.g. ``COLOR_TOPIC_PATTERN``)."""
    return pattern.format(cam=cam)


def camera_info_pattern(image_pattern: str) -> str:
    """The ``camera_info`` beside an image topic (the ROS image_transport convention: same namespace)."""
    return image_pattern.rpartition("/")[0] + "/camera_info"


def camera_topic_regex(pattern: str) -> re.Pattern[str]:
    """A regex matching the topics of ``pattern``; group 1 is the camera name (graph discovery)."""
    head, _, tail = pattern.partition(CAMERA_PLACEHOLDER)
    return re.compile(f"^{re.escape(head)}({_CAMERA_NAME}){re.escape(tail)}$")


# ---- dataset feature keys ----------------------------------------------------------------------------
IMAGES_PREFIX = "observation.images."


def image_key(cam: str) -> str:
    """The LeRobot feature key of camera ``cam``'s video."""
    return IMAGES_PREFIX + cam


def image_camera(key: str) -> str | None:
    """The camera of an image feature key, or None for any other key."""
    return key[len(IMAGES_PREFIX) :] if key.startswith(IMAGES_PREFIX) else None


# ---- camera profile ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CameraProfile:
    """The colour stream every layer defaults to (sim camera, recorders, writers, bag converter)."""

    width: int = 640
    height: int = 480
    fps: int = 30


CAMERA = CameraProfile()

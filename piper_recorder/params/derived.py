"""A parameter file's effective parameters: what it states once, derived for every node that follows it.

Cameras are stated once (config/sim.yaml, config/robot.yaml): their names in ``piper_launch.cameras``, each
one's serial and profile in its own section (a sim_camera's ``serial``, ``width``, ``height``; a
realsense2_camera's ``serial_no`` and colour profile, ``color_profile_key``; unstated: ``names.CAMERA``).
``derived_params`` is the one derivation: the LeRobot recorder records every camera, the RGB-D recorder the
first, quest_video shows the first ``MAX_CAMERA_PANELS``, with their serials and stated sizes. The launchers
pass it on (``graph.arguments.launch_overrides``) and the bag converter and piper-recover load it through
``effective_params``, so a recorder follows the same cameras live and offline.

A node's own list (the older per-node layout) is kept when it agrees with the cameras (it may choose among
them) and refused with a ValueError naming both places when it contradicts them, never silently replaced.
A file without ``piper_launch.cameras`` derives nothing. Pure: no ROS, no process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from piper_recorder.names import (
    CAMERA,
    DASHBOARD_NODE,
    LEROBOT_RECORDER,
    POLICY_NODE,
    QUEST_VIDEO_NODE,
    REPLAY_NODE,
    RGBD_RECORDER,
    TELEOP_NODE,
    parse_arms,
)
from piper_recorder.quest.video import MAX_CAMERA_PANELS

LAUNCH_SECTION = "piper_launch"  # not a node: what the launchers start (cameras, the simulated headset, ...)
SERIAL_KEYS = ("serial", "serial_no")  # sim_camera's, realsense2_camera's
SIZE_KEYS = ("height", "width")  # sim_camera's
COLOR_PROFILE, DEPTH_PROFILE = "rgb_camera.color_profile", "depth_module.depth_profile"  # realsense-ros >= 4.55.1
# A D405 has no RGB module: its colour stream is its stereo module's, whose profile realsense-ros reads from
# depth_module.color_profile (rgb_camera.color_profile is ignored there). A camera's section says it is a D405
# through realsense2_camera's own device_type, with which the driver also opens only a device of that name.
D405_COLOR_PROFILE = "depth_module.color_profile"
DEVICE_TYPE = "device_type"
UNKNOWN = "unknown"  # a serial no section states (the session record's word for it)
_PROFILE = re.compile(r"^\s*(\d+)\s*[x,]\s*(\d+)\s*[x,]\s*(\d+)\s*$")  # WxHxFPS (realsense-ros also takes W,H,FPS)

Doc = Mapping[str, Mapping[str, Any]]


def profile_text(width: int = CAMERA.width, height: int = CAMERA.height, fps: int = CAMERA.fps) -> str:
    """A realsense-ros profile string, ``640x480x30``; the defaults: the camera profile (``names.CAMERA``)."""
    return f"{width}x{height}x{fps}"


def is_d405(section: Mapping[str, Any]) -> bool:
    """Whether a realsense2_camera section is a D405's: its ``device_type`` names one (``d405``, any case)."""
    return re.search("d405", str(section.get(DEVICE_TYPE) or ""), re.IGNORECASE) is not None


def color_profile_key(section: Mapping[str, Any]) -> str:
    """The parameter realsense-ros reads a camera's colour profile from.

    ``D405_COLOR_PROFILE`` for a D405, ``COLOR_PROFILE`` for every other model.
    """
    return D405_COLOR_PROFILE if is_d405(section) else COLOR_PROFILE


@dataclass(frozen=True)
class CameraSection:
    """What one camera's section states of it (None: not stated)."""

    name: str
    serial: str | None = None
    serial_key: str = SERIAL_KEYS[0]
    height: int | None = None
    width: int | None = None

    @classmethod
    def of(cls, doc: Doc, name: str) -> CameraSection:
        """Camera ``name``'s section of ``doc``; ValueError for a profile it cannot use or states in the wrong key."""
        section = doc.get(name) or {}
        key = next((k for k in SERIAL_KEYS if section.get(k) not in (None, "")), SERIAL_KEYS[0])
        serial = section.get(key)
        height, width = (section.get(k) for k in SIZE_KEYS)
        profile = color_profile_key(section)
        if profile != COLOR_PROFILE and COLOR_PROFILE in section:
            raise ValueError(
                f"{name}.{COLOR_PROFILE}: {name} is a D405 ({name}.{DEVICE_TYPE} "
                f"{section[DEVICE_TYPE]!r}), whose colour profile realsense2_camera reads from "
                f"{profile}: state it there"
            )
        if profile in section:
            m = _PROFILE.match(str(section[profile]))
            if not m:
                raise ValueError(f"{name}.{profile}: expected WIDTHxHEIGHTxFPS, got {section[profile]!r}")
            width, height = int(m.group(1)), int(m.group(2))
        return cls(
            name,
            None if serial in (None, "") else str(serial),
            key,
            None if height is None else int(height),
            None if width is None else int(width),
        )

    @property
    def where(self) -> str:
        """Where the serial is stated (``section.key``), for error messages."""
        return f"{self.name}.{self.serial_key}"


def configured_cameras(doc: Doc) -> list[str]:
    """``piper_launch.cameras``: the cameras the file configures (empty: none stated)."""
    return [str(c) for c in (doc.get(LAUNCH_SECTION, {}).get("cameras") or [])]


# the nodes that take piper_launch.arms as ``arms`` (policy and replay: each arm's feedback and targets; quest_video
# and the dashboard: each arm's state shown under its name)
ARM_FOLLOWERS = (
    LEROBOT_RECORDER,
    RGBD_RECORDER,
    TELEOP_NODE,
    POLICY_NODE,
    REPLAY_NODE,
    QUEST_VIDEO_NODE,
    DASHBOARD_NODE,
)


def derived_params(
    doc: Doc, cameras: Sequence[str] | None = None, arms: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """{node: parameters} the camera- and arm-following nodes of ``doc`` get from its cameras and arms (module doc).

    ``cameras``: the cameras the graph starts (the launch argument's subset), default
    ``piper_launch.cameras``; ``arms``: the arms (the launch argument), default ``piper_launch.arms``. Only nodes
    with a section in ``doc`` get parameters. Raises ValueError when a node's own list contradicts the cameras or
    the arms.
    """
    out = _arm_params(doc, arms)
    configured = configured_cameras(doc)
    chosen = [str(c) for c in (configured if cameras is None else cameras)]
    if not configured and not chosen:
        return out
    known = {*configured, *chosen}
    cams = {c: CameraSection.of(doc, c) for c in known}

    def own_list(node: str, key: str) -> list[str]:
        value = doc[node].get(key)
        names = [] if value in (None, "") else [str(value)] if isinstance(value, str) else [str(v) for v in value]
        # a camera of the file not started (piper-launch's piper_launch.cameras is the launch argument's subset)
        cams.update({c: CameraSection.of(doc, c) for c in names if c not in cams and c in doc})
        stray = [c for c in names if c not in cams]
        if stray:
            raise ValueError(
                f"{node}.{key} names {stray}, which {LAUNCH_SECTION}.cameras {configured} does not "
                f"configure: list each camera once, in {LAUNCH_SECTION}.cameras"
            )
        return names

    if LEROBOT_RECORDER in doc:
        node, section = LEROBOT_RECORDER, doc[LEROBOT_RECORDER]
        own = own_list(node, "cameras")
        names = [c for c in own if c in chosen] if own else chosen
        if not names:
            raise ValueError(f"{node}.cameras {own} records none of the cameras started, {chosen}")
        params: dict[str, Any] = {"cameras": names}
        params.update(_serials(node, section, own or configured, names, cams))
        params.update(_lerobot_sizes(section, own or configured, names, cams))
        out.setdefault(node, {}).update(params)
    if RGBD_RECORDER in doc:
        node, section = RGBD_RECORDER, doc[RGBD_RECORDER]
        own = own_list(node, "camera")
        if chosen:
            cam = own[0] if own and own[0] in chosen else chosen[0]
            params = {"camera": cam, **_serials(node, section, own or [cam], [cam], cams)}
            params.update(_rgbd_size(section, cams[cam]))
            out.setdefault(node, {}).update(params)
    if QUEST_VIDEO_NODE in doc:  # the headset's panels: its own list among the cameras started, else the first ones
        own = own_list(QUEST_VIDEO_NODE, "cameras")
        panels = [c for c in own if c in chosen] if own else chosen[:MAX_CAMERA_PANELS]
        out.setdefault(QUEST_VIDEO_NODE, {})["cameras"] = panels  # beside its arms
    return out


def _arm_params(doc: Doc, arms: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """``arms`` for every node of ``ARM_FOLLOWERS`` in ``doc`` (none for one arm); a node's own other list refused.

    Where neither ``arms`` nor the file's ``piper_launch.arms`` states the graph's arms (a recorders' file for the
    bag converter), each node's own list stands.
    """
    launch = doc.get(LAUNCH_SECTION) or {}
    if arms is None and "arms" not in launch:
        return {}
    chosen = _named_arms(LAUNCH_SECTION, list(arms) if arms is not None else launch.get("arms"))
    out: dict[str, dict[str, Any]] = {}
    for node in ARM_FOLLOWERS:
        if node not in doc:
            continue
        own = _named_arms(node, doc[node].get("arms"))
        if own and own != chosen:
            raise ValueError(
                f"{node}.arms {list(own)} contradicts the graph's arms {list(chosen)} ({LAUNCH_SECTION}.arms): "
                f"state the arms once, in {LAUNCH_SECTION}.arms"
            )
        if chosen:
            out[node] = {"arms": list(chosen)}
    return out


def _named_arms(section: str, value: Any) -> tuple[str, ...]:
    """``names.parse_arms`` of a section's ``arms``; its ValueError names the section (``piper_launch.arms: ...``)."""
    try:
        return parse_arms(value or [])
    except ValueError as exc:
        raise ValueError(f"{section}.{exc}") from None


def effective_params(doc: Doc, cameras: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``doc`` with every node's ``derived_params`` on top of its section: what each node runs with."""
    out = {node: dict(params) for node, params in doc.items()}
    for node, params in derived_params(doc, cameras).items():
        out.setdefault(node, {}).update(params)
    return out


def _serials(
    node: str,
    section: Mapping[str, Any],
    aligned: Sequence[str],
    names: Sequence[str],
    cams: Mapping[str, CameraSection],
) -> dict[str, Any]:
    """``camera_serials`` of ``names`` from the cameras' sections.

    A node's own list (older layout, one per camera of ``aligned``) must agree with them, and stands in
    for a camera whose section has none.
    """
    own = section.get("camera_serials") or []
    stated: dict[str, str] = {}
    if own:
        if isinstance(own, str) or len(own) != len(aligned):
            raise ValueError(f"{node}.camera_serials {own!r} needs one serial per camera {list(aligned)}")
        stated = {c: str(s) for c, s in zip(aligned, own)}
    for cam, serial in stated.items():
        section_serial = cams[cam].serial
        if section_serial is not None and section_serial != serial:
            raise ValueError(
                f"{node}.camera_serials says {cam} is {serial!r}, {cams[cam].where} says "
                f"{section_serial!r}: state a serial once, in the camera's own section"
            )
    serials = [cams[c].serial or stated.get(c) for c in names]
    if all(s is None for s in serials):
        return {}
    return {"camera_serials": [s or UNKNOWN for s in serials]}


def _lerobot_sizes(
    section: Mapping[str, Any], aligned: Sequence[str], names: Sequence[str], cams: Mapping[str, CameraSection]
) -> dict[str, Any]:
    """Per-camera ``camera_heights``/``camera_widths``, when a camera or the node states sizes.

    A node's own per-camera lists (older layout) are restricted to ``names`` and checked against the cameras.
    """
    default = (int(section.get("camera_height", CAMERA.height)), int(section.get("camera_width", CAMERA.width)))
    heights, widths = section.get("camera_heights") or [], section.get("camera_widths") or []
    own = (
        dict(zip(aligned, zip(heights, widths)))
        if heights and widths and len(heights) == len(widths) == len(aligned)
        else {}
    )
    if (heights or widths) and not own:
        return {}  # malformed: the recorder's own validation names it
    sizes = []
    for cam in names:
        c = cams[cam]
        fallback = own.get(cam, default)
        size = (c.height if c.height is not None else fallback[0], c.width if c.width is not None else fallback[1])
        if cam in own and tuple(own[cam]) != size:
            raise ValueError(
                f"{LEROBOT_RECORDER}.camera_heights/camera_widths say {cam} is {own[cam][1]}x{own[cam][0]},"
                f" its section {cam} says {size[1]}x{size[0]}: state a size once, in the camera's section"
            )
        sizes.append(size)
    if not own and all(s == default for s in sizes):
        return {}
    return {"camera_heights": [h for h, _ in sizes], "camera_widths": [w for _, w in sizes]}


def _rgbd_size(section: Mapping[str, Any], cam: CameraSection) -> dict[str, Any]:
    """``camera_height``/``camera_width`` of the RGB-D camera when its section states another size."""
    out: dict[str, Any] = {}
    for key, value, default in (
        ("camera_height", cam.height, CAMERA.height),
        ("camera_width", cam.width, CAMERA.width),
    ):
        if value is None:
            continue
        if key in section and int(section[key]) != value:
            raise ValueError(
                f"{RGBD_RECORDER}.{key} {section[key]} contradicts its camera's section {cam.name} "
                f"({value}): state a size once, in the camera's section"
            )
        if value != int(section.get(key, default)):
            out[key] = value
    return out

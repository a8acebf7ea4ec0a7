"""The realsense2_camera driver as the robot graph starts it.

The parameters each camera node gets (``realsense_parameters``) and the driver version whose topics fit
``names`` (``realsense_check``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper_recorder.names import CAMERA_IMAGE_QOS, CAMERA_INFO_QOS, COLOR_IMAGE, COLOR_TOPIC_PATTERN, camera_topic
from piper_recorder.params.derived import COLOR_PROFILE, DEPTH_PROFILE, color_profile_key, profile_text

from .errors import LaunchError

# realsense-ros >= 4.55.1 reads one profile per stream (rgb_camera.color_profile, depth_module.depth_profile);
# 4.0.1 to 4.54.1 read one per module (rgb_camera.profile, depth_module.profile). Each version silently ignores
# the other's names, so a camera section's profiles are given under both. A D405's colour profile is
# depth_module.color_profile (params.derived.color_profile_key), its module's older name depth_module.profile.
REALSENSE_PROFILE_ALIASES = {COLOR_PROFILE: "rgb_camera.profile", DEPTH_PROFILE: "depth_module.profile"}


# The QoS parameters of realsense2_camera's images and camera_info (names.CAMERA_IMAGE_QOS), and the values
# they accept: the names of rmw's predefined profiles (realsense-ros ros_utils.cpp, qos_string_to_qos).
REALSENSE_QOS = {
    "color_qos": CAMERA_IMAGE_QOS,
    "depth_qos": CAMERA_IMAGE_QOS,
    "color_info_qos": CAMERA_INFO_QOS,
    "depth_info_qos": CAMERA_INFO_QOS,
}


REALSENSE_QOS_NAMES = ("SYSTEM_DEFAULT", "DEFAULT", "PARAMETER_EVENTS", "SERVICES_DEFAULT", "PARAMETERS", "SENSOR_DATA")


# What the recorders need of every realsense2_camera: colour and depth, depth aligned to colour, the
# streams synchronised, no point cloud, the QoS above. A camera's section states only its serial_no (and a
# profile, or one of these, where it differs).
REALSENSE_DEFAULTS: dict[str, Any] = {
    "enable_color": True,
    "enable_depth": True,
    "align_depth.enable": True,
    "enable_sync": True,
    "pointcloud.enable": False,
    **REALSENSE_QOS,
}


def realsense_parameters(cfg: Mapping[str, Mapping[str, Any]], camera: str) -> dict[str, Any]:
    """Parameters a ``realsense2_camera_node`` named ``camera`` gets on top of its config section.

    Its
    ``camera_name``, what the section does not state of REALSENSE_DEFAULTS and of the profile (colour:
    ``names.CAMERA``, under the model's name for it, ``params.derived.color_profile_key``; depth: the colour
    one), and each profile under the older wrappers' name too (REALSENSE_PROFILE_ALIASES). A QoS the driver
    does not know is refused (it would stop the driver when the stream starts).
    """
    section = cfg.get(camera, {})
    for key in REALSENSE_QOS:
        if key in section and section[key] not in REALSENSE_QOS_NAMES:
            raise LaunchError(
                f"{camera}.{key} {section[key]!r}: realsense2_camera takes one of {', '.join(REALSENSE_QOS_NAMES)}"
            )
    color_key = color_profile_key(section)
    color = section.get(color_key, profile_text())
    full = {**REALSENSE_DEFAULTS, color_key: color, DEPTH_PROFILE: section.get(DEPTH_PROFILE, color)}
    full.update({old: full[new] for new, old in REALSENSE_PROFILE_ALIASES.items() if new in full})
    out = {k: v for k, v in full.items() if k not in section}
    out["camera_name"] = camera
    return out


REALSENSE_PACKAGE = "realsense2_camera"


# From 4.55.1 on realsense-ros names its topics after the node (~/color/image_raw): a node named <camera> in the
# root namespace publishes /<camera>/color/image_raw. Before, they are relative to the node's namespace: every
# camera of the root namespace publishes /color/image_raw, the same topic.
REALSENSE_NODE_TOPICS = (4, 55, 1)


def realsense_version() -> tuple[tuple[int, ...], Path] | None:
    """The installed realsense2_camera's version and its package.xml, found through the ament index.

    None when it is not found there (no ROS install on the path, the driver not installed) or states none.
    """
    try:
        from ament_index_python.packages import get_package_share_directory

        xml = Path(get_package_share_directory(REALSENSE_PACKAGE)) / "package.xml"
        text = ElementTree.parse(xml).findtext("version") or ""
    except (ImportError, LookupError, OSError, ElementTree.ParseError):  # LookupError: PackageNotFoundError
        return None
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", text)
    return (tuple(int(g) for g in m.groups()), xml) if m else None


def realsense_check() -> str | None:
    """Refuse (LaunchError) a realsense2_camera whose topics would not be ``/<camera>/...``.

    ``REALSENSE_NODE_TOPICS`` states them. Returns a note when its version cannot be read, None when it fits.
    """
    found = realsense_version()
    need = ".".join(map(str, REALSENSE_NODE_TOPICS))
    ours = camera_topic(COLOR_TOPIC_PATTERN, "<camera>")
    if found is None:
        return (
            f"{REALSENSE_PACKAGE} not found through the ament index: its version was not checked (the "
            f"launch needs >= {need}, which publishes {ours})"
        )
    version, xml = found
    if version < REALSENSE_NODE_TOPICS:
        have = ".".join(map(str, version))
        raise LaunchError(
            f"{REALSENSE_PACKAGE} {have} ({xml}) publishes its topics relative to the node's "
            f"namespace: every camera started in the root namespace would publish /{COLOR_IMAGE}, "
            f"not {ours}. Install {REALSENSE_PACKAGE} >= {need} (apt: sudo apt "
            f"install --only-upgrade ros-$ROS_DISTRO-realsense2-camera; or realsense-ros from source)"
        )
    return None

"""Pip-only launcher, the plan: the same graph as launch/*.launch.py from the same config, without `launch`.

The PyPI ROS 2 wheels have rclpy but no `launch`/`ros2 launch`, so ``piper-launch`` and ``piper-demo``
use this module. It reads a ROS 2 parameter file (config/sim.yaml or config/robot.yaml), applies
``node.param=value`` overrides, writes the effective file next to the logs, and resolves every node to
the command line it runs as: ``<bin>/<console script> --ros-args -r __node:=<name> --params-file <file>``.
The ``piper_launch`` section (not a node) names the cameras and the simulated headset's settings; what
the nodes derive from the cameras (the recorders' lists and serials, quest_video's panels) is
``params.derived.derived_params``, which the bag converter's ``load_config`` applies too.

This module only plans (no process, signal or thread: a plan is checked in milliseconds, and the launch
files import it inside ``ros2 launch``); ``graph.supervisor.Graph`` runs a plan. ``Graph`` is still
importable from here, loaded on first use.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import socket
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from piper_recorder.dashboard.model import is_loopback
from piper_recorder.params.derived import (COLOR_PROFILE, DEPTH_PROFILE, LAUNCH_SECTION, color_profile_key,
                                             derived_params, profile_text)
from piper_recorder.errors import PiperError
from piper_recorder.names import (CAMERA_IMAGE_QOS, CAMERA_INFO_QOS, COLOR_IMAGE, COLOR_TOPIC_PATTERN, POLICY_ACTOR,
                                  RECORDER_NODES, camera_topic)
from piper_recorder.params.params_file import read_params_file
from piper_recorder.quest.client import DEFAULT_HOST, DEFAULT_PORT
from piper_recorder.quest.sim_server import SimConfig
from piper_recorder.quest.video import VIDEO_PORT
from piper_recorder.quest.web_server import WebConfig, port_clash
from piper_recorder.teleop.spacemouse.input import TELEOP_INPUTS

PACKAGE = "piper_recorder"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
RECORDERS = RECORDER_NODES
# Node name -> console script (pip) and ROS executable (launch files; setup.py ROS_EXECUTABLES) of the
# same entry point. Cameras are added from the config (sim_camera or realsense2_camera).
NODE_SCRIPTS = {
    "quest_bridge": "piper-quest-bridge",
    "teleop": "piper-teleop",
    "piper_arm": "piper-arm",
    "lerobot_recorder": "piper-lerobot-recorder",
    "rgbd_recorder": "piper-rgbd-recorder",
    "quest_video": "piper-quest-video",
}
SIM_CAMERA = ("sim_camera", "piper-sim-camera")
SIM_QUEST = ("sim_quest", "piper-sim-quest")
QUEST_WEB = ("quest_web", "piper-quest-web")
HEADSETS = ("native", "web", "sim")
START_ORDER = ("piper_arm", "quest_bridge", "teleop", "lerobot_recorder", "rgbd_recorder", "quest_video")


class LaunchError(PiperError, RuntimeError):
    """The graph could not be configured, started, or did not become ready."""


def install_prefixes() -> list[Path]:
    """Where this package's data files and scripts may be installed: the interpreter's prefix (pip,
    a venv) and the prefix the package itself was installed under (a colcon install runs the system
    Python, whose prefix is /usr, with the package in ``<install>/lib/python3.X/site-packages``)."""
    out = [Path(sys.prefix)]
    out += [p for p in PACKAGE_ROOT.parents[:4] if p not in out]
    return out


def config_path(mode_or_path: str) -> Path:
    """``sim``/``robot`` -> the packaged config file (source tree or installed share/); else a path."""
    if mode_or_path in ("sim", "robot"):
        candidates = [PACKAGE_ROOT / "config" / f"{mode_or_path}.yaml"]
        candidates += [p / "share" / "piper_recorder" / "config" / f"{mode_or_path}.yaml" for p in install_prefixes()]
        for c in candidates:
            if c.is_file():
                return c
        raise LaunchError(f"config/{mode_or_path}.yaml not found (looked in {', '.join(map(str, candidates))})")
    p = Path(mode_or_path)
    if not p.is_file():
        raise LaunchError(f"config file {p} does not exist")
    return p


def _read_config(path: str | Path) -> dict[str, dict[str, Any]]:
    try:
        return read_params_file(path)
    except (OSError, ValueError) as exc:
        raise LaunchError(str(exc)) from None


def apply_overrides(cfg: Mapping[str, Mapping[str, Any]], sets: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``node.param=value`` (value parsed as YAML; ``param`` may itself be dotted) -> a new config."""
    out = copy.deepcopy({k: dict(v) for k, v in cfg.items()})
    for item in sets:
        key, sep, value = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or not node or not param:
            raise LaunchError(f"--set expects node.param=value, got {item!r}")
        parsed = yaml.safe_load(value) if value != "" else ""
        section = out.setdefault(node, {})
        parts = param.split(".")
        # Nested sections (piper_launch.sim_quest.port) stay nested; dotted ROS names stay flat.
        if len(parts) > 1 and (node == LAUNCH_SECTION or isinstance(section.get(parts[0]), dict)):
            target = section
            for p in parts[:-1]:
                target = target.setdefault(p, {})
            target[parts[-1]] = parsed
        else:
            section[param] = parsed
    return out


LAUNCH_ARGUMENTS = {  # name -> description; the launch files and piper-launch take the same arguments
    "config": "parameter file (default: share/piper_recorder/config/<mode>.yaml)",
    "task": "task string for both recorders (default: from the config)",
    "root": "LeRobot dataset root (default: from the config)",
    "rgbd_path": "RGB-D HDF5 file (default: from the config)",
    "backend": "arm backend: position | impedance (default: from the config)",
    "cameras": "comma-separated cameras to start and record (default: piper_launch.cameras)",
    "policy": "start the policy node with this backend: http://host:port | gr00t://host:port | hold | "
              "replay:<root>:<episode> (default: no policy node)",
    "policy_root": "the policy's training root (default: policy.root in the config, or the replay root)",
    "dashboard": "start the read-only web dashboard: true | false (default: piper_launch.dashboard, else false)",
    "sim_headset": "sim only: start the simulated headset: true | false (default: piper_launch.sim_quest.enabled, "
                   "else true); false keeps quest_bridge's host/port (and quest_video's) for an external headset",
    "teleop_input": "what teleop follows: headset | spacemouse (default: teleop.input in the config, else headset); "
                    "spacemouse reads teleop.spacemouse.device (default auto: the first 3Dconnexion hidraw device) "
                    "and starts no headset node (quest_bridge, quest_video, the simulated headset)",
    "headset": "native | web | sim: the headset app over adb forward, the WebXR page (quest_web, "
               "piper_launch.quest_web; open it in the Quest Browser), or the simulated one (sim mode only); "
               "default: sim in sim mode (unless sim_headset is false), else native",
}
GRAPH_ARGUMENTS = ("task", "root", "rgbd_path", "backend", "cameras", "policy", "policy_root",
                   "dashboard", "sim_headset", "teleop_input", "headset")  # all but config: launch_graph's
POLICY_NODE = ("policy", "piper-policy")   # node name, console script; started only when a policy is set


def teleop_input(cfg: Mapping[str, Mapping[str, Any]],
                 overrides: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """teleop's ``input`` (the launch argument ``teleop_input`` is an override of it): with
    ``spacemouse`` the graph starts no headset node."""
    value = str({**cfg.get("teleop", {}), **(overrides or {}).get("teleop", {})}.get("input", TELEOP_INPUTS[0]))
    if value not in TELEOP_INPUTS:
        raise LaunchError(f"teleop input must be one of {', '.join(TELEOP_INPUTS)}, got {value!r}")
    return value


def policy_enabled(cfg: Mapping[str, Mapping[str, Any]],
                   overrides: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """The policy node runs when the config or the ``policy`` launch argument names a backend."""
    name = POLICY_NODE[0]
    return bool({**cfg.get(name, {}), **(overrides or {}).get(name, {})}.get("policy"))


def dashboard_params(cfg: Mapping[str, Mapping[str, Any]], dashboard: str | bool, nodes: Iterable[str],
                     overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any] | None:
    """The ``dashboard`` node's parameters on top of its config section, or None when it is off.

    ``dashboard``: the launch argument ("" = ``piper_launch.dashboard``). Unless the config sets them,
    the dashboard expects exactly the nodes the launch starts and offers the LeRobot recorder's root
    for the re-alignment view (``overrides``: the launch arguments' parameters, see ``launch_overrides``).
    """
    flag = cfg.get(LAUNCH_SECTION, {}).get("dashboard", False) if dashboard == "" else dashboard
    if str(flag).strip().lower() not in ("true", "1", "yes", "on"):
        return None
    section = cfg.get("dashboard", {})
    out: dict[str, Any] = {}
    if "nodes" not in section:
        out["nodes"] = [n for n in nodes if n != "dashboard"]
    root = {**cfg.get("lerobot_recorder", {}), **(overrides or {}).get("lerobot_recorder", {})}.get("root")
    if "roots" not in section and root:
        out["roots"] = [str(root)]
    return out


def nice_prefix(cfg: Mapping[str, Mapping[str, Any]], name: str) -> str | None:
    """``nice -n N`` for the buffered bulk work (cameras, recorders) when ``piper_launch.bulk_nice`` is set.

    Camera rendering and encoding may run at a lower CPU priority than the control chain
    (headset -> bridge -> teleop -> arm), whose stalls become frozen or jumping actions. Used by
    piper-launch and sim.launch.py alike.
    """
    launch = cfg.get(LAUNCH_SECTION, {})
    nice = int(launch.get("bulk_nice", 0))
    bulk = {*launch.get("cameras", []), "lerobot_recorder", "rgbd_recorder", "quest_video"}
    return f"nice -n {nice}" if nice and name in bulk else None


# realsense-ros >= 4.55.1 reads one profile per stream (rgb_camera.color_profile, depth_module.depth_profile);
# 4.0.1 to 4.54.1 read one per module (rgb_camera.profile, depth_module.profile). Each version silently ignores
# the other's names, so a camera section's profiles are given under both. A D405's colour profile is
# depth_module.color_profile (params.derived.color_profile_key), its module's older name depth_module.profile.
REALSENSE_PROFILE_ALIASES = {COLOR_PROFILE: "rgb_camera.profile", DEPTH_PROFILE: "depth_module.profile"}
# The QoS parameters of realsense2_camera's images and camera_info (names.CAMERA_IMAGE_QOS), and the values
# they accept: the names of rmw's predefined profiles (realsense-ros ros_utils.cpp, qos_string_to_qos).
REALSENSE_QOS = {"color_qos": CAMERA_IMAGE_QOS, "depth_qos": CAMERA_IMAGE_QOS,
                 "color_info_qos": CAMERA_INFO_QOS, "depth_info_qos": CAMERA_INFO_QOS}
REALSENSE_QOS_NAMES = ("SYSTEM_DEFAULT", "DEFAULT", "PARAMETER_EVENTS", "SERVICES_DEFAULT", "PARAMETERS",
                       "SENSOR_DATA")
# What the recorders need of every realsense2_camera: colour and depth, depth aligned to colour, the
# streams synchronised, no point cloud, the QoS above. A camera's section states only its serial_no (and a
# profile, or one of these, where it differs).
REALSENSE_DEFAULTS: dict[str, Any] = {"enable_color": True, "enable_depth": True, "align_depth.enable": True,
                                      "enable_sync": True, "pointcloud.enable": False, **REALSENSE_QOS}


def realsense_parameters(cfg: Mapping[str, Mapping[str, Any]], camera: str) -> dict[str, Any]:
    """Parameters a ``realsense2_camera_node`` named ``camera`` gets on top of its config section: its
    ``camera_name``, what the section does not state of REALSENSE_DEFAULTS and of the profile (colour:
    ``names.CAMERA``, under the model's name for it, ``params.derived.color_profile_key``; depth: the colour
    one), and each profile under the older wrappers' name too (REALSENSE_PROFILE_ALIASES). A QoS the driver
    does not know is refused (it would stop the driver when the stream starts)."""
    section = cfg.get(camera, {})
    for key in REALSENSE_QOS:
        if key in section and section[key] not in REALSENSE_QOS_NAMES:
            raise LaunchError(f"{camera}.{key} {section[key]!r}: realsense2_camera takes one of "
                              f"{', '.join(REALSENSE_QOS_NAMES)}")
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
    """The installed realsense2_camera's version and its package.xml, found through the ament index; None
    when it is not found there (no ROS install on the path, the driver not installed) or states none."""
    try:
        from ament_index_python.packages import get_package_share_directory

        xml = Path(get_package_share_directory(REALSENSE_PACKAGE)) / "package.xml"
        text = ElementTree.parse(xml).findtext("version") or ""
    except (ImportError, LookupError, OSError, ElementTree.ParseError):   # LookupError: PackageNotFoundError
        return None
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", text)
    return (tuple(int(g) for g in m.groups()), xml) if m else None


def realsense_check() -> str | None:
    """Refuse (LaunchError) a realsense2_camera whose topics would not be ``/<camera>/...``
    (``REALSENSE_NODE_TOPICS``); a note when its version cannot be read, None when it fits."""
    found = realsense_version()
    need = ".".join(map(str, REALSENSE_NODE_TOPICS))
    ours = camera_topic(COLOR_TOPIC_PATTERN, "<camera>")
    if found is None:
        return (f"{REALSENSE_PACKAGE} not found through the ament index: its version was not checked (the "
                f"launch needs >= {need}, which publishes {ours})")
    version, xml = found
    if version < REALSENSE_NODE_TOPICS:
        have = ".".join(map(str, version))
        raise LaunchError(f"{REALSENSE_PACKAGE} {have} ({xml}) publishes its topics relative to the node's "
                          f"namespace: every camera started in the root namespace would publish /{COLOR_IMAGE}, "
                          f"not {ours}. Install {REALSENSE_PACKAGE} >= {need} (apt: sudo apt "
                          f"install --only-upgrade ros-$ROS_DISTRO-realsense2-camera; or realsense-ros from source)")
    return None


def launch_overrides(cfg: Mapping[str, Mapping[str, Any]], task: str = "", root: str = "", rgbd_path: str = "",
                     backend: str = "", cameras: str = "", policy: str = "",
                     policy_root: str = "", teleop_input: str = "") -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The launch arguments shared by both launch files and piper-launch -> (cameras, {node: params}).

    Empty strings keep the config's values. ``cameras`` is a comma-separated subset of
    ``piper_launch.cameras``. The params include what the nodes derive from the cameras started
    (``params.derived.derived_params``: the recorders' camera lists and provenance serials,
    quest_video's panels), which a launch file passes on top of the config file.
    """
    chosen, out = argument_overrides(cfg, task, root, rgbd_path, backend, cameras, policy, policy_root, teleop_input)
    for node, params in _derived(cfg, chosen).items():
        out.setdefault(node, {}).update(params)
    return chosen, out


def _derived(cfg: Mapping[str, Mapping[str, Any]], cameras: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return derived_params(cfg, cameras)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def argument_overrides(cfg: Mapping[str, Mapping[str, Any]], task: str = "", root: str = "", rgbd_path: str = "",
                       backend: str = "", cameras: str = "", policy: str = "", policy_root: str = "",
                       teleop_input: str = "") -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``launch_overrides`` without the parameters derived from the cameras: (cameras, {node: params})."""
    configured = list(cfg.get(LAUNCH_SECTION, {}).get("cameras", []))
    chosen = [c.strip() for c in cameras.split(",") if c.strip()] if cameras else configured
    unknown = [c for c in chosen if c not in cfg]
    if unknown:
        raise LaunchError(f"cameras {unknown} have no parameter section in the config")
    out: dict[str, dict[str, Any]] = {}
    if task:
        out.setdefault("lerobot_recorder", {})["task"] = task
        out.setdefault("rgbd_recorder", {})["task"] = task
    if root:
        out.setdefault("lerobot_recorder", {})["root"] = root
    if rgbd_path:
        out.setdefault("rgbd_recorder", {})["path"] = rgbd_path
    if backend:
        out.setdefault("piper_arm", {})["backend"] = backend
    if policy:
        out.setdefault(POLICY_NODE[0], {})["policy"] = policy
    if policy_root:
        out.setdefault(POLICY_NODE[0], {})["root"] = policy_root
    if teleop_input:
        if teleop_input not in TELEOP_INPUTS:
            raise LaunchError(f"teleop_input must be one of {', '.join(TELEOP_INPUTS)}, got {teleop_input!r}")
        out.setdefault("teleop", {})["input"] = teleop_input
    return chosen, out


def _flag(value: str | bool, default: bool) -> bool:
    """A launch argument's true | false ("" = ``default``)."""
    if value == "" or value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        raise LaunchError(f"expected true or false, got {value!r}")
    return text in ("true", "1", "yes", "on")


@dataclass(frozen=True)
class SimQuestSettings:
    """``piper_launch.sim_quest``: the simulated headset of the sim graph (defaults: its own, except
    ``buttons``: the graph drives episodes through the recorders' services). ``enabled`` false (or the
    launch argument ``sim_headset:=false``, ``piper-launch sim --no-sim-headset``): no simulated
    headset; quest_bridge and quest_video keep their own host/port, for a real headset."""

    enabled: bool = True
    host: str = SimConfig.host
    port: int = SimConfig.port      # 0 = piper-launch picks a free port
    script: str = SimConfig.script
    rate: float = SimConfig.rate
    buttons: bool = False
    video_port: int = VIDEO_PORT    # the app's video/HUD channel (quest_video); 0 = a free port
    report: str = ""                # write what the headset received to this JSON file (tests)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Mapping[str, Any]]) -> SimQuestSettings:
        section = dict(cfg.get(LAUNCH_SECTION, {}).get("sim_quest", {}))
        unknown = set(section) - {f.name for f in fields(cls)}
        if unknown:
            raise LaunchError(f"{LAUNCH_SECTION}.sim_quest: unknown settings {sorted(unknown)}")
        return cls(**section)

    def argv(self, video: bool = False) -> list[str]:
        """piper-sim-quest's command-line arguments (``video``: also accept quest_video's channel)."""
        out = ["--host", str(self.host), "--port", str(self.port), "--script", str(self.script),
               "--rate", str(self.rate)]
        out += [] if self.buttons else ["--no-buttons"]
        out += ["--video-port", str(self.video_port)] if video else []
        return out + (["--report", self.report] if self.report else [])


@dataclass(frozen=True)
class GraphNode:
    """One process of the graph, as both launchers start it: ``launch/*.launch.py`` as a launch_ros
    ``Node`` (or ``ExecuteProcess`` when not ``ros_node``) of ``package``/``executable``, piper-launch
    as ``script`` with ``--params-file``. ``parameters`` go on top of the node's section of the config."""

    name: str
    executable: str
    script: str = ""
    package: str = PACKAGE
    ros_node: bool = True
    args: tuple[str, ...] = ()          # command-line arguments of a plain process
    prefix: str | None = None           # e.g. "nice -n 5"
    namespace: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    # parameters the graph derives from other settings -> what they follow (an explicit --set of one of
    # them to another value is refused with this, never silently overwritten: plan_graph)
    derived: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()         # said when the graph starts (a check that could not be made)


@dataclass(frozen=True)
class QuestWebSettings:
    """``piper_launch.quest_web``: the WebXR headset page (``headset:=web``). It listens where quest_bridge
    and quest_video connect (their own host/port, as the native app's servers), so no node parameter
    changes with it; ``port`` is the page's (``adb reverse tcp:PORT tcp:PORT``, then
    ``http://localhost:PORT`` in the Quest Browser), ``cert``/``key`` serve HTTPS for LAN use."""

    host: str = WebConfig.host
    port: int = WebConfig.port
    cert: str = WebConfig.cert
    key: str = WebConfig.key
    allowed_hosts: tuple[str, ...] = ()   # DNS names the page may be reached by (LAN use; Host check)
    insecure_http: bool = False     # plain HTTP on a non-loopback host (WebConfig.insecure_http)
    report: str = ""                # write the relay's counters to this JSON file (tests)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Mapping[str, Any]]) -> QuestWebSettings:
        section = dict(cfg.get(LAUNCH_SECTION, {}).get("quest_web", {}))
        unknown = set(section) - {f.name for f in fields(cls)}
        if unknown:
            raise LaunchError(f"{LAUNCH_SECTION}.quest_web: unknown settings {sorted(unknown)}")
        section["allowed_hosts"] = tuple(section.get("allowed_hosts") or ())
        return cls(**section)

    def check(self, cfg: Mapping[str, Mapping[str, Any]], video: bool) -> None:
        """What piper-quest-web would refuse at its start, refused while planning: a non-loopback host without
        a certificate (unless ``insecure_http``). And the relay binds the page's port and, on quest_bridge's
        host, quest_bridge's and quest_video's: two of them on one port would fail only at the bind
        (``address already in use``); refused here, naming both."""
        if not is_loopback(str(self.host)) and not self.cert and not _flag(self.insecure_http, False):
            raise LaunchError(f"{LAUNCH_SECTION}.quest_web.host={self.host!r} is not a loopback address: set "
                              f"{LAUNCH_SECTION}.quest_web.cert and .key (HTTPS), or .insecure_http=true to serve "
                              "plain HTTP on that network anyway (anyone on it can open the page and drive the arm)")
        bridge_host = str(cfg.get("quest_bridge", {}).get("host", DEFAULT_HOST))
        ends = {f"{LAUNCH_SECTION}.quest_web.port": (str(self.host), int(self.port)),
                "quest_bridge.port": (bridge_host, int(cfg.get("quest_bridge", {}).get("port", DEFAULT_PORT)))}
        if video:
            ends["quest_video.port"] = (bridge_host, int(cfg.get("quest_video", {}).get("port", VIDEO_PORT)))
        clash = port_clash(ends)
        if clash:
            a, b = clash
            raise LaunchError(f"{a}={ends[a][1]} and {b}={ends[b][1]}: headset:=web's relay (quest_web) binds both, "
                              "on one port; give the page another port (the bridge's and the video channel's are "
                              "where quest_bridge and quest_video connect)")

    def argv(self, cfg: Mapping[str, Mapping[str, Any]], video: bool) -> list[str]:
        """piper-quest-web's arguments: the page's address, and quest_bridge's / quest_video's endpoints."""
        bridge = cfg.get("quest_bridge", {})
        out = ["--host", str(self.host), "--port", str(self.port),
               "--bridge-host", str(bridge.get("host", DEFAULT_HOST)), "--bridge-port",
               str(bridge.get("port", DEFAULT_PORT)),
               "--video-port", str(cfg.get("quest_video", {}).get("port", VIDEO_PORT)) if video else "-1"]
        out += ["--cert", str(self.cert), "--key", str(self.key)] if self.cert or self.key else []
        out += [a for name in self.allowed_hosts for a in ("--allowed-host", str(name))]
        out += ["--insecure-http"] if _flag(self.insecure_http, False) else []
        return out + (["--report", self.report] if self.report else [])


def headset_kind(mode: str, cfg: Mapping[str, Mapping[str, Any]], sim_headset: str | bool = "",
                 headset: str = "", overrides: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Which headset the graph talks to: "none" when teleop follows a SpaceMouse (``teleop_input``), else the
    launch argument ``headset`` (native | web | sim), else sim in sim mode unless ``sim_headset`` ("" =
    ``piper_launch.sim_quest.enabled``, default true) is false, else native. Settings that contradict each
    other are refused before anything starts, naming both (a SpaceMouse graph and a headset asked for, the
    simulated headset asked for and turned off, ...), never resolved by one silently winning."""
    if headset and headset not in HEADSETS:
        raise LaunchError(f"headset must be one of {' | '.join(HEADSETS)}, got {headset!r}")
    asked_sim = None if sim_headset == "" else _flag(sim_headset, False)   # None: not given
    if teleop_input(cfg, overrides) != "headset":
        given = ([_HEADSET_ARG.format(headset)] if headset else []) + (["sim_headset:=true"] if asked_sim else [])
        if given:
            raise LaunchError(f"{' and '.join(given)} contradict{'s' if len(given) == 1 else ''} teleop input "
                              "spacemouse (teleop.input, --teleop-input, teleop_input:=): a SpaceMouse graph starts "
                              "no headset node; drop the headset setting or teleop_input")
        return "none"
    if headset:
        if headset == "sim" and mode != "sim":
            raise LaunchError("headset:=sim needs the sim graph (the robot has a real headset: native or web)")
        if headset != "sim" and asked_sim:
            raise LaunchError(f"headset:={headset} and sim_headset:=true contradict each other")
        if headset == "sim" and asked_sim is False:
            raise LaunchError(f"{_HEADSET_ARG.format('sim')} and --no-sim-headset (sim_headset:=false) contradict "
                              "each other: drop one")
        if headset == "sim" and asked_sim is None and not SimQuestSettings.from_config(cfg).enabled:
            raise LaunchError(f"{_HEADSET_ARG.format('sim')} and {LAUNCH_SECTION}.sim_quest.enabled=false "
                              "contradict each other: drop one")
        return headset
    if asked_sim and mode != "sim":
        raise LaunchError("sim_headset:=true needs the sim graph (the robot has a real headset: native or web)")
    enabled = asked_sim if asked_sim is not None else bool(SimQuestSettings.from_config(cfg).enabled)
    return "sim" if mode == "sim" and enabled else "native"


_HEADSET_ARG = "--headset {0} (headset:={0})"


def sim_headset_enabled(mode: str, cfg: Mapping[str, Mapping[str, Any]], sim_headset: str | bool = "",
                        headset: str = "") -> bool:
    """Whether the graph starts the simulated headset (``headset_kind`` is sim)."""
    return headset_kind(mode, cfg, sim_headset, headset) == "sim"


SIM_HEADSET_WAY_OUT = ("for an external headset start the graph without the simulated one (piper-launch sim "
                       "--no-sim-headset, sim.launch.py sim_headset:=false, or piper_launch.sim_quest.enabled=false)")


def graph_nodes(mode: str, cfg: Mapping[str, Mapping[str, Any]], cameras: Iterable[str],
                overrides: Mapping[str, Mapping[str, Any]] | None = None, dashboard: str = "",
                sim_headset: str | bool = "", headset: str = "") -> list[GraphNode]:
    """The graph of ``mode`` (sim: simulated headset and cameras; robot: realsense2_camera), in start
    order, from a config; ``overrides``: per-node parameters on top of it (the launch arguments);
    ``dashboard``, ``sim_headset``: the launch arguments ("" = ``piper_launch.dashboard``,
    ``piper_launch.sim_quest.enabled``)."""
    overrides = overrides or {}
    cameras = list(cameras)

    def ours(name: str, executable: str, script: str, derived: Mapping[str, str] | None = None,
             **params: Any) -> GraphNode:
        return GraphNode(name, executable, script, prefix=nice_prefix(cfg, name),
                         parameters={**overrides.get(name, {}), **params}, derived=dict(derived or {}))

    nodes: list[GraphNode] = []
    peer: dict[str, dict[str, Any]] = {}
    why: dict[str, dict[str, str]] = {}
    kind = headset_kind(mode, cfg, sim_headset, headset, overrides)
    use_headset = kind != "none"   # a SpaceMouse needs no headset node
    if kind == "web":   # the page's relay, where quest_bridge and quest_video connect (their own host/port)
        merged = {n: {**cfg.get(n, {}), **overrides.get(n, {})} for n in ("quest_bridge", "quest_video")}
        web = QuestWebSettings.from_config(cfg)
        web.check(merged, headset_video(cfg))
        nodes.append(GraphNode(QUEST_WEB[0], *QUEST_WEB, ros_node=False,
                               args=tuple(web.argv(merged, headset_video(cfg)))))
    if kind == "sim":
        quest = SimQuestSettings.from_config(cfg)
        video = headset_video(cfg)
        nodes.append(GraphNode(SIM_QUEST[0], *SIM_QUEST, ros_node=False, args=tuple(quest.argv(video))))
        peer["quest_bridge"] = {"host": str(quest.host), "port": int(quest.port)}
        why["quest_bridge"] = {k: f"the simulated headset's {k} ({LAUNCH_SECTION}.sim_quest.{k}={v!r})"
                               for k, v in peer["quest_bridge"].items()}
        if video:   # quest_video streams to the simulated headset's video channel
            peer["quest_video"] = {"host": str(quest.host), "port": int(quest.video_port)}
            why["quest_video"] = {"host": f"the simulated headset's host ({LAUNCH_SECTION}.sim_quest.host="
                                          f"{quest.host!r})",
                                  "port": f"the simulated headset's video channel ({LAUNCH_SECTION}.sim_quest."
                                          f"video_port={quest.video_port!r})"}
    for name in START_ORDER[:3]:
        if name in cfg and (use_headset or name != "quest_bridge"):  # a node without a config section is not started
            nodes.append(ours(name, name, NODE_SCRIPTS[name], why.get(name), **peer.get(name, {})))
    driver_note = realsense_check() if mode != "sim" and cameras else None   # refuses a driver too old
    for cam in cameras:
        if mode == "sim":
            nodes.append(ours(cam, *SIM_CAMERA))
        else:
            nodes.append(GraphNode(cam, "realsense2_camera_node", package=REALSENSE_PACKAGE, namespace="",
                                   parameters=realsense_parameters(cfg, cam),
                                   notes=(driver_note,) if driver_note else ()))
    policy = policy_enabled(cfg, overrides)
    if policy:   # rollouts are data: the LeRobot rows say who acted (complementary_info.actor)
        peer.setdefault("lerobot_recorder", {})["actor_topic"] = POLICY_ACTOR
        why.setdefault("lerobot_recorder", {})["actor_topic"] = f"the policy node's actor topic ({POLICY_ACTOR})"
    nodes += [ours(name, name, NODE_SCRIPTS[name], why.get(name), **peer.get(name, {})) for name in START_ORDER[3:]
              if name in cfg and (name != "quest_video" or (use_headset and headset_video(cfg)))]
    if policy:  # launch argument policy:=SPEC (ROS executable "policy")
        nodes.append(ours(POLICY_NODE[0], POLICY_NODE[0], POLICY_NODE[1]))
    dash = dashboard_params(cfg, dashboard, [n.name for n in nodes if n.ros_node], overrides)
    if dash is not None:  # the read-only web dashboard expects exactly the nodes started here
        nodes.append(ours("dashboard", "dashboard", "piper-dashboard", **dash))
    return nodes


def launch_graph(mode: str, config_file: str | Path, dashboard: str = "", sim_headset: str = "",
                 headset: str = "", **launch_args: str) -> list[GraphNode]:
    """What ``ros2 launch piper_recorder <mode>.launch.py`` starts: the config file plus the launch
    arguments (task, root, rgbd_path, backend, cameras, policy, policy_root) as per-node parameters."""
    cfg = _read_config(config_file)
    cameras, overrides = launch_overrides(cfg, **launch_args)
    return graph_nodes(mode, cfg, cameras, overrides, dashboard, sim_headset, headset)


def headset_video(cfg: Mapping[str, Any]) -> bool:
    """Whether to start quest_video (panels + HUD to the headset): a ``quest_video`` section and
    ``piper_launch.headset_video`` not false."""
    return "quest_video" in cfg and bool(cfg.get(LAUNCH_SECTION, {}).get("headset_video", True))


class _NoAliasDumper(yaml.SafeDumper):
    """rcl's parameter-file parser rejects YAML anchors/aliases (a list shared by two nodes)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_params(cfg: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """The effective parameter file the nodes start with; a directory that cannot hold it is a LaunchError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            yaml.dump({n: {"ros__parameters": p} for n, p in cfg.items()}, f, Dumper=_NoAliasDumper,
                      sort_keys=False)
    except OSError as exc:
        raise LaunchError(f"cannot write the parameter file {path}: {exc.strerror or exc}") from None
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def script_dirs(bin_dir: Path | None = None) -> list[Path]:
    """Where this package's console scripts are, in order: ``bin_dir``, next to the interpreter (pip,
    a venv), ``<prefix>/lib/piper_recorder`` of the package's own install (colcon puts them there for
    ``ros2 run``, off PATH: setup.cfg), then the interpreter's ``bin``."""
    dirs = [bin_dir] if bin_dir else []
    dirs.append(Path(sys.executable).parent)
    dirs += [p / "lib" / "piper_recorder" for p in install_prefixes()]
    return dirs


def find_script(name: str, bin_dir: Path | None = None) -> str:
    dirs = script_dirs(bin_dir)
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    found = shutil.which(name)
    if not found:
        raise LaunchError(f"executable {name!r} not found in {', '.join(map(str, dirs))} or on PATH")
    return found


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    node: bool = True  # a ROS node that must appear in the graph


@dataclass
class GraphPlan:
    """Everything to start, in order, plus the effective parameter file."""

    mode: str
    params_file: Path
    config: dict[str, dict[str, Any]]
    processes: list[ProcessSpec] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # GraphNode.notes, each once

    @property
    def node_names(self) -> list[str]:
        return [p.name for p in self.processes if p.node]

    @property
    def cameras(self) -> list[str]:
        return list(self.config.get(LAUNCH_SECTION, {}).get("cameras", []))


def plan_graph(mode: str, config_file: str | Path, sets: Iterable[str], run_dir: Path,
               bin_dir: Path | None = None, dashboard: str = "", sim_headset: str = "", headset: str = "",
               **launch_args: str) -> GraphPlan:
    """Resolve the config into the processes to start (``mode`` = sim: sim cameras + sim headset,
    unless ``sim_headset`` / ``piper_launch.sim_quest.enabled`` is false).

    ``launch_args`` are the launch files' arguments (task, root, rgbd_path, backend, cameras, policy,
    policy_root);
    ``sets`` (``node.param=value``) are applied after them, and what the nodes derive from the cameras
    (``params.derived.derived_params``) after both: a set of a camera's serial or size reaches the
    recorders, one that contradicts them is refused. A set of a parameter the graph derives from
    another setting (quest_bridge's host/port from the simulated headset, ...: ``GraphNode.derived``)
    to another value is refused (``LaunchError`` naming both and the way out), never overwritten.
    """
    sets = list(sets)
    if mode not in ("sim", "robot"):
        raise LaunchError(f"mode must be sim or robot, got {mode!r}")
    cfg = _read_config(config_file)
    cameras, overrides = argument_overrides(cfg, **launch_args)
    for node_name, params in overrides.items():
        cfg.setdefault(node_name, {}).update(params)
    cfg.setdefault(LAUNCH_SECTION, {})["cameras"] = cameras
    cfg = apply_overrides(cfg, sets)
    launch = cfg.get(LAUNCH_SECTION, {})
    cameras = list(launch.get("cameras", []))
    for cam in cameras:
        if cam not in cfg:
            raise LaunchError(f"camera {cam!r} listed in {LAUNCH_SECTION}.cameras has no parameter section")
    for node_name, params in _derived(cfg, cameras).items():
        cfg.setdefault(node_name, {}).update(params)
    kind = headset_kind(mode, cfg, sim_headset, headset)
    if kind == "sim":
        quest = SimQuestSettings.from_config(cfg)
        if not quest.port:   # port 0: free ports for the pose and the video channel
            host = str(quest.host)
            quest = dataclasses.replace(quest, port=free_port(host),
                                        video_port=free_port(host) if headset_video(cfg) else quest.video_port)
        elif headset_video(cfg) and not quest.video_port:
            quest = dataclasses.replace(quest, video_port=free_port(str(quest.host)))
        cfg.setdefault(LAUNCH_SECTION, {})["sim_quest"] = dataclasses.asdict(quest)
    if not headset_video(cfg):
        cfg.pop("quest_video", None)
    nodes = graph_nodes(mode, cfg, cameras, dashboard=dashboard, headset="" if kind == "none" else kind)
    explicit = {item.partition("=")[0] for item in sets}
    for n in nodes:
        for key, value in n.parameters.items():
            given = cfg.get(n.name, {}).get(key)
            if f"{n.name}.{key}" in explicit and given != value:
                way_out = SIM_HEADSET_WAY_OUT if n.name in ("quest_bridge", "quest_video") else \
                    "drop the --set (or start the graph without what it follows)"
                raise LaunchError(f"--set {n.name}.{key}={given!r} conflicts with "
                                  f"{n.derived.get(key, 'a value the graph derives')}, which this graph sets it "
                                  f"to ({value!r}); {way_out}")
        if n.parameters:
            cfg.setdefault(n.name, {}).update(n.parameters)
    params_file = dump_params(cfg, run_dir / "params.yaml")
    plan = GraphPlan(mode, params_file, cfg, notes=list(dict.fromkeys(note for n in nodes for note in n.notes)))
    for n in nodes:
        if not n.ros_node:
            plan.processes.append(ProcessSpec(n.name, [find_script(n.script, bin_dir), *n.args], node=False))
        elif n.package == PACKAGE:
            argv = [find_script(n.script, bin_dir), "--ros-args", "-r", f"__node:={n.name}", "--params-file",
                    str(params_file)]
            plan.processes.append(ProcessSpec(n.name, n.prefix.split() + argv if n.prefix else argv))
        elif shutil.which("ros2"):
            plan.processes.append(ProcessSpec(n.name, ["ros2", "run", n.package, n.executable, "--ros-args", "-r",
                                                       f"__node:={n.name}", "--params-file", str(params_file)]))
        else:
            plan.skipped.append(f"{n.name}: {n.package} needs a ROS 2 install (ros2 launch piper_recorder "
                                "robot.launch.py), or start the camera driver yourself")
    return plan


def __getattr__(name: str) -> Any:
    """``Graph`` (the supervisor) from ``piper_recorder.graph.launcher`` as before, imported only when asked for
    so that planning never loads subprocess and signal handling."""
    if name == "Graph":
        from piper_recorder.graph.supervisor import Graph
        return Graph
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The launch arguments and ``--set`` overrides, turned into per-node parameters on top of a config file.

``LAUNCH_ARGUMENTS`` is shared by both launch files and piper-launch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from piper_recorder.names import parse_arms
from piper_recorder.params.derived import LAUNCH_SECTION, derived_params
from piper_recorder.params.params_file import read_params_file
from piper_recorder.teleop.spacemouse.input import TELEOP_INPUTS

from .errors import LaunchError
from .executables import POLICY_NODE


def read_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """A ROS 2 parameter file as {node: parameters}; an unreadable one is a LaunchError."""
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
    "arms": "comma-separated arm names for several arms, e.g. left,right: one piper_arm per arm under its "
    "namespace (/left/arm/...), each with its own section left/piper_arm (default: piper_launch.arms, else one arm)",
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


GRAPH_ARGUMENTS = (
    "task",
    "root",
    "rgbd_path",
    "backend",
    "cameras",
    "arms",
    "policy",
    "policy_root",
    "dashboard",
    "sim_headset",
    "teleop_input",
    "headset",
)  # all but config: launch_graph's


def teleop_input(cfg: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Teleop's ``input`` (the launch argument ``teleop_input`` overrides it).

    With ``spacemouse`` the graph starts no headset node.
    """
    value = str({**cfg.get("teleop", {}), **(overrides or {}).get("teleop", {})}.get("input", TELEOP_INPUTS[0]))
    if value not in TELEOP_INPUTS:
        raise LaunchError(f"teleop input must be one of {', '.join(TELEOP_INPUTS)}, got {value!r}")
    return value


def policy_enabled(
    cfg: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> bool:
    """The policy node runs when the config or the ``policy`` launch argument names a backend."""
    name = POLICY_NODE[0]
    return bool({**cfg.get(name, {}), **(overrides or {}).get(name, {})}.get("policy"))


def launch_overrides(
    cfg: Mapping[str, Mapping[str, Any]],
    task: str = "",
    root: str = "",
    rgbd_path: str = "",
    backend: str = "",
    cameras: str = "",
    policy: str = "",
    policy_root: str = "",
    teleop_input: str = "",
    arms: str = "",
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The launch arguments shared by both launch files and piper-launch -> (cameras, {node: params}).

    Empty strings keep the config's values. ``cameras`` is a comma-separated subset of
    ``piper_launch.cameras``. The params include what the nodes derive from the cameras started
    (``params.derived.derived_params``: the recorders' camera lists and provenance serials,
    quest_video's panels), which a launch file passes on top of the config file.
    """
    chosen, out = argument_overrides(
        cfg, task, root, rgbd_path, backend, cameras, policy, policy_root, teleop_input, arms
    )
    for node, params in checked_derived_params(cfg, chosen, launch_arms(cfg, out) if arms else None).items():
        out.setdefault(node, {}).update(params)
    return chosen, out


def checked_derived_params(
    cfg: Mapping[str, Mapping[str, Any]], cameras: list[str], arms: tuple[str, ...] | None = None
) -> dict[str, dict[str, Any]]:
    """``params.derived.derived_params`` (``arms`` None: the config's), a contradiction refused as a LaunchError."""
    try:
        return derived_params(cfg, cameras, arms)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def argument_overrides(
    cfg: Mapping[str, Mapping[str, Any]],
    task: str = "",
    root: str = "",
    rgbd_path: str = "",
    backend: str = "",
    cameras: str = "",
    policy: str = "",
    policy_root: str = "",
    teleop_input: str = "",
    arms: str = "",
) -> tuple[list[str], dict[str, dict[str, Any]]]:
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
    if arms:
        try:
            out.setdefault(LAUNCH_SECTION, {})["arms"] = list(parse_arms(arms))
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
    return chosen, out


def launch_arms(
    cfg: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[str, ...]:
    """The graph's arms: the ``arms`` launch argument, else ``piper_launch.arms``; () for one arm."""
    value = {**cfg.get(LAUNCH_SECTION, {}), **(overrides or {}).get(LAUNCH_SECTION, {})}.get("arms") or []
    try:
        return parse_arms(value if isinstance(value, (str, list, tuple)) else str(value))
    except ValueError as exc:
        raise LaunchError(f"{LAUNCH_SECTION}.{exc}") from None


def flag(value: str | bool, default: bool) -> bool:
    """A launch argument's true | false ("" = ``default``)."""
    if value == "" or value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        raise LaunchError(f"expected true or false, got {value!r}")
    return text in ("true", "1", "yes", "on")

"""The pip-only launcher's plan: the same graph as launch/*.launch.py from the same config, without `launch`.

The PyPI ROS 2 wheels have rclpy but no `launch`, so ``piper-launch`` and ``piper-demo`` use this module: it
reads a parameter file, applies ``node.param=value`` overrides, writes the effective file next to the logs,
and resolves every node to its command line. Planning starts no process, signal or thread (the launch files
import it inside ``ros2 launch``); ``graph.supervisor.Graph`` runs a plan.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piper_recorder.params.derived import LAUNCH_SECTION

from .arguments import apply_overrides, argument_overrides, checked_derived_params, read_config
from .errors import LaunchError
from .graph_node import graph_nodes
from .headset import SIM_HEADSET_WAY_OUT, SimQuestSettings, headset_kind, headset_video
from .install import PACKAGE, find_script
from .params_dump import dump_params
from .ports import free_port


@dataclass
class ProcessSpec:
    """One process to start: its name and command line."""

    name: str
    argv: list[str]
    node: bool = True  # a ROS node that must appear in the graph
    hosts: tuple[str, ...] = ()  # the nodes it runs besides its own (GraphNode.hosts), which must appear too


@dataclass
class GraphPlan:
    """Everything to start, in order, plus the effective parameter file.

    A process's name is its node's (``left/piper_arm`` for a node under an arm's namespace).
    """

    mode: str
    params_file: Path
    config: dict[str, dict[str, Any]]
    processes: list[ProcessSpec] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # GraphNode.notes, each once

    @property
    def node_names(self) -> list[str]:
        """The ROS nodes that must appear in the graph."""
        return [name for p in self.processes if p.node for name in (p.name, *p.hosts)]

    @property
    def cameras(self) -> list[str]:
        """The graph's camera names (``piper_launch.cameras``)."""
        return list(self.config.get(LAUNCH_SECTION, {}).get("cameras", []))

    @property
    def arms(self) -> tuple[str, ...]:
        """The graph's arms (``piper_launch.arms``), () for one arm."""
        return tuple(self.config.get(LAUNCH_SECTION, {}).get("arms") or ())


def plan_graph(
    mode: str,
    config_file: str | Path,
    sets: Iterable[str],
    run_dir: Path,
    bin_dir: Path | None = None,
    dashboard: str = "",
    sim_headset: str = "",
    headset: str = "",
    **launch_args: str,
) -> GraphPlan:
    """Resolve the config into the processes to start.

    ``mode`` sim starts sim cameras and the sim headset (unless ``sim_headset`` /
    ``piper_launch.sim_quest.enabled`` is false).

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
    cfg = read_config(config_file)
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
    for node_name, params in checked_derived_params(cfg, cameras).items():
        cfg.setdefault(node_name, {}).update(params)
    kind = headset_kind(mode, cfg, sim_headset, headset)
    if kind == "sim":
        quest = SimQuestSettings.from_config(cfg)
        if not quest.port:  # port 0: free ports for the pose and the video channel
            host = str(quest.host)
            quest = dataclasses.replace(
                quest, port=free_port(host), video_port=free_port(host) if headset_video(cfg) else quest.video_port
            )
        elif headset_video(cfg) and not quest.video_port:
            quest = dataclasses.replace(quest, video_port=free_port(str(quest.host)))
        cfg.setdefault(LAUNCH_SECTION, {})["sim_quest"] = dataclasses.asdict(quest)
    if not headset_video(cfg):
        cfg.pop("quest_video", None)
    nodes = graph_nodes(mode, cfg, cameras, dashboard=dashboard, headset="" if kind == "none" else kind)
    explicit = {item.partition("=")[0] for item in sets}
    for n in nodes:
        for key, value in n.parameters.items():
            given = cfg.get(n.key, {}).get(key)
            if f"{n.key}.{key}" in explicit and given != value:
                way_out = (
                    SIM_HEADSET_WAY_OUT
                    if n.name in ("quest_bridge", "quest_video")
                    else "drop the --set (or start the graph without what it follows)"
                )
                raise LaunchError(
                    f"--set {n.key}.{key}={given!r} conflicts with "
                    f"{n.derived.get(key, 'a value the graph derives')}, which this graph sets it "
                    f"to ({value!r}); {way_out}"
                )
        if n.parameters:
            cfg.setdefault(n.key, {}).update(n.parameters)
    params_file = dump_params(cfg, run_dir / "params.yaml")
    plan = GraphPlan(mode, params_file, cfg, notes=list(dict.fromkeys(note for n in nodes for note in n.notes)))
    for n in nodes:
        if not n.ros_node:
            plan.processes.append(ProcessSpec(n.name, [find_script(n.script, bin_dir), *n.args], node=False))
        elif n.package == PACKAGE:
            argv = [
                find_script(n.script, bin_dir),
                "--ros-args",
                *(("-r", f"__node:={n.name}") if not n.hosts else ()),  # a remap would rename every node it runs
                *(("-r", f"__ns:=/{n.namespace}") if n.namespace else ()),
                "--params-file",
                str(params_file),
            ]
            argv = n.prefix.split() + argv if n.prefix else argv
            plan.processes.append(ProcessSpec(n.key, argv, hosts=n.hosts))
        elif shutil.which("ros2"):
            plan.processes.append(
                ProcessSpec(
                    n.name,
                    [
                        "ros2",
                        "run",
                        n.package,
                        n.executable,
                        "--ros-args",
                        "-r",
                        f"__node:={n.name}",
                        "--params-file",
                        str(params_file),
                    ],
                )
            )
        else:
            plan.skipped.append(
                f"{n.name}: {n.package} needs a ROS 2 install (ros2 launch piper_recorder "
                "robot.launch.py), or start the camera driver yourself"
            )
    return plan

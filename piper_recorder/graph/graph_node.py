"""The graph as data: each process either launcher starts (``GraphNode``), in start order.

``graph_nodes`` and ``launch_graph`` build it from a config and the launch arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piper_recorder.names import DASHBOARD_NODE, POLICY_ACTOR, node_key
from piper_recorder.params.derived import LAUNCH_SECTION

from .arguments import launch_arms, launch_overrides, policy_enabled, read_config
from .errors import LaunchError
from .executables import POLICY_NODE, QUEST_WEB, SIM_CAMERAS, SIM_QUEST, script
from .headset import QuestWebSettings, SimQuestSettings, headset_kind, headset_video
from .install import PACKAGE
from .realsense import REALSENSE_PACKAGE, realsense_check, realsense_parameters

START_ORDER = ("piper_arm", "quest_bridge", "teleop", "lerobot_recorder", "rgbd_recorder", "quest_video")
ARM_NODE = START_ORDER[0]  # one per arm with several arms, each under its arm's namespace


@dataclass(frozen=True)
class GraphNode:
    """One process of the graph, as both launchers start it.

    ``launch/*.launch.py`` starts it as a launch_ros ``Node`` (or ``ExecuteProcess`` when not ``ros_node``) of ``package``/``executable``, piper-launch
    as ``script`` with ``--params-file``. ``parameters`` go on top of the node's section of the config.
    """

    name: str
    executable: str
    script: str = ""
    package: str = PACKAGE
    ros_node: bool = True
    args: tuple[str, ...] = ()  # command-line arguments of a plain process
    prefix: str | None = None  # e.g. "nice -n 5"
    namespace: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    # parameters the graph derives from other settings -> what they follow (an explicit --set of one of
    # them to another value is refused with this, never silently overwritten: plan_graph)
    derived: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # said when the graph starts (a check that could not be made)
    # the nodes it runs besides its own, each under its own name and parameter section (the sim cameras'
    # process); such a process is started without a node-name remap, which would rename them all
    hosts: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Its name in the parameter file and among the processes: ``left/piper_arm`` under an arm's namespace."""
        return node_key(self.name, self.namespace or "")

    @property
    def node_names(self) -> tuple[str, ...]:
        """The ROS nodes this process brings up: its own, then those it hosts."""
        return (self.key, *self.hosts)


def nice_prefix(cfg: Mapping[str, Mapping[str, Any]], name: str) -> str | None:
    """``nice -n N`` for the buffered bulk work (sim cameras, recorders, quest_video) with ``piper_launch.bulk_nice``.

    Camera rendering and encoding may run at a lower CPU priority than the control chain
    (headset -> bridge -> teleop -> arm), whose stalls become frozen or jumping actions. Used by
    piper-launch and sim.launch.py alike.
    """
    launch = cfg.get(LAUNCH_SECTION, {})
    nice = int(launch.get("bulk_nice", 0))
    bulk = {SIM_CAMERAS[0], "lerobot_recorder", "rgbd_recorder", "quest_video"}
    return f"nice -n {nice}" if nice and name in bulk else None


def dashboard_params(
    cfg: Mapping[str, Mapping[str, Any]],
    dashboard: str | bool,
    nodes: Iterable[str],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    arms: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """The ``dashboard`` node's parameters on top of its config section, or None when it is off.

    ``dashboard``: the launch argument ("" = ``piper_launch.dashboard``). Unless the config sets them,
    the dashboard expects exactly the nodes the launch starts, shows the graph's ``arms`` and offers the LeRobot
    recorder's root for the re-alignment view (``overrides``: the launch arguments' parameters, see
    ``launch_overrides``; a section's own arms are checked against the graph's there, ``params.derived``).
    """
    flag = cfg.get(LAUNCH_SECTION, {}).get("dashboard", False) if dashboard == "" else dashboard
    if str(flag).strip().lower() not in ("true", "1", "yes", "on"):
        return None
    section = cfg.get(DASHBOARD_NODE, {})
    out: dict[str, Any] = {}
    if "nodes" not in section:
        out["nodes"] = [n for n in nodes if n != DASHBOARD_NODE]
    if arms and "arms" not in section:
        out["arms"] = list(arms)
    root = {**cfg.get("lerobot_recorder", {}), **(overrides or {}).get("lerobot_recorder", {})}.get("root")
    if "roots" not in section and root:
        out["roots"] = [str(root)]
    return out


def arm_nodes(
    mode: str, cfg: Mapping[str, Mapping[str, Any]], arms: tuple[str, ...], overrides: Mapping[str, Mapping[str, Any]]
) -> list[GraphNode]:
    """One ``piper_arm`` per arm under the arm's namespace (``/left/piper_arm``: ``/left/arm/joint_states``, ...).

    Each arm's parameters: the ``piper_arm`` section (what the arms share), then the arm's own ``left/piper_arm``
    section, then the launch arguments'. On the robot two arms on one CAN channel are refused, naming both.
    """
    out = []
    for arm in arms:
        key = f"{arm}/{ARM_NODE}"
        params = {**cfg.get(ARM_NODE, {}), **cfg.get(key, {}), **overrides.get(ARM_NODE, {}), **overrides.get(key, {})}
        out.append(
            GraphNode(
                ARM_NODE, ARM_NODE, script(ARM_NODE), prefix=nice_prefix(cfg, key), namespace=arm, parameters=params
            )
        )
    if mode != "sim":
        channels: dict[str, str] = {}
        for n in out:
            channel = str(n.parameters.get("can_channel", "can0"))
            if channel in channels:
                raise LaunchError(
                    f"{channels[channel]}/{ARM_NODE} and {n.namespace}/{ARM_NODE} both drive CAN channel {channel!r}: "
                    f"set each arm's can_channel in its own section ({n.namespace}/{ARM_NODE}: can_channel: ...)"
                )
            channels[channel] = str(n.namespace)
    return out


def graph_nodes(
    mode: str,
    cfg: Mapping[str, Mapping[str, Any]],
    cameras: Iterable[str],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    dashboard: str = "",
    sim_headset: str | bool = "",
    headset: str = "",
) -> list[GraphNode]:
    """The graph of ``mode`` from a config, in start order.

    ``mode``: sim (simulated headset and cameras) or robot (realsense2_camera); ``overrides``: per-node parameters on top of it (the launch arguments);
    ``dashboard``, ``sim_headset``: the launch arguments ("" = ``piper_launch.dashboard``,
    ``piper_launch.sim_quest.enabled``).
    """
    overrides = overrides or {}
    cameras = list(cameras)

    def ours(
        name: str, executable: str, script: str, derived: Mapping[str, str] | None = None, **params: Any
    ) -> GraphNode:
        return GraphNode(
            name,
            executable,
            script,
            prefix=nice_prefix(cfg, name),
            parameters={**overrides.get(name, {}), **params},
            derived=dict(derived or {}),
        )

    nodes: list[GraphNode] = []
    peer: dict[str, dict[str, Any]] = {}
    why: dict[str, dict[str, str]] = {}
    kind = headset_kind(mode, cfg, sim_headset, headset, overrides)
    arms = launch_arms(cfg, overrides)
    use_headset = kind != "none"  # a SpaceMouse needs no headset node
    if kind == "web":  # the page's relay, where quest_bridge and quest_video connect (their own host/port)
        merged = {n: {**cfg.get(n, {}), **overrides.get(n, {})} for n in ("quest_bridge", "quest_video")}
        web = QuestWebSettings.from_config(cfg)
        web.check(merged, headset_video(cfg))
        nodes.append(
            GraphNode(QUEST_WEB[0], *QUEST_WEB, ros_node=False, args=tuple(web.argv(merged, headset_video(cfg))))
        )
    if kind == "sim":
        quest = SimQuestSettings.from_config(cfg)
        video = headset_video(cfg)
        quest_args = quest.argv(video, two_hands=bool(arms))  # two arms: both hands drive
        nodes.append(GraphNode(SIM_QUEST[0], *SIM_QUEST, ros_node=False, args=tuple(quest_args)))
        peer["quest_bridge"] = {"host": str(quest.host), "port": int(quest.port)}
        why["quest_bridge"] = {
            k: f"the simulated headset's {k} ({LAUNCH_SECTION}.sim_quest.{k}={v!r})"
            for k, v in peer["quest_bridge"].items()
        }
        if video:  # quest_video streams to the simulated headset's video channel
            peer["quest_video"] = {"host": str(quest.host), "port": int(quest.video_port)}
            why["quest_video"] = {
                "host": f"the simulated headset's host ({LAUNCH_SECTION}.sim_quest.host={quest.host!r})",
                "port": f"the simulated headset's video channel ({LAUNCH_SECTION}.sim_quest."
                f"video_port={quest.video_port!r})",
            }
    for name in START_ORDER[:3]:
        if name not in cfg or (not use_headset and name == "quest_bridge"):  # no config section: not started
            continue
        if name == ARM_NODE and arms:
            nodes += arm_nodes(mode, cfg, arms, overrides)
        else:
            nodes.append(ours(name, name, script(name), why.get(name), **peer.get(name, {})))
    driver_note = realsense_check() if mode != "sim" and cameras else None  # refuses a driver too old
    if mode == "sim" and cameras:  # one process runs every sim camera; with several arms each draws every flange
        derived = {"cameras": f"the graph's cameras ({LAUNCH_SECTION}.cameras)"}
        given: dict[str, Any] = {"cameras": cameras}
        if arms:
            derived["arms"] = f"the graph's arms ({LAUNCH_SECTION}.arms)"
            given["arms"] = list(arms)
        nodes.append(dataclasses.replace(ours(SIM_CAMERAS[0], *SIM_CAMERAS, derived, **given), hosts=tuple(cameras)))
    for cam in cameras if mode != "sim" else ():  # one realsense2_camera process per camera
        nodes.append(
            GraphNode(
                cam,
                "realsense2_camera_node",
                package=REALSENSE_PACKAGE,
                namespace="",
                parameters=realsense_parameters(cfg, cam),
                notes=(driver_note,) if driver_note else (),
            )
        )
    policy = policy_enabled(cfg, overrides)
    if policy:  # rollouts are data: the LeRobot rows say who acted (complementary_info.actor)
        peer.setdefault("lerobot_recorder", {})["actor_topic"] = POLICY_ACTOR
        why.setdefault("lerobot_recorder", {})["actor_topic"] = f"the policy node's actor topic ({POLICY_ACTOR})"
    nodes += [
        ours(name, name, script(name), why.get(name), **peer.get(name, {}))
        for name in START_ORDER[3:]
        if name in cfg and (name != "quest_video" or (use_headset and headset_video(cfg)))
    ]
    if policy:  # launch argument policy:=SPEC (ROS executable "policy")
        nodes.append(ours(POLICY_NODE[0], POLICY_NODE[0], POLICY_NODE[1]))
    dash = dashboard_params(
        cfg, dashboard, [name for n in nodes if n.ros_node for name in n.node_names], overrides, arms
    )
    if dash is not None:  # the read-only web dashboard expects exactly the nodes started here, and their arms
        nodes.append(ours(DASHBOARD_NODE, DASHBOARD_NODE, script(DASHBOARD_NODE), **dash))
    return nodes


def launch_graph(
    mode: str,
    config_file: str | Path,
    dashboard: str = "",
    sim_headset: str = "",
    headset: str = "",
    **launch_args: str,
) -> list[GraphNode]:
    """What ``ros2 launch piper_recorder <mode>.launch.py`` starts.

    That is the config file plus the launch arguments (task, root, rgbd_path, backend, cameras, policy, policy_root) as per-node parameters.
    """
    cfg = read_config(config_file)
    cameras, overrides = launch_overrides(cfg, **launch_args)
    return graph_nodes(mode, cfg, cameras, overrides, dashboard, sim_headset, headset)

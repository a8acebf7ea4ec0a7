"""The whole simulated graph from config/sim.yaml: `ros2 launch piper_recorder sim.launch.py`.

Starts the simulated headset (piper-sim-quest, a plain process), piper_arm (CAN emulator),
quest_bridge, teleop, one sim_camera per camera listed in ``piper_launch.cameras``, and both
recorders, all with ``parameters=[<config>, <launch arguments>]`` so the YAML file is the single
source of node parameters. The graph itself is ``piper_recorder.graph.graph_node.graph_nodes``, which
piper-launch starts too. Launch arguments override a few parameters: ``task``, ``root`` (LeRobot
root), ``rgbd_path``, ``backend`` (arm), ``cameras`` (comma-separated subset), ``config`` (another
parameter file); ``sim_headset:=false`` starts no simulated headset (quest_bridge keeps the config's
host/port, for a real headset), as ``piper-launch sim --no-sim-headset``; ``headset:=web`` drives the
simulated arm from a real headset's browser (quest_web: the WebXR page), as ``piper-launch sim --headset web``;
``teleop_input:=spacemouse`` drives teleop from a 3Dconnexion SpaceMouse (``teleop.spacemouse.device``) and
starts no headset node.
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    OpaqueFunction,
    SetEnvironmentVariable,
    UnsetEnvironmentVariable,
)
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.substitutions import ExecutableInPackage

from launch import LaunchDescription
from piper_recorder.graph.arguments import GRAPH_ARGUMENTS, LAUNCH_ARGUMENTS
from piper_recorder.graph.graph_node import GraphNode, launch_graph
from piper_recorder.graph.install import PACKAGE
from piper_recorder.graph.rosenv import launch_dds_env


def _action(p: GraphNode, config: str) -> ExecuteProcess | Node:
    if not p.ros_node:  # the simulated headset, or the WebXR page's server (headset:=web)
        return ExecuteProcess(cmd=[ExecutableInPackage(p.executable, p.package), *p.args], name=p.name, output="screen")
    # exec_name labels the output: without it launch uses the first word of the command, "nice" with a prefix.
    # A process that runs several nodes (the sim cameras) gets no name: it would remap every node's name to it;
    # its parameters then go to every node in it (launch_ros keys them /**), which take only the ones they declare.
    return Node(
        package=p.package,
        executable=p.executable,
        name=None if p.hosts else p.name,
        namespace=p.namespace,
        exec_name=p.key,
        output="screen",
        prefix=p.prefix,
        parameters=[config, p.parameters],
    )


def _graph(context, *_args, **_kwargs):
    arg = {k: LaunchConfiguration(k).perform(context) for k in LAUNCH_ARGUMENTS}
    config = arg["config"] or os.path.join(get_package_share_directory(PACKAGE), "config", "sim.yaml")
    return [_action(p, config) for p in launch_graph("sim", config, **{k: arg[k] for k in GRAPH_ARGUMENTS})]


def _loopback_dds() -> list[SetEnvironmentVariable | UnsetEnvironmentVariable]:
    """Every node's DDS sockets on loopback, images sized for shared memory.

    The profile is config/fastdds_loopback.xml unless the shell names one of its own, set in the variables
    this install's Fast DDS and rcl read (piper_recorder/graph/rosenv.py ``launch_dds_env``).
    """
    return [
        SetEnvironmentVariable(k, v) if v is not None else UnsetEnvironmentVariable(k)
        for k, v in launch_dds_env().items()
    ]


def generate_launch_description() -> LaunchDescription:
    """The simulated graph: loopback DDS, the launch arguments, then the nodes of the chosen config."""
    return LaunchDescription(
        _loopback_dds()
        + [DeclareLaunchArgument(k, default_value="", description=h) for k, h in LAUNCH_ARGUMENTS.items()]
        + [OpaqueFunction(function=_graph)]
    )

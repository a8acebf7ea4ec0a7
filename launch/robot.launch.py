"""The real robot from config/robot.yaml: `ros2 launch piper_recorder robot.launch.py`.

One ``realsense2_camera`` node per camera in ``piper_launch.cameras``, started with ``name=<camera>``
in the root namespace so that its topics are ``/<camera>/color/image_raw`` and
``/<camera>/aligned_depth_to_color/image_raw`` (realsense2_camera >= 4.55.1 names topics
``/<camera_namespace>/<camera_name>/...``; an older one, found through the ament index, is refused:
its topics would be ``/color/image_raw`` for every camera). Its serial_no comes from the camera's section of
the config, and what the recorders need of it (rgb_camera.color_profile, a D405's depth_module.color_profile,
and depth_module.depth_profile 640x480x30, the image QoS color_qos/depth_qos, align_depth.enable,
enable_sync, ...) from ``graph.realsense.realsense_parameters`` unless the section states it; the profiles are also
given under the names realsense-ros before 4.55.1 reads (rgb_camera.profile, depth_module.profile). The
recorders' camera lists and serials follow ``piper_launch.cameras``
(``piper_recorder.params.derived``). Each process's output
is labelled with its node name (``exec_name``). Then quest_bridge (the headset through `adb forward
tcp:8735 tcp:8735`), teleop, piper_arm on can0 and both recorders. The graph itself is
``piper_recorder.graph.graph_node.graph_nodes``, which piper-launch starts too.
Launch arguments: ``task``, ``root``, ``rgbd_path``, ``backend``, ``cameras`` (comma-separated
subset), ``config``, ``headset`` (native: the app over adb forward; web: the WebXR page served by
quest_web, ``adb reverse tcp:8737 tcp:8737`` and http://localhost:8737 in the Quest Browser),
``teleop_input`` (headset | spacemouse: a SpaceMouse instead of quest_bridge). DDS: the loopback profile (shared memory sized for frames), unless the shell sets
``FASTDDS_DEFAULT_PROFILES_FILE`` itself.
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    LogInfo,
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
    if not p.ros_node:  # the WebXR headset page's server (headset:=web), a plain process
        return ExecuteProcess(cmd=[ExecutableInPackage(p.executable, p.package), *p.args], name=p.name, output="screen")
    return Node(
        package=p.package,
        executable=p.executable,
        name=p.name,
        namespace=p.namespace,
        exec_name=p.key,
        output="screen",
        prefix=p.prefix,
        parameters=[config, p.parameters],
    )


def _graph(context, *_args, **_kwargs):
    arg = {k: LaunchConfiguration(k).perform(context) for k in LAUNCH_ARGUMENTS}
    config = arg["config"] or os.path.join(get_package_share_directory(PACKAGE), "config", "robot.yaml")
    graph = launch_graph("robot", config, **{k: arg[k] for k in GRAPH_ARGUMENTS})
    notes = dict.fromkeys(note for p in graph for note in p.notes)  # each once
    return [LogInfo(msg=note) for note in notes] + [_action(p, config) for p in graph]


def _loopback_dds() -> list[SetEnvironmentVariable | UnsetEnvironmentVariable]:
    """The nodes on one computer: DDS on loopback, images sized for shared memory.

    The profile is config/fastdds_loopback.xml unless the shell names a Fast DDS profile of its own (README
    "Restricting DDS on the robot"). The variables are the ones this install's Fast DDS and rcl read
    (``launch_dds_env``).
    """
    return [
        SetEnvironmentVariable(k, v) if v is not None else UnsetEnvironmentVariable(k)
        for k, v in launch_dds_env().items()
    ]


def generate_launch_description() -> LaunchDescription:
    """The robot graph: loopback DDS, the launch arguments, then the nodes of the chosen config."""
    return LaunchDescription(
        _loopback_dds()
        + [DeclareLaunchArgument(k, default_value="", description=h) for k, h in LAUNCH_ARGUMENTS.items()]
        + [OpaqueFunction(function=_graph)]
    )

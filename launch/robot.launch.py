"""The real robot from config/robot.yaml: `ros2 launch piper_recorder robot.launch.py`.

One ``realsense2_camera`` node per camera in ``piper_launch.cameras``, started with ``name=<camera>``
in the root namespace so that its topics are ``/<camera>/color/image_raw`` and
``/<camera>/aligned_depth_to_color/image_raw`` (realsense2_camera 4.x names topics
``/<camera_namespace>/<camera_name>/...``). Its parameters (serial_no, rgb_camera.color_profile,
depth_module.depth_profile, align_depth.enable, enable_sync, ...) come from the camera's section of
the config; the profiles are also given under the names realsense-ros before 4.55.1 reads
(rgb_camera.profile, depth_module.profile: ``launcher.realsense_parameters``). Each process's output
is labelled with its node name (``exec_name``). Then quest_bridge (the headset through `adb forward tcp:8735 tcp:8735`), teleop, piper_arm on can0 and both recorders.
Launch arguments: ``task``, ``root``, ``rgbd_path``, ``backend``, ``cameras`` (comma-separated
subset), ``config``.
"""
from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from piper_recorder.launcher import (LAUNCH_ARGUMENTS, headset_video, launch_overrides, load_config,
                                     realsense_parameters)

PACKAGE = "piper_recorder"


def _graph(context, *_args, **_kwargs):
    arg = {k: LaunchConfiguration(k).perform(context) for k in LAUNCH_ARGUMENTS}
    config = arg["config"] or os.path.join(get_package_share_directory(PACKAGE), "config", "robot.yaml")
    cfg = load_config(config)
    cameras, overrides = launch_overrides(cfg, **{k: arg[k] for k in ("task", "root", "rgbd_path", "backend",
                                                                        "cameras")})
    actions = [
        Node(package="realsense2_camera", executable="realsense2_camera_node", name=cam, namespace="",
             exec_name=cam, output="screen", parameters=[config, realsense_parameters(cfg, cam)])
        for cam in cameras
    ]

    def node(name: str, executable: str) -> Node:
        return Node(package=PACKAGE, executable=executable, name=name, exec_name=name, output="screen",
                    parameters=[config, overrides.get(name, {})])

    actions += [node("quest_bridge", "quest_bridge"), node("teleop", "teleop"), node("piper_arm", "piper_arm"),
                node("lerobot_recorder", "lerobot_recorder"), node("rgbd_recorder", "rgbd_recorder")]
    if headset_video(cfg):   # panels + HUD on the headset's second port (adb forward tcp:8736 tcp:8736)
        actions.append(node("quest_video", "quest_video"))
    return actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([DeclareLaunchArgument(k, default_value="", description=h)
                              for k, h in LAUNCH_ARGUMENTS.items()]
                             + [OpaqueFunction(function=_graph)])

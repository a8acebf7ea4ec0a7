"""The whole simulated graph from config/sim.yaml: `ros2 launch piper_recorder sim.launch.py`.

Starts the simulated headset (piper-sim-quest, a plain process), quest_bridge, teleop, piper_arm
(CAN emulator), one sim_camera per camera listed in ``piper_launch.cameras``, and both recorders,
all with ``parameters=[<config>]`` so the YAML file is the single source of node parameters.
Launch arguments override a few of them: ``task``, ``root`` (LeRobot root), ``rgbd_path``,
``backend`` (arm), ``cameras`` (comma-separated subset), ``config`` (another parameter file).
"""
from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.substitutions import ExecutableInPackage

from piper_recorder.launcher import (LAUNCH_ARGUMENTS, LAUNCH_SECTION, headset_video, launch_overrides,
                                     load_config, nice_prefix)
from piper_recorder.rosenv import FASTDDS_PROFILE_VARS, loopback_env

PACKAGE = "piper_recorder"


def _graph(context, *_args, **_kwargs):
    arg = {k: LaunchConfiguration(k).perform(context) for k in LAUNCH_ARGUMENTS}
    config = arg["config"] or os.path.join(get_package_share_directory(PACKAGE), "config", "sim.yaml")
    cfg = load_config(config)
    cameras, overrides = launch_overrides(cfg, **{k: arg[k] for k in ("task", "root", "rgbd_path", "backend",
                                                                        "cameras")})
    quest = cfg.get(LAUNCH_SECTION, {}).get("sim_quest", {})
    headset_cmd = [ExecutableInPackage("sim_quest", PACKAGE), "--host", str(quest.get("host", "127.0.0.1")),
                   "--port", str(quest.get("port", 8735)), "--script", str(quest.get("script", "demo")),
                   "--rate", str(quest.get("rate", 90.0))]
    if not quest.get("buttons", False):
        headset_cmd.append("--no-buttons")
    if headset_video(cfg):
        headset_cmd += ["--video-port", str(quest.get("video_port", 8736))]
    actions = [ExecuteProcess(cmd=headset_cmd, name="sim_quest", output="screen")]

    def node(name: str, executable: str) -> Node:
        # exec_name labels the output: without it launch uses the first word of the command, "nice" with a prefix
        return Node(package=PACKAGE, executable=executable, name=name, exec_name=name, output="screen",
                    prefix=nice_prefix(cfg, name), parameters=[config, overrides.get(name, {})])

    actions += [node("quest_bridge", "quest_bridge"), node("teleop", "teleop"), node("piper_arm", "piper_arm")]
    actions += [node(cam, "sim_camera") for cam in cameras]
    actions += [node("lerobot_recorder", "lerobot_recorder"), node("rgbd_recorder", "rgbd_recorder")]
    if headset_video(cfg):
        actions.append(node("quest_video", "quest_video"))
    return actions


def _loopback_dds() -> list[SetEnvironmentVariable]:
    """Keep every node's DDS sockets on loopback (config/fastdds_loopback.xml; see piper_recorder/rosenv.py)."""
    env = loopback_env({k: v for k, v in os.environ.items() if k == "RMW_IMPLEMENTATION"})
    return [SetEnvironmentVariable(k, env[k]) for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", *FASTDDS_PROFILE_VARS)
            if k in env]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(_loopback_dds()
                             + [DeclareLaunchArgument(k, default_value="", description=h)
                                for k, h in LAUNCH_ARGUMENTS.items()]
                             + [OpaqueFunction(function=_graph)])

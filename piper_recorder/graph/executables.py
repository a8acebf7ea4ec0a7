"""The package's executables, stated once: each node's ROS executable and console script, and the tools.

A node's ROS executable (``ros2 run``, launch files, ``GraphNode.executable``) and console script (pip,
piper-launch) are the same entry point. setup.py reads this file without importing the package, so it
imports nothing.
"""

from __future__ import annotations

# ROS executable (a node's default name) -> (console script, entry point)
NODE_EXECUTABLES: dict[str, tuple[str, str]] = {
    "quest_bridge": ("piper-quest-bridge", "piper_recorder.nodes.quest_bridge:main"),
    "teleop": ("piper-teleop", "piper_recorder.nodes.teleop:main"),
    "piper_arm": ("piper-arm", "piper_recorder.nodes.piper_arm:main"),
    "sim_camera": ("piper-sim-camera", "piper_recorder.nodes.sim_camera:main"),
    "sim_cameras": ("piper-sim-cameras", "piper_recorder.nodes.sim_cameras:main"),
    "sim_quest": ("piper-sim-quest", "piper_recorder.quest.sim_server:main"),
    "lerobot_recorder": ("piper-lerobot-recorder", "piper_recorder.nodes.lerobot_recorder:main"),
    "rgbd_recorder": ("piper-rgbd-recorder", "piper_recorder.nodes.rgbd_recorder:main"),
    "replay": ("piper-replay", "piper_recorder.nodes.replay:main"),
    "policy": ("piper-policy", "piper_recorder.nodes.policy:main"),
    "dashboard": ("piper-dashboard", "piper_recorder.nodes.dashboard:main"),
    "quest_video": ("piper-quest-video", "piper_recorder.nodes.quest_video:main"),
    "quest_web": ("piper-quest-web", "piper_recorder.quest.web_server:main"),
}
# console script -> entry point, for the tools beside the graph
TOOL_SCRIPTS: dict[str, str] = {
    "piper-demo": "piper_recorder.cli.demo:main",
    "piper-launch": "piper_recorder.cli.launch:main",
    "piper-validate": "piper_recorder.cli.validate:main",
    "piper-finalize": "piper_recorder.cli.finalize:main",
    "piper-repair": "piper_recorder.cli.repair:main",
    "piper-bag2dataset": "piper_recorder.cli.bag2dataset:main",
    "piper-view": "piper_recorder.cli.view:main",
    "piper-export": "piper_recorder.cli.export:main",
    "piper-recover": "piper_recorder.cli.recover:main",
    "piper-dataset": "piper_recorder.cli.dataset:main",
    "piper-policy-server": "piper_recorder.policy.server.__main__:main",  # runs in the trainer's venv
}
# the processes the graph starts whose executable is not their node name: (ROS executable, console script)
SIM_CAMERA = ("sim_camera", NODE_EXECUTABLES["sim_camera"][0])
SIM_CAMERAS = ("sim_cameras", NODE_EXECUTABLES["sim_cameras"][0])  # the simulated graph's cameras, one process
SIM_QUEST = ("sim_quest", NODE_EXECUTABLES["sim_quest"][0])
QUEST_WEB = ("quest_web", NODE_EXECUTABLES["quest_web"][0])
POLICY_NODE = ("policy", NODE_EXECUTABLES["policy"][0])  # node name, console script; started when a policy is set


def script(executable: str) -> str:
    """The console script of a ROS executable of this package."""
    return NODE_EXECUTABLES[executable][0]


def console_scripts() -> dict[str, str]:
    """Every entry point setup.py installs: each console script, and each node again under its ROS name.

    colcon puts the latter in lib/piper_recorder for ``ros2 run`` (setup.cfg).
    """
    nodes = dict(NODE_EXECUTABLES.values())
    return {**nodes, **TOOL_SCRIPTS, **{exe: entry for exe, (_, entry) in NODE_EXECUTABLES.items()}}

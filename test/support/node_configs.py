"""Which config dataclasses each of our nodes declares as its ROS parameters (and under which prefix), read
from the node modules: what the config files and the defaults are checked against.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path


def config_classes(node: str) -> list[tuple[type, str]]:
    """(config dataclass, parameter prefix) pairs a node declares, read from its module."""
    if node == "piper_arm":
        from piper_recorder.piper.backends import ArmConfig

        return [(ArmConfig, "")]
    if node == "teleop":
        mod = importlib.import_module("piper_recorder.nodes.teleop")
        src = Path(mod.__file__).read_text()
        out = []
        for cls_name, prefix in re.findall(r'declare_config\(self, (\w+)(?:, "([\w.]+)")?\)', src):
            out.append((getattr(mod, cls_name), prefix))
        return out
    module = {
        "quest_bridge": "quest_bridge",
        "lerobot_recorder": "lerobot_recorder",
        "rgbd_recorder": "rgbd_recorder",
        "sim_camera": "sim_camera",
        "quest_video": "quest_video",
    }[node]
    mod = importlib.import_module(f"piper_recorder.nodes.{module}")
    classes = {
        "quest_bridge": "QuestBridgeConfig",
        "lerobot_recorder": "LeRobotRecorderConfig",
        "rgbd_recorder": "RgbdRecorderConfig",
        "sim_camera": "SimCameraConfig",
        "quest_video": "QuestVideoConfig",
    }
    return [(getattr(mod, classes[node]), "")]

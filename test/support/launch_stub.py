"""Stand-ins for `launch`, `launch_ros` and the ament index, so that the launch files' graph builders run
where ROS's launch is not installed: each action records its arguments (``graph`` returns what ``ros2 launch``
would start). The ``stub_launch`` fixture installs them (test/conftest.py lists this module in
``pytest_plugins``); ``install_realsense`` adds a realsense2_camera of a given version to the stand-in index.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from support.paths import ROOT


class Action:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class Node(Action):
    pass


class ExecuteProcess(Action):
    pass


class OpaqueFunction(Action):
    pass


class SetEnvironmentVariable(Action):
    pass


class LogInfo(Action):
    pass


class PackageNotFoundError(KeyError):
    pass


class UnsetEnvironmentVariable(Action):
    pass


class LaunchConfiguration:
    def __init__(self, name: str, **_kw):
        self.name = name

    def perform(self, context: dict) -> str:
        return context[self.name]


def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


@pytest.fixture
def stub_launch(monkeypatch) -> dict[str, Path]:
    """Stand-ins for launch, launch_ros and the ament index; returns the index's package -> share directory
    (a test adds realsense2_camera with ``install_realsense``).
    """
    shares = {"piper_recorder": ROOT}

    def get_package_share_directory(pkg: str) -> str:
        if pkg not in shares:
            raise PackageNotFoundError(pkg)
        return str(shares[pkg])

    mods = {
        "launch": _module("launch", LaunchDescription=Action),
        "launch.actions": _module(
            "launch.actions",
            DeclareLaunchArgument=Action,
            ExecuteProcess=ExecuteProcess,
            LogInfo=LogInfo,
            OpaqueFunction=OpaqueFunction,
            SetEnvironmentVariable=SetEnvironmentVariable,
            UnsetEnvironmentVariable=UnsetEnvironmentVariable,
        ),
        "launch.substitutions": _module("launch.substitutions", LaunchConfiguration=LaunchConfiguration),
        "launch_ros": _module("launch_ros"),
        "launch_ros.actions": _module("launch_ros.actions", Node=Node),
        "launch_ros.substitutions": _module("launch_ros.substitutions", ExecutableInPackage=Action),
        "ament_index_python": _module("ament_index_python"),
        "ament_index_python.packages": _module(
            "ament_index_python.packages",
            get_package_share_directory=get_package_share_directory,
            PackageNotFoundError=PackageNotFoundError,
        ),
    }
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return shares


def install_realsense(shares: dict[str, Path], tmp_path: Path, version: str) -> Path:
    """A realsense2_camera share directory in the stand-in ament index, with the package.xml of ``version``."""
    share = tmp_path / f"realsense2_camera-{version}" / "share" / "realsense2_camera"
    share.mkdir(parents=True)
    (share / "package.xml").write_text(
        f'<?xml version="1.0"?>\n<package format="3">\n  <name>realsense2_camera'
        f"</name>\n  <version>{version}</version>\n</package>\n"
    )
    shares["realsense2_camera"] = share
    return share / "package.xml"


def graph(name: str, **args: str) -> list[Action]:
    """The actions ``ros2 launch piper_recorder <name>.launch.py key:=value ...`` would run."""
    from piper_recorder.graph.arguments import LAUNCH_ARGUMENTS  # here: the plugin loads with every test session

    spec = importlib.util.spec_from_file_location(f"{name}_launch", ROOT / "launch" / f"{name}.launch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (ld,) = mod.generate_launch_description().args
    (opaque,) = [a for a in ld if isinstance(a, OpaqueFunction)]
    context = dict.fromkeys(LAUNCH_ARGUMENTS, "") | args
    return opaque.kwargs["function"](context)

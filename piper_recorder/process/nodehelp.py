"""The ROS nodes' command lines (``piper-dashboard --help``, ``dashboard --ros-args ...``), checked before ROS.

rcl ignores ``--help`` and starts the node (a dashboard serving, a recorder creating its root), and refuses
what it cannot parse with an RCLError traceback from ``rclpy.init``. So a node's ``run_node`` asks
``wants_help`` first (prints ``node_usage``, exits 0), then ``argument_problem`` (names the problem in one
line, exits 2), both before rclpy starts.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence

HELP_FLAGS = ("-h", "--help")


def wants_help(argv: Sequence[str]) -> bool:
    """Whether ``-h``/``--help`` is among the program's own arguments.

    ``argv[0]`` is the program; anything from ``--ros-args`` on is rcl's, where a ``-h`` could be a value.
    """
    own = list(argv[1:])
    if "--ros-args" in own:
        own = own[: own.index("--ros-args")]
    return any(a in HELP_FLAGS for a in own)


def node_usage(prog: str, doc: str | None) -> str:
    """The usage text: how parameters are given, then the node's module docstring (what it does)."""
    name = os.path.basename(prog) or "node"
    return (
        f"usage: {name} [--ros-args [-p NAME:=VALUE]... [--params-file FILE] [-r FROM:=TO]...]\n\n"
        f"{(doc or '').strip()}\n\n"
        "A ROS 2 node: its parameters are ROS parameters (-p, --params-file; config/sim.yaml and\n"
        "config/robot.yaml hold every node's), listed on a running node by `ros2 param list`.\n"
        "It runs until SIGINT/SIGTERM.\n"
    )


def argument_problem(argv: Sequence[str]) -> str | None:
    """What is wrong with a node's command line (``argv[0]`` is the program), in one line, or None.

    A ``--params-file`` that is not a file, what rcl cannot parse (``-p NAME`` without ``:=VALUE``, a remap
    without ``:=``, an unknown log level, a flag without its value), or an argument outside ``--ros-args``
    (a node takes no other: its settings are ROS parameters). Parses only; starts nothing.
    """
    from rclpy.impl.implementation_singleton import rclpy_implementation
    from rclpy.utilities import remove_ros_args

    args = list(argv)
    for flag, path in itertools.pairwise(args):
        if flag == "--params-file" and not os.path.isfile(path):  # rcl: "Error parsing a event near line 0"
            return f"--params-file {path}: {'not a file' if os.path.exists(path) else 'no such file'}"
    try:
        rest = remove_ros_args(args)
    except rclpy_implementation.RCLError as exc:
        return f"bad --ros-args: {rcl_message(exc)}"
    if rest[1:]:
        return (
            f"unrecognized arguments: {' '.join(rest[1:])} (a node's settings are ROS parameters: "
            "--ros-args -p NAME:=VALUE or --params-file FILE)"
        )
    return None


def rcl_message(exc: BaseException) -> str:
    """An RCLError's text on one line, without rcl's source locations and preamble."""
    text = re.sub(r",? at /\S+?:\d+", "", str(exc))
    text = text.replace("Failed to parse ROS arguments: ", "").replace("failed to initialize rcl: ", "")
    return " ".join(text.split())

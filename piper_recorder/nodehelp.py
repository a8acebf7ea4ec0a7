"""``--help`` for the ROS nodes' console scripts (``piper-dashboard --help``, ``dashboard --help``), no ROS.

A node's arguments go to rcl, which ignores ``--help`` and starts the node: a user asking for help got a
running node (and a dashboard serving, a recorder creating its root in the working directory). The nodes'
``run_node`` asks ``wants_help`` first and, if so, prints ``node_usage`` and exits 0 before rclpy starts.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

HELP_FLAGS = ("-h", "--help")


def wants_help(argv: Sequence[str]) -> bool:
    """``-h``/``--help`` among the program's own arguments (``argv[0]`` is the program; anything from
    ``--ros-args`` on is rcl's, where a ``-h`` could be a value)."""
    own = list(argv[1:])
    if "--ros-args" in own:
        own = own[:own.index("--ros-args")]
    return any(a in HELP_FLAGS for a in own)


def node_usage(prog: str, doc: str | None) -> str:
    """The usage text: how parameters are given, then the node's module docstring (what it does)."""
    name = os.path.basename(prog) or "node"
    return (f"usage: {name} [--ros-args [-p NAME:=VALUE]... [--params-file FILE] [-r FROM:=TO]...]\n\n"
            f"{(doc or '').strip()}\n\n"
            "A ROS 2 node: its parameters are ROS parameters (-p, --params-file; config/sim.yaml and\n"
            "config/robot.yaml hold every node's), listed on a running node by `ros2 param list`.\n"
            "It runs until SIGINT/SIGTERM.\n")

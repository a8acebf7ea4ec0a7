"""ROS 2 parameter files (config/sim.yaml, config/robot.yaml): the one reader.

The launchers take every node's section from it, the recorder config classes (``recording.config
.load_config``, used by the bag converter and piper-recover) one node's; rcl reads the same files for
the nodes themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

PARAMS = "ros__parameters"


def read_params_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """A ROS 2 parameter file as {node: {param: value}} (``ros__parameters`` unwrapped).

    Raises ValueError naming the file when it is not a mapping of node names to ``ros__parameters``.
    """
    doc = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a ROS 2 parameter file (expected a mapping of node names)")
    out: dict[str, dict[str, Any]] = {}
    for node, body in doc.items():
        if not isinstance(body, dict) or PARAMS not in body:
            raise ValueError(f"{path}: top-level key {node!r} has no {PARAMS}")
        params = body[PARAMS] or {}
        if not isinstance(params, dict):
            raise ValueError(f"{path}: {node}.{PARAMS} is not a mapping")
        out[str(node)] = dict(params)
    return out


def node_params(doc: Mapping[str, Mapping[str, Any]], node: str) -> dict[str, Any]:
    """The parameters rcl gives node ``node`` from a file.

    The ``/**`` wildcard section, then the node's own (``node`` or ``/node``) on top.
    """
    out: dict[str, Any] = {}
    for key in ("/**", node, f"/{node}"):
        out.update(doc.get(key) or {})
    return out

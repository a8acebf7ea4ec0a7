"""sim_cameras: the simulated graph's cameras, each a ``sim_camera`` node of its own, all in one process.

The ``sim_cameras`` node (a ``HostNode``) runs one ``SimCamera`` per name in its ``cameras`` parameter, as
realsense2_camera's cameras may share one component container: each camera keeps its own parameters (its
section), topics and capture thread, and each arm pose reaches the process once. ``arms`` goes to every camera.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field

from rclpy.parameter import Parameter
from rclpy.validate_node_name import validate_node_name

from piper_recorder.names import SIM_CAMERAS_NODE
from piper_recorder.nodes.plumbing.host import HostNode
from piper_recorder.nodes.plumbing.parameters import declare_config
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.sim_camera import SimCamera


@dataclass
class SimCamerasConfig:
    """The camera process's parameters (the ``sim_cameras`` node): its cameras, and the arms every one draws."""

    cameras: list[str] = field(default_factory=list)  # node names; each camera's parameters: its own section
    arms: list[str] = field(default_factory=list)  # given to every camera as its arms; empty: each keeps its own

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not self.cameras:
            raise ValueError("cameras: name at least one camera (each takes its parameters from its own section)")
        twice = sorted({c for c in self.cameras if self.cameras.count(c) > 1})
        if twice:
            raise ValueError(f"cameras: {', '.join(twice)} named more than once")
        for cam in self.cameras:
            try:
                validate_node_name(cam)
            except Exception as exc:
                raise ValueError(f"cameras: {cam!r} is not a valid node name ({str(exc).splitlines()[0]})") from exc


class SimCameras(HostNode):
    """The node of the sim cameras' process: it runs one ``SimCamera`` per name in ``cameras`` (module doc)."""

    def __init__(self) -> None:
        super().__init__(SIM_CAMERAS_NODE)
        self.cfg = declare_config(self, SimCamerasConfig)
        arms = [Parameter("arms", Parameter.Type.STRING_ARRAY, list(self.cfg.arms))] if self.cfg.arms else None
        self.host(functools.partial(SimCamera, cam, arms) for cam in self.cfg.cameras)


def main(args: list[str] | None = None) -> None:
    """Run the cameras named by ``cameras`` in one process (console script ``piper-sim-cameras``)."""
    sys.exit(run_node(SimCameras, args))


if __name__ == "__main__":
    main()

"""XR stage frame -> robot base frame.

OpenXR stage: x right, y up, z back. Robot base: x forward, y left, z up. The fixed remap is
robot_x = -xr_z, robot_y = -xr_x, robot_z = xr_y (a proper rotation, det +1), optionally followed by
a yaw about the robot's z axis so an operator standing at an angle to the arm still pushes
"forward" into the arm's +x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .rotations import rot_z

# Rows: robot axes expressed in XR coordinates.
XR_TO_ROBOT = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


@dataclass
class FrameConfig:
    """The XR stage -> arm base remap's setting: a yaw offset about the robot's +z."""

    yaw_offset_deg: float = 0.0  # rotation about robot +z applied after the fixed remap

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not math.isfinite(self.yaw_offset_deg) or abs(self.yaw_offset_deg) > 360.0:
            raise ValueError(f"yaw_offset_deg must be finite and within +-360, got {self.yaw_offset_deg}")


def remap_matrix(cfg: FrameConfig) -> np.ndarray:
    """M such that v_robot = M @ v_xr; rotations map as R_robot = M R_xr M^T."""
    return rot_z(math.radians(cfg.yaw_offset_deg)) @ XR_TO_ROBOT

"""XR stage frame -> robot base frame.

OpenXR stage: x right, y up, z back. Robot base: x forward, y left, z up. The fixed remap is
robot_x = -xr_z, robot_y = -xr_x, robot_z = xr_y (a proper rotation, det +1), optionally followed by
a yaw about the robot's z axis so an operator standing at an angle to the arm still pushes
"forward" into the arm's +x.

With two arms the remap takes the stage into the operator's frame (x forward, y left, z up, as the
operator faces the table), which both arms share, and each arm's base calibration (``ArmBaseConfig``:
where its base faces in that frame) takes it on into that arm's base: a hand moving forward moves its
flange forward in the world, even for an arm whose base faces the operator. A base's position does not
enter: the mapping moves the flange by the hand's displacement, which is the same wherever the base stands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .rotations import rot_z

BASE_ANGLES = ("yaw_deg", "pitch_deg", "roll_deg")

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


@dataclass
class ArmBaseConfig:
    """Where one arm's base faces in the operator's frame (x forward, y left, z up): yaw, then pitch, then roll.

    Yaw about the operator's +z: the direction the base's +x points, counter-clockwise from the operator's
    forward seen from above (0: the arm faces away from the operator, like the operator; 180: the arm faces
    the operator; 90: it faces the operator's left). Pitch about the yawed +y, roll about the result's +x
    (intrinsic z-y'-x'', degrees) for a base not standing on a level table: a wall or an inclined plate
    (pitch), a gantry with the arm hanging upside down (roll 180).
    """

    yaw_deg: float = 0.0
    pitch_deg: float = 0.0
    roll_deg: float = 0.0

    def validate(self, prefix: str = "") -> None:
        """Raise ValueError naming the first bad setting (its parameter name: ``prefix`` + field)."""
        for name in BASE_ANGLES:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 360.0:
                raise ValueError(f"{prefix}{name} must be a finite angle within +-360 degrees, got {v!r}")


def base_rotation(base: ArmBaseConfig) -> np.ndarray:
    """B: the base's axes in the operator's frame (columns), so v_operator = B @ v_base."""
    cp, sp = math.cos(math.radians(base.pitch_deg)), math.sin(math.radians(base.pitch_deg))
    cr, sr = math.cos(math.radians(base.roll_deg)), math.sin(math.radians(base.roll_deg))
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return rot_z(math.radians(base.yaw_deg)) @ ry @ rx


def arm_remap(cfg: FrameConfig, base: ArmBaseConfig) -> np.ndarray:
    """M for one of several arms: XR stage -> operator's frame (``remap_matrix``) -> this arm's base (B^T)."""
    return base_rotation(base).T @ remap_matrix(cfg)

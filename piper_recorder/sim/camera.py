"""Pinhole camera geometry in the arm base frame (metres), with ROS optical-frame axes.

A camera is placed by its position and a point it looks at (``look_at``), which is how a static
sim camera is configured. Optical frame: z forward along the optical axis, x right, y down, so
``depth`` of a point is its z in the optical frame (the quantity RealSense depth images store).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics in pixels (no distortion, as a RealSense colour stream with plumb_bob zeros)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    @classmethod
    def default(cls, width: int, height: int) -> Intrinsics:
        """RealSense D435-like field of view (fx = 0.96 * width, about 55 degrees horizontal)."""
        f = 0.96 * width
        return cls(width, height, f, f, (width - 1) / 2.0, (height - 1) / 2.0)

    @classmethod
    def from_list(cls, width: int, height: int, fx_fy_cx_cy: list[float]) -> Intrinsics:
        """Intrinsics from a ``[fx, fy, cx, cy]`` parameter; empty: ``default``. ValueError when malformed."""
        if not fx_fy_cx_cy:
            return cls.default(width, height)
        if len(fx_fy_cx_cy) != 4:
            raise ValueError(f"intrinsics must be [fx, fy, cx, cy], got {fx_fy_cx_cy!r}")
        fx, fy, cx, cy = (float(v) for v in fx_fy_cx_cy)
        if fx <= 0 or fy <= 0:
            raise ValueError(f"intrinsics: focal lengths must be positive, got fx={fx}, fy={fy}")
        return cls(width, height, fx, fy, cx, cy)

    def k_matrix(self) -> list[float]:
        """The row-major 3x3 K of a sensor_msgs/CameraInfo."""
        return [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0]


def look_at_rotation(position: np.ndarray, target: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    """Rotation whose columns are the optical x, y, z axes expressed in the base frame."""
    up = np.array([0.0, 0.0, 1.0]) if up is None else np.asarray(up, float)
    z = np.asarray(target, float) - np.asarray(position, float)
    n = np.linalg.norm(z)
    if n < 1e-9:
        raise ValueError("camera position and look_at point coincide")
    z /= n
    x = np.cross(z, up)
    if np.linalg.norm(x) < 1e-6:  # looking straight up or down: pick any horizontal x
        x = np.cross(z, np.array([0.0, 1.0, 0.0]))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)  # points "down" in the image
    return np.stack([x, y, z], axis=1)


@dataclass(frozen=True)
class PinholeCamera:
    """A static camera: intrinsics plus its pose in the arm base frame."""

    intrinsics: Intrinsics
    position: np.ndarray  # (3,) metres, arm base frame
    rotation: np.ndarray  # (3, 3) optical axes as columns, arm base frame

    @classmethod
    def looking_at(cls, intrinsics: Intrinsics, position: Sequence[float], target: Sequence[float]) -> PinholeCamera:
        """A camera at ``position`` whose optical axis points at ``target`` (base frame, metres)."""
        origin = np.asarray(position, float).reshape(3)
        return cls(intrinsics, origin, look_at_rotation(origin, np.asarray(target, float).reshape(3)))

    def to_optical(self, points: np.ndarray) -> np.ndarray:
        """Base-frame points (..., 3) -> optical-frame points (..., 3)."""
        return (np.asarray(points, float) - self.position) @ self.rotation

    def project(self, point: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
        """Base-frame point -> (u, v, depth_m); depth <= 0 means behind the camera."""
        x, y, z = self.to_optical(np.asarray(point, float).reshape(3))
        if z <= 1e-6:
            return float("nan"), float("nan"), float(z)
        k = self.intrinsics
        return k.fx * x / z + k.cx, k.fy * y / z + k.cy, float(z)

    def pixel_rays(self) -> np.ndarray:
        """Unit-depth rays (H, W, 3) in the base frame for every pixel (optical z component = 1)."""
        k = self.intrinsics
        u = (np.arange(k.width) - k.cx) / k.fx
        v = (np.arange(k.height) - k.cy) / k.fy
        uu, vv = np.meshgrid(u, v)
        rays_optical = np.stack([uu, vv, np.ones_like(uu)], axis=-1)
        return rays_optical @ self.rotation.T

"""A cheap RGB-D scene: a pre-rendered textured table and backdrop, plus the EEF drawn as a disc.

The disc is red, yellow when the sim did not know the EEF at the capture time. Everything static is
rendered once per camera, so a frame costs one copy of the base images and a disc painted into a small
bounding box. The disc's depth is the marker's distance along the optical axis in millimetres, what a
RealSense aligned depth image holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from piper_recorder.sim.camera import PinholeCamera

MARKER_RGB = (255, 0, 0)
STALE_MARKER_RGB = (255, 255, 0)  # drawn instead when the EEF pose at the capture time was not known
FAR_MM = 4000  # backdrop depth where a ray misses the table
TILE_M = 0.05  # checkerboard tile size on the table
ARM_SPACING_M = 0.6  # several arms: their bases this far apart, side by side (``arm_bases``)


class SceneRenderer:
    """Renders (rgb uint8 HxWx3, depth uint16 HxW mm) for one static camera and an EEF position."""

    def __init__(
        self,
        camera: PinholeCamera,
        table_z: float = 0.0,
        marker_radius_m: float = 0.02,
        rgb: np.ndarray | None = None,
        depth: np.ndarray | None = None,
    ):
        """A renderer for ``camera``; ``rgb``, ``depth``: the arrays it renders into, new ones when not given.

        A camera node passes the pixels of the messages it publishes (``cdr.encode.ImageBuffer``).
        """
        self.camera = camera
        self.marker_radius_m = marker_radius_m
        k = camera.intrinsics
        self.base_rgb, self.base_depth = _render_background(camera, table_z)
        self.rgb = _target(rgb, self.base_rgb, "rgb")
        self.depth = _target(depth, self.base_depth, "depth")
        # Disc stamps are cached by pixel radius: a boolean mask per radius.
        self._discs: dict[int, np.ndarray] = {}
        self._shape = (k.height, k.width)

    def _disc(self, r: int) -> np.ndarray:
        disc = self._discs.get(r)
        if disc is None:
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            disc = self._discs[r] = (xx * xx + yy * yy) <= r * r
        return disc

    def render(
        self, eef_position: np.ndarray | Sequence[np.ndarray] | None, stale: bool = False, depth: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fill and return the frame buffers (reused across calls: copy or publish before the next call).

        ``eef_position``: one flange position, or a list of them (several arms: a disc each, the nearer one
        drawn last); ``stale``: the positions are only the newest known ones, not the EEF at the capture time;
        the markers are then yellow, so checks can tell a sim limitation from a recording error. ``depth``
        False: the depth buffer is left as it was (a frame nobody takes the depth of).
        """
        np.copyto(self.rgb, self.base_rgb)
        if depth:
            np.copyto(self.depth, self.base_depth)
        if eef_position is None:
            return self.rgb, self.depth
        points: Sequence[np.ndarray] = (
            eef_position if isinstance(eef_position, (list, tuple)) else [np.asarray(eef_position)]
        )
        projected = [self.camera.project(p) for p in points]
        for u, v, z in sorted(projected, key=lambda uvz: -uvz[2]):  # far first: a nearer disc covers it
            self._disc_at(u, v, z, stale, depth)
        return self.rgb, self.depth

    def _disc_at(self, u: float, v: float, z: float, stale: bool, depth: bool) -> None:
        """Paint one marker disc at pixel (u, v), ``z`` m along the optical axis (nothing behind the camera)."""
        if not z > 0.05:
            return
        k = self.camera.intrinsics
        r = int(np.clip(round(self.marker_radius_m * k.fx / z), 2, 60))
        ui, vi = int(round(u)), int(round(v))
        h, w = self._shape
        x0, x1, y0, y1 = ui - r, ui + r + 1, vi - r, vi + r + 1
        cx0, cx1, cy0, cy1 = max(x0, 0), min(x1, w), max(y0, 0), min(y1, h)
        if cx0 >= cx1 or cy0 >= cy1:
            return
        mask = self._disc(r)[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0]
        self.rgb[cy0:cy1, cx0:cx1][mask] = STALE_MARKER_RGB if stale else MARKER_RGB
        if depth:
            self.depth[cy0:cy1, cx0:cx1][mask] = np.uint16(min(round(z * 1000.0), 65535))


def _target(given: np.ndarray | None, base: np.ndarray, name: str) -> np.ndarray:
    """The array a renderer fills: ``given`` (checked against the base image's shape and type), else a new one."""
    if given is None:
        return np.empty_like(base)
    if given.shape != base.shape or given.dtype != base.dtype:
        raise ValueError(f"{name} buffer: {given.dtype}{given.shape}, the camera renders {base.dtype}{base.shape}")
    return given


def arm_bases(arms: Sequence[str], spacing_m: float = ARM_SPACING_M) -> dict[str, np.ndarray]:
    """Where each arm's base stands in the scene, whose flange poses are in its base frame.

    Side by side along y, ``spacing_m`` apart, centred on the scene origin, the first arm on +y (the robot's
    left), every base facing +x.
    """
    n = len(arms)
    return {a: np.array([0.0, spacing_m * ((n - 1) / 2.0 - i), 0.0]) for i, a in enumerate(arms)}


def _render_background(camera: PinholeCamera, table_z: float) -> tuple[np.ndarray, np.ndarray]:
    """Ray-cast every pixel once against the table plane z = table_z (checkerboard) and a backdrop."""
    rays = camera.pixel_rays()  # (H, W, 3), optical z = 1, so t below is the optical depth
    dz = rays[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (table_z - camera.position[2]) / dz
    hit = np.isfinite(t) & (t > 0) & (t * 1000.0 < FAR_MM)
    pts = camera.position + rays * np.where(hit, t, 0.0)[..., None]
    checker = ((np.floor(pts[..., 0] / TILE_M) + np.floor(pts[..., 1] / TILE_M)) % 2).astype(bool)
    h, w = dz.shape
    rgb = np.empty((h, w, 3), np.uint8)
    # Backdrop: a blue-grey vertical gradient with faint vertical stripes (texture for the encoder).
    grad = np.linspace(200, 120, h, dtype=np.float32)[:, None]
    stripes = 12.0 * (np.arange(w)[None, :] // 16 % 2)
    rgb[..., 0] = np.clip(grad * 0.55 + stripes, 0, 255)
    rgb[..., 1] = np.clip(grad * 0.75 + stripes, 0, 255)
    rgb[..., 2] = np.clip(grad + stripes, 0, 255)
    table = np.where(checker[..., None], np.array([90, 140, 110], np.uint8), np.array([200, 205, 190], np.uint8))
    rgb[hit] = table[hit]
    depth = np.full((h, w), FAR_MM, np.uint16)
    depth[hit] = np.round(t[hit] * 1000.0).astype(np.uint16)
    return rgb, depth

"""A cheap RGB-D scene: a pre-rendered textured table and backdrop, plus the EEF drawn as a disc.

The disc is red, yellow when the sim did not know the EEF at the capture time. Everything static is
rendered once per camera, so a frame costs one copy of the base images and a disc painted into a small
bounding box. The disc's depth is the marker's distance along the optical axis in millimetres, what a
RealSense aligned depth image holds.
"""

from __future__ import annotations

import numpy as np

from piper_recorder.sim.camera import PinholeCamera

MARKER_RGB = (255, 0, 0)
STALE_MARKER_RGB = (255, 255, 0)  # drawn instead when the EEF pose at the capture time was not known
FAR_MM = 4000  # backdrop depth where a ray misses the table
TILE_M = 0.05  # checkerboard tile size on the table


class SceneRenderer:
    """Renders (rgb uint8 HxWx3, depth uint16 HxW mm) for one static camera and an EEF position."""

    def __init__(self, camera: PinholeCamera, table_z: float = 0.0, marker_radius_m: float = 0.02):
        self.camera = camera
        self.marker_radius_m = marker_radius_m
        k = camera.intrinsics
        self.base_rgb, self.base_depth = _render_background(camera, table_z)
        self.rgb = np.empty_like(self.base_rgb)
        self.depth = np.empty_like(self.base_depth)
        # Disc stamps are cached by pixel radius: a boolean mask per radius.
        self._discs: dict[int, np.ndarray] = {}
        self._shape = (k.height, k.width)

    def _disc(self, r: int) -> np.ndarray:
        disc = self._discs.get(r)
        if disc is None:
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            disc = self._discs[r] = (xx * xx + yy * yy) <= r * r
        return disc

    def render(self, eef_position: np.ndarray | None, stale: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Fill and return the frame buffers (reused across calls: copy or publish before the next call).

        ``stale``: the position is only the newest known one, not the EEF at the capture time; the
        marker is then yellow, so checks can tell a sim limitation from a recording error.
        """
        np.copyto(self.rgb, self.base_rgb)
        np.copyto(self.depth, self.base_depth)
        if eef_position is None:
            return self.rgb, self.depth
        u, v, z = self.camera.project(eef_position)
        if not z > 0.05:
            return self.rgb, self.depth
        k = self.camera.intrinsics
        r = int(np.clip(round(self.marker_radius_m * k.fx / z), 2, 60))
        ui, vi = int(round(u)), int(round(v))
        h, w = self._shape
        x0, x1, y0, y1 = ui - r, ui + r + 1, vi - r, vi + r + 1
        cx0, cx1, cy0, cy1 = max(x0, 0), min(x1, w), max(y0, 0), min(y1, h)
        if cx0 >= cx1 or cy0 >= cy1:
            return self.rgb, self.depth
        mask = self._disc(r)[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0]
        self.rgb[cy0:cy1, cx0:cx1][mask] = STALE_MARKER_RGB if stale else MARKER_RGB
        self.depth[cy0:cy1, cx0:cx1][mask] = np.uint16(min(round(z * 1000.0), 65535))
        return self.rgb, self.depth


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

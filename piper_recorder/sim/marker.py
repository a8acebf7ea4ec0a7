"""Find the rendered EEF marker in a (possibly lossy-decoded) RGB frame, for alignment tests and tools."""

from __future__ import annotations

import numpy as np


def find_marker(rgb: np.ndarray, min_pixels: int = 6, stale: bool = False) -> tuple[float, float] | None:
    """Centroid (u, v) in pixels of the saturated-red marker disc, or None if it is not visible.

    ``stale=True`` looks for the yellow marker the sim draws when it had no EEF pose at the capture
    time. Thresholds tolerate H.264/yuv420p chroma subsampling: the scene has no red or yellow.
    """
    r = rgb[..., 0].astype(np.int16)
    g = rgb[..., 1].astype(np.int16)
    b = rgb[..., 2].astype(np.int16)
    if stale:
        mask = (r > 150) & (g > 150) & (r - b > 90) & (g - b > 90)
    else:
        mask = (r > 150) & (r - g > 90) & (r - b > 90)
    vs, us = np.nonzero(mask)
    if us.size < min_pixels:
        return None
    return float(us.mean()), float(vs.mean())

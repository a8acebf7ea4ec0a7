"""The one time base of rows and video frames (a leaf module: numpy and the standard library only).

Rows sit on the grid ``k / fps`` (``grid_timestamp``); video PTS count 1/90000 s ticks (``TICKS``, the
MPEG clock, exact for 24/25/30/50/60 fps frame periods). The assembler, the video writer, the v3.0
concatenator and piper-repair's retimer all take these from here, so none imports another for them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

TICKS = 90000
TIME_BASE = Fraction(1, TICKS)


def grid_timestamp(index: int, fps: float) -> np.float32:
    """Row ``index``'s ``timestamp``: ``index / fps`` rounded UP to float32 (the smallest float32 >= it).

    Frame lookups disagree on which side of the grid a PTS may sit: LeRobot's default decoder (0.3
    and 0.4: torchcodec, approximate seek) asks for frame ``round(t * fps)``, i.e. the first frame
    whose PTS is >= that frame's exact grid time ``index / fps``; torchvision/torchcodec time lookups
    (GR00T) take the last frame whose PTS is <= ``t``. The video writer floors each PTS from ``t``
    (``pts_ticks``), so both hold only when ``t >= index / fps``; nearest rounding puts ``t`` below
    the grid for about half the rows and LeRobot then gets the next frame, 1/fps away.
    """
    exact = Fraction(index) / Fraction(fps)
    t = np.float32(float(exact))
    if Fraction(float(t)) < exact:
        t = np.nextafter(t, np.float32(np.inf))
    return t


def pts_ticks(t: float) -> int:
    """PTS in 1/90000 s, rounded down from the float32 time.

    ``pts * TIME_BASE <= float32(t)`` and ``float32(t) - pts * TIME_BASE < 1/90000`` hold exactly:
    float32(t) is a dyadic rational and the floor is taken in exact arithmetic, so no float rounding can
    push a PTS past its row time.
    """
    return math.floor(Fraction(float(np.float32(t))) * TICKS)


def frame_period_ticks(fps: float) -> int:
    """One nominal frame period in ticks (3000 at 30 fps): every packet's duration."""
    return max(1, round(TICKS / fps))

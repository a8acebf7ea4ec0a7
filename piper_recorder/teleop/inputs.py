"""The inputs teleop takes, checked: poses, a hand's controls (``Joy``), and the order of one stream's inputs.

A pose that is not finite, not near unit length or absurdly far is refused, not "fixed"; a joy's
trigger and squeeze are clamped to [0, 1] (a non-finite one refuses the joy). Both the arm engines and
the episode buttons read these values, so they are checked once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .rotations import Quat, is_finite, unit_t

QUAT_NORM_TOL = 0.1  # input quaternions further than this from unit length are rejected, not "fixed"
MAX_ABS_POS = 100.0  # m; larger coordinates are garbage (and would overflow the arithmetic)


@dataclass
class Joy:
    """One hand's controls: trigger and squeeze in [0, 1], and the buttons."""

    trigger: float = 0.0
    squeeze: float = 0.0
    primary: bool = False
    secondary: bool = False
    menu: bool = False
    stick_click: bool = False  # the thumbstick pressed in: held across a stop, it labels the episode failure


@dataclass
class Pose:
    """A position (m) and unit quaternion (xyzw)."""

    p: np.ndarray
    q: np.ndarray  # xyzw, unit


@dataclass(frozen=True, slots=True)
class FPose:
    """A pose held by the core, as floats.

    The tick's arithmetic is scalar (``rotations.*_t``), and tuples need no defensive copies; arrays are made
    only for the target handed out.
    """

    p: tuple[float, ...]
    q: Quat


def _floats(v: ArrayLike) -> list[float] | None:
    """``v`` flattened to floats as numpy would (None: not numbers).

    A list or tuple of floats (what the node passes, on every message) is taken without numpy.
    """
    if (type(v) is list or type(v) is tuple) and all(type(x) is float for x in v):
        return list(v)
    try:
        return np.asarray(v, dtype=float).ravel().tolist()
    except (TypeError, ValueError):
        return None


def valid_pose(p: ArrayLike, q: ArrayLike) -> FPose | None:
    """The pose as floats with its quaternion normalised, or None when it cannot be a pose."""
    pl = _floats(p)
    ql = _floats(q) if pl is not None else None
    if pl is None or ql is None:
        return None
    if len(pl) != 3 or len(ql) != 4 or not is_finite(pl, ql):
        return None
    if (
        max(abs(v) for v in pl) > MAX_ABS_POS
        or max(abs(v) for v in ql) > 2.0
        or abs(math.sqrt(sum(v * v for v in ql)) - 1.0) > QUAT_NORM_TOL
    ):
        return None
    return FPose(tuple(pl), unit_t(ql))


def valid_joy(joy: Joy) -> Joy | None:
    """A copy with trigger and squeeze clamped to [0, 1] and the buttons as bools; None when an axis is not finite."""
    if not all(math.isfinite(v) for v in (joy.trigger, joy.squeeze)):
        return None
    return Joy(
        min(1.0, max(0.0, joy.trigger)),
        min(1.0, max(0.0, joy.squeeze)),
        bool(joy.primary),
        bool(joy.secondary),
        bool(joy.menu),
        bool(joy.stick_click),
    )


def is_newer(t: float, order: int | None, held_t: float, held_order: int | None) -> bool:
    """Whether an input is not older than the one held.

    By the source's order (the header stamp the
    bridge gave it, which rises with the headset's capture clock) when both have one: ``t`` is that
    stamp moved onto this host's monotonic clock, and the move reads two clocks, so a thread preempted
    between the reads shifts it by the preemption (inputs of a rising stream would be judged out of
    order, and dropped). By ``t`` otherwise.
    """
    if order is not None and held_order is not None:
        return order >= held_order
    return t >= held_t

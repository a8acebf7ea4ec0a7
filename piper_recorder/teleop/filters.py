"""One-euro filters (Casiez et al. 2012) for a 3-D position and an orientation.

The one-euro filter is a low-pass whose cutoff rises with speed: hand tremor at rest is smoothed
hard (``min_cutoff``), fast deliberate motion passes with little lag (``beta``). The position variant
uses one cutoff from the speed norm so the path is not distorted axis by axis; the orientation
variant does the same with the angular speed and slerps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .rotations import Quat, angle_between_t, as_floats, slerp_t, unit_t


@dataclass
class FilterConfig:
    """The One Euro filter's settings for position and orientation."""

    min_cutoff: float = 1.2  # Hz, cutoff at rest
    beta: float = 0.02  # cutoff gain per unit speed (m/s for position, rad/s for orientation)
    d_cutoff: float = 1.0  # Hz, cutoff of the speed estimate
    enabled: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in ("min_cutoff", "beta", "d_cutoff"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0 or (name != "beta" and v == 0):
                raise ValueError(f"filter {name} must be finite and positive, got {v}")


def _alpha(cutoff: float, dt: float) -> float:
    tau = 1.0 / (2.0 * math.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


class _Speed:
    """Low-passed speed estimate shared by both variants."""

    def __init__(self, cfg: FilterConfig):
        self.cfg = cfg
        self.value = 0.0

    def cutoff(self, raw_speed: float, dt: float) -> float:
        a = _alpha(self.cfg.d_cutoff, dt)
        self.value = a * raw_speed + (1 - a) * self.value
        return self.cfg.min_cutoff + self.cfg.beta * abs(self.value)


class OneEuroPosition:
    """``__call__`` on arrays; ``step`` on float sequences (the control tick's path), one state."""

    def __init__(self, cfg: FilterConfig):
        self.cfg = cfg
        self._x: list[float] | None = None
        self._speed = _Speed(cfg)

    def reset(self, x: np.ndarray | Sequence[float]) -> None:
        """Start again from ``x``, at rest."""
        self._x = np.asarray(x, dtype=float).tolist()
        self._speed.value = 0.0

    def __call__(self, x: np.ndarray, dt: float) -> np.ndarray:
        """The filtered position of ``x`` as an array (``step`` on floats)."""
        return np.array(self.step(np.asarray(x, dtype=float).tolist(), dt))

    def step(self, x: list[float], dt: float) -> list[float]:
        """The filtered position of ``x`` (floats), a new list."""
        if self._x is None or not self.cfg.enabled or dt <= 0:
            if self._x is None or not self.cfg.enabled:
                self.reset(x)
            assert self._x is not None
            return list(self._x)
        held = self._x
        cutoff = self._speed.cutoff(math.dist(x, held) / dt, dt)
        a = _alpha(cutoff, dt)
        self._x = [a * v + (1 - a) * h for v, h in zip(x, held)]
        return list(self._x)


class OneEuroOrientation:
    """``__call__`` on arrays; ``step`` on float sequences (the control tick's path), one state."""

    def __init__(self, cfg: FilterConfig):
        self.cfg = cfg
        self._q: Quat | None = None
        self._speed = _Speed(cfg)

    def reset(self, q: np.ndarray | Sequence[float]) -> None:
        """Start again from ``q`` (xyzw), at rest."""
        self._q = unit_t(as_floats(q))
        self._speed.value = 0.0

    def __call__(self, q: np.ndarray, dt: float) -> np.ndarray:
        """The filtered orientation of ``q`` as an array (``step`` on floats)."""
        return np.array(self.step(as_floats(q), dt))

    def step(self, q: Sequence[float], dt: float) -> Quat:
        """The filtered orientation of ``q`` (floats, xyzw), a unit tuple."""
        if self._q is None or not self.cfg.enabled or dt <= 0:
            if self._q is None or not self.cfg.enabled:
                self.reset(q)
            assert self._q is not None
            return self._q
        cutoff = self._speed.cutoff(angle_between_t(self._q, q) / dt, dt)
        self._q = slerp_t(self._q, q, _alpha(cutoff, dt))
        return self._q

"""Replay timing and the slow approach to the first pose; tracking-error statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _slerp(q0: np.ndarray, q1: np.ndarray, s: float) -> np.ndarray:
    """Shortest-arc quaternion interpolation (wxyz)."""
    q0, q1 = q0 / np.linalg.norm(q0), q1 / np.linalg.norm(q1)
    d = float(np.dot(q0, q1))
    if d < 0.0:
        q1, d = -q1, -d
    if d > 0.9995:
        q = q0 + s * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = np.arccos(np.clip(d, -1.0, 1.0))
    return (np.sin((1 - s) * theta) * q0 + np.sin(s * theta) * q1) / np.sin(theta)


def angle_between(q0: np.ndarray, q1: np.ndarray) -> float:
    """The rotation angle (rad) between two orientations given as quaternions (either sign)."""
    d = abs(float(np.dot(q0 / np.linalg.norm(q0), q1 / np.linalg.norm(q1))))
    return 2.0 * float(np.arccos(np.clip(d, -1.0, 1.0)))


@dataclass(frozen=True)
class Approach:
    """Move from ``start`` to ``goal`` (xyz + wxyz) no faster than the given linear and angular speeds."""

    start: np.ndarray
    goal: np.ndarray
    linear_speed: float = 0.05
    angular_speed: float = 0.5

    @property
    def duration(self) -> float:
        """Seconds the approach takes (at least 0.3 s)."""
        dist = float(np.linalg.norm(self.goal[:3] - self.start[:3]))
        ang = angle_between(self.start[3:], self.goal[3:])
        # Smoothstep peaks at 1.5x the mean rate, so stretch the move to keep the peak within the limits.
        return 1.5 * max(dist / self.linear_speed, ang / self.angular_speed, 0.2)

    def pose_at(self, elapsed: float) -> np.ndarray:
        """The pose (xyz + wxyz) ``elapsed`` seconds into the approach; ``goal`` from ``duration`` on."""
        s = float(np.clip(elapsed / self.duration, 0.0, 1.0))
        s = s * s * (3.0 - 2.0 * s)  # smoothstep: zero velocity at both ends
        return np.concatenate(
            [self.start[:3] + s * (self.goal[:3] - self.start[:3]), _slerp(self.start[3:], self.goal[3:], s)]
        )


def row_at(t: np.ndarray, elapsed: float, speed: float) -> int:
    """Index of the recorded row due at ``elapsed`` wall seconds into playback at ``speed``x."""
    return int(np.searchsorted(t, elapsed * speed, side="right") - 1)


@dataclass
class TrackingStats:
    """Commanded vs measured EEF positions over playback, each with its wall time (s).

    The raw error compares both at the same instant, so it includes the arm's tracking lag; the
    lag-compensated error first shifts the measured path back by the constant lag that fits best
    (searched up to ``max_lag_s``), which separates "follows the path" from "follows it late".
    """

    max_lag_s: float = 0.5
    commanded: list[tuple[float, np.ndarray]] = field(default_factory=list)
    measured: list[tuple[float, np.ndarray]] = field(default_factory=list)

    def add(self, t: float, commanded: np.ndarray, measured: np.ndarray) -> None:
        """Record one tick's commanded and measured positions at wall time ``t`` (s)."""
        self.commanded.append((t, np.asarray(commanded[:3], dtype=np.float64)))
        self.measured.append((t, np.asarray(measured[:3], dtype=np.float64)))

    def _errors(self, lag: float) -> np.ndarray:
        tc = np.array([t for t, _ in self.commanded])
        pc = np.array([p for _, p in self.commanded])
        tm = np.array([t for t, _ in self.measured]) - lag
        pm = np.array([p for _, p in self.measured])
        keep = (tm >= tc[0]) & (tm <= tc[-1])
        if keep.sum() < 2:
            return np.zeros(0)
        ref = np.stack([np.interp(tm[keep], tc, pc[:, i]) for i in range(3)], axis=1)
        return np.linalg.norm(pm[keep] - ref, axis=1)

    def summary(self) -> dict[str, float | int]:
        """Raw and lag-compensated error statistics (m) and the fitted lag (s); only ``samples`` if too few."""
        if len(self.commanded) < 2:
            return {"samples": len(self.commanded)}
        raw = self._errors(0.0)
        lags = np.arange(0.0, self.max_lag_s + 1e-9, 0.005)
        rms = [float(np.sqrt(np.mean(e**2))) if e.size else np.inf for e in map(self._errors, lags.tolist())]
        best = int(np.argmin(rms))
        comp = self._errors(float(lags[best]))
        return {
            "samples": len(self.commanded),
            "rms_m": float(np.sqrt(np.mean(raw**2))),
            "p95_m": float(np.percentile(raw, 95)),
            "max_m": float(raw.max()),
            "lag_s": float(lags[best]),
            "lag_rms_m": float(np.sqrt(np.mean(comp**2))),
            "lag_max_m": float(comp.max()),
        }

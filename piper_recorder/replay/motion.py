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
        dist = float(np.linalg.norm(self.goal[:3] - self.start[:3]))
        ang = angle_between(self.start[3:], self.goal[3:])
        # Smoothstep peaks at 1.5x the mean rate, so stretch the move to keep the peak within the limits.
        return 1.5 * max(dist / self.linear_speed, ang / self.angular_speed, 0.2)

    def pose_at(self, elapsed: float) -> np.ndarray:
        s = float(np.clip(elapsed / self.duration, 0.0, 1.0))
        s = s * s * (3.0 - 2.0 * s)  # smoothstep: zero velocity at both ends
        return np.concatenate([self.start[:3] + s * (self.goal[:3] - self.start[:3]),
                               _slerp(self.start[3:], self.goal[3:], s)])


def row_at(t: np.ndarray, elapsed: float, speed: float) -> int:
    """Index of the recorded row due at ``elapsed`` wall seconds into playback at ``speed``x."""
    return int(np.searchsorted(t, elapsed * speed, side="right") - 1)


@dataclass
class TrackingStats:
    """Commanded vs measured EEF position error, sampled during playback."""

    errors_m: list[float] = field(default_factory=list)

    def add(self, commanded: np.ndarray, measured: np.ndarray) -> None:
        self.errors_m.append(float(np.linalg.norm(np.asarray(commanded[:3]) - np.asarray(measured[:3]))))

    def summary(self) -> dict[str, float | int]:
        e = np.asarray(self.errors_m)
        if e.size == 0:
            return {"samples": 0}
        return {"samples": int(e.size), "rms_m": float(np.sqrt(np.mean(e ** 2))),
                "p95_m": float(np.percentile(e, 95)), "max_m": float(e.max())}

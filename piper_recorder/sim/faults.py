"""Fault injection for sim cameras: a pause window, periodic drops and capture-time jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class FaultPlan:
    """One sim camera's faults: a pause window, periodic drops and capture jitter.

    ``pause_at_s``/``pause_s``: publish nothing in [pause_at_s, pause_at_s + pause_s) measured from
    ``origin_s`` (node start, or the moment the plan was re-armed at runtime); ``pause_at_s < 0``
    disables it. ``drop_every_n``: skip every n-th frame (0 = off). ``jitter_ms``: delay each capture
    by a uniform random 0..jitter_ms (the stamp is the delayed capture time).
    """

    pause_at_s: float = -1.0
    pause_s: float = 0.0
    drop_every_n: int = 0
    jitter_ms: float = 0.0
    origin_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.pause_s < 0 or self.drop_every_n < 0 or self.jitter_ms < 0:
            raise ValueError("pause_s, drop_every_n and jitter_ms must be >= 0")
        self._rng = random.Random(self.seed)

    def paused(self, t_s: float) -> bool:
        """Whether time ``t_s`` (the clock of ``origin_s``) falls in the pause window."""
        if self.pause_at_s < 0 or self.pause_s <= 0:
            return False
        start = self.origin_s + self.pause_at_s
        return start <= t_s < start + self.pause_s

    def dropped(self, frame_index: int) -> bool:
        """Whether frame ``frame_index`` is one of the periodic drops."""
        return self.drop_every_n > 0 and frame_index % self.drop_every_n == self.drop_every_n - 1

    def jitter_s(self) -> float:
        """The next capture's random delay in seconds (0 without jitter)."""
        return self._rng.uniform(0.0, self.jitter_ms / 1000.0) if self.jitter_ms > 0 else 0.0

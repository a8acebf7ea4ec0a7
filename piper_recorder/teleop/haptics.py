"""Haptic confirmations: which pattern tells the operator what happened, and when each pulse is due (no ROS).

Why: the operator's eyes are on the arm, so every press is answered in the hand, and by what the
recorders did, not by the press: a started episode (``started`` event) feels different from a
refused start (the recorder's refusal). Patterns are ``[amp, ms, count]``: ``count`` pulses of
``amp`` (0..1) for ``ms`` milliseconds, ``gap_s`` apart (start and end of a pulse). Defaults follow
the headset app's own confirmations (reference-facts §8): start 0.8/120 ms, save 0.5/200 ms,
discard and delete three 1.0/60 ms; a refused or failed press one long 1.0/700 ms; a recorder that
did not answer three 1.0/90 ms at 0.2 s (while teleop retries); a safety limit starting to hold the
target two light 0.35/40 ms; the clutch released by teleop, not by the operator (a stale headset
stream, lost arm feedback: re-grip to go on) two 0.7/300 ms, long enough not to pass for a
confirmation. An outcome label (``labeled`` event) plays ``success`` (two 0.6/80 ms) or ``failure``
(two 1.0/160 ms); a save whose integrity verdict is ``bad`` three 1.0/400 ms. A grip the interlocks refuse plays ``refused`` (teleop.mapper: once per grip attempt).

``HapticScheduler`` plays one pattern at a time per name: the same confirmation from several
recorders (both save, seconds apart on a busy machine) is felt once: ``confirm`` drops a
confirmation that repeats the previous one with no press in between (``new_press``; within
``dedupe_s``: episodes driven through the services have no presses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

# episode event -> pattern name
EVENT_PATTERNS = {
    "started": "start",
    "saved": "save",
    "discarded": "discard",
    "deleted": "delete",
    "save_failed": "refused",
}


@dataclass
class HapticConfig:
    """One ``[amp, ms, count]`` per confirmation (ROS parameters ``haptics.<name>``)."""

    start: list[float] = field(default_factory=lambda: [0.8, 120.0, 1.0])
    save: list[float] = field(default_factory=lambda: [0.5, 200.0, 1.0])
    discard: list[float] = field(default_factory=lambda: [1.0, 60.0, 3.0])
    delete: list[float] = field(default_factory=lambda: [1.0, 60.0, 3.0])
    refused: list[float] = field(default_factory=lambda: [1.0, 700.0, 1.0])
    timeout: list[float] = field(default_factory=lambda: [1.0, 90.0, 3.0])
    limit: list[float] = field(default_factory=lambda: [0.35, 40.0, 2.0])
    release: list[float] = field(default_factory=lambda: [0.7, 300.0, 2.0])
    # the outcome label an episode got (the stop chord; docs/curation.md) and a save whose integrity
    # verdict is ``bad``: three long strong pulses, unlike any confirmation
    success: list[float] = field(default_factory=lambda: [0.6, 80.0, 2.0])
    failure: list[float] = field(default_factory=lambda: [1.0, 160.0, 2.0])
    bad: list[float] = field(default_factory=lambda: [1.0, 400.0, 3.0])
    gap_s: float = 0.2  # from one pulse's start to the next one's
    dedupe_s: float = 30.0  # the same confirmation again (another recorder) within this is felt once
    limit_repeat_s: float = 2.0  # a limit that keeps re-engaging pulses at most this often

    @staticmethod
    def names() -> list[str]:
        """The names of the configurable patterns."""
        return [f.name for f in fields(HapticConfig) if f.type in ("list[float]", list[float])]

    def pattern(self, name: str) -> list[tuple[float, float, int]]:
        """(delay s, amp, ms) per pulse."""
        amp, ms, count = getattr(self, name)
        return [(i * self.gap_s, float(amp), int(ms)) for i in range(int(count))]

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in self.names():
            v = getattr(self, name)
            if len(v) != 3 or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v):
                raise ValueError(f"haptics.{name} must be [amp, ms, count], got {v!r}")
            amp, ms, count = v
            if not 0.0 <= amp <= 1.0 or not 0 <= ms <= 2000 or count != int(count) or not 0 <= count <= 10:
                raise ValueError(
                    f"haptics.{name}: amp in [0, 1], ms in [0, 2000], count an integer in [0, 10]; got {v!r}"
                )
        for name, hi in (("gap_s", 10.0), ("dedupe_s", 600.0), ("limit_repeat_s", 60.0)):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= hi):
                raise ValueError(f"haptics.{name} must be in [0, {hi:g}] s, got {v!r}")


@dataclass(frozen=True)
class Pulse:
    """One haptic pulse due at a time, and the pattern it belongs to."""

    due: float
    amp: float
    ms: int
    pattern: str


class HapticScheduler:
    """Queue patterns by name with explicit times; ``due(now)`` hands out the pulses to send."""

    def __init__(self, cfg: HapticConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self._pulses: list[Pulse] = []
        self._busy_until: dict[str, float] = {}
        self.played: dict[str, int] = {}
        self._last_confirm: tuple[str, float] = ("", -math.inf)

    def play(self, now: float, name: str) -> bool:
        """Queue pattern ``name`` unless the same one is still playing; True when queued."""
        pattern = self.cfg.pattern(name)
        if not pattern or now < self._busy_until.get(name, -math.inf):
            return False
        self._pulses += [Pulse(now + delay, amp, ms, name) for delay, amp, ms in pattern]
        last_delay, _, last_ms = pattern[-1]
        hold = last_delay + last_ms / 1000.0 + 0.3
        if name == "limit":
            hold = max(hold, self.cfg.limit_repeat_s)
        self._busy_until[name] = now + hold
        self.played[name] = self.played.get(name, 0) + 1
        return True

    def new_press(self) -> None:
        """The operator pressed: the confirmations that follow answer this press."""
        self._last_confirm = ("", -math.inf)

    def confirm(self, now: float, name: str) -> bool:
        """Play a confirmation unless it repeats the previous one with no press in between; True when queued.

        Within ``dedupe_s``: the same save reported by each recorder, however far apart on a busy machine
        their saves finish, is felt once.
        """
        if name == self._last_confirm[0] and now - self._last_confirm[1] < self.cfg.dedupe_s:
            return False
        self._last_confirm = (name, now)
        return self.play(now, name)

    def due(self, now: float) -> list[Pulse]:
        """Take the pulses due by ``now``."""
        out = [p for p in self._pulses if p.due <= now]
        self._pulses = [p for p in self._pulses if p.due > now]
        return out

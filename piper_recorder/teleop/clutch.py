"""Grip clutch with hysteresis and engage interlocks.

Engage when the grip (squeeze) rises above ``engage_above``; release when it falls below
``release_below``; the menu button forces a release. After a forced release (menu, stale stream,
lost arm feedback) the operator must open the grip below ``release_below`` before the clutch can
engage again, so the arm never starts following because a grip happened to still be held.
An engage that is refused (no arm feedback, arm fault, arm outside the workspace) is retried while
the grip stays closed: the clutch latches poses only at the moment it engages, so a late engage
cannot jump.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


@dataclass
class ClutchConfig:
    """Grip thresholds: engage above one, release below the other (hysteresis)."""

    engage_above: float = 0.7
    release_below: float = 0.3

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not (0.0 <= self.release_below < self.engage_above <= 1.0):
            raise ValueError(
                f"clutch needs 0 <= release_below < engage_above <= 1 (got {self.release_below}, {self.engage_above})"
            )


class ClutchEvent(Enum):
    """What a clutch update did."""

    NONE = "none"
    ENGAGED = "engaged"
    RELEASED = "released"  # grip opened
    FORCED_RELEASE = "forced"  # menu / watchdog / interlock
    REFUSED = "refused"  # grip closed but an interlock said no


class Clutch:
    """The grip clutch: engaged while the grip is held, with hysteresis and forced releases."""

    def __init__(self, cfg: ClutchConfig):
        cfg.validate()
        self.cfg = cfg
        self.engaged = False
        self._armed = True  # False after a forced release until the grip opens

    def update(self, squeeze: float, menu: bool, refuse_reason: str | None) -> ClutchEvent:
        """Advance one step. ``refuse_reason`` is None when engaging is allowed right now."""
        if not math.isfinite(squeeze):
            squeeze = 0.0  # an unreadable grip is an open grip
        if squeeze < self.cfg.release_below:
            self._armed = True
        if self.engaged:
            if menu:
                return self.force_release()
            if squeeze < self.cfg.release_below:
                self.engaged = False
                return ClutchEvent.RELEASED
            return ClutchEvent.NONE
        if menu or not self._armed or squeeze <= self.cfg.engage_above:
            return ClutchEvent.NONE
        if refuse_reason is not None:
            return ClutchEvent.REFUSED
        self.engaged = True
        return ClutchEvent.ENGAGED

    def force_release(self) -> ClutchEvent:
        """Release now and require the grip to open before the next engage."""
        was = self.engaged
        self.engaged = False
        self._armed = False
        return ClutchEvent.FORCED_RELEASE if was else ClutchEvent.NONE

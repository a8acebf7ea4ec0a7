"""TeleopConfig: teleop's parameters (the teleop node declares them; every arm engine and the episode buttons read them).

In a two-arm session every arm takes the same settings, each applied to its own clutch, filters and
limits; ``hand`` then names the hand whose buttons start, stop and discard (``teleop.bimanual``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..names import QUEST_HANDS
from .clutch import ClutchConfig
from .filters import FilterConfig
from .frames import FrameConfig
from .limits import LimitsConfig


@dataclass
class TeleopConfig:
    """Teleop's parameters (its sub-configs: ``clutch``, ``frame``, ``filter``, ``limits``)."""

    hand: str = "right"  # controller that drives the arm; the other hand's X/A deletes
    control_rate_hz: float = 100.0
    pos_scale: float = 1.0
    stale_timeout_s: float = 0.25  # headset watchdog: disengage after this long without data
    arm_stale_timeout_s: float = 0.5  # arm feedback older than this refuses / drops the clutch
    gripper_max_width: float = 0.07  # m; width = max * (1 - trigger)
    delete_hold_s: float = 1.0  # hold the other hand's primary this long to delete the last episode
    # the stop chord: A alone labels the stopped episode success (False: leaves it unlabelled), A with the
    # thumbstick held pressed labels it failure
    outcome_on_stop: bool = True
    clutch: ClutchConfig = field(default_factory=ClutchConfig)
    frame: FrameConfig = field(default_factory=FrameConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    @property
    def other_hand(self) -> str:
        """The other hand: it drives no arm in a single-arm session; its primary, held, deletes the last episode."""
        return "left" if self.hand == "right" else "right"

    @property
    def period(self) -> float:
        """The control period in seconds."""
        return 1.0 / self.control_rate_hz

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if self.hand not in QUEST_HANDS:
            raise ValueError(f"hand must be 'left' or 'right', got {self.hand!r}")
        for name in (
            "control_rate_hz",
            "pos_scale",
            "stale_timeout_s",
            "arm_stale_timeout_s",
            "gripper_max_width",
            "delete_hold_s",
        ):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        if self.control_rate_hz > 1000:
            raise ValueError(f"control_rate_hz {self.control_rate_hz} is unreasonably high")
        for sub in (self.clutch, self.frame, self.filter, self.limits):
            sub.validate()

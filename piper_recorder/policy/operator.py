"""Whether the operator holds the arm right now, from the headset's own stream and teleop's status.

Teleop always wins over a policy. The policy node learns of the operator two ways:
- the grip on ``/quest/<hand>/joy`` (squeeze, axis 1, as quest_bridge publishes every headset frame):
  held once it rises above ``takeover_above`` (teleop's ``engage_above``) and until it falls below
  ``release_below`` (teleop's ``release_below``), the same hysteresis as teleop's clutch, so a grip
  relaxed to 0.5 that still drives teleop still counts as held here;
- teleop's ``/teleop/status`` ``engaged`` (1 Hz, and at once on a clutch change): engaged counts
  until a status says otherwise or none came for ``TELEOP_STATUS_STALE_S`` (teleop is gone; a dead
  teleop cannot drive, and the grip above still counts on its own).

The grip alone is enough: it arrives with the headset frame, before teleop's next status, so start
and resume are refused and the control tick publishes nothing from the first message of a grip on.
A grip last seen closed stays held even if the stream then goes silent (a dropped headset link while
the hand is closed must not hand the arm back): the reason says so. No ROS here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from piper_recorder.names import QUEST_JOY_PATTERN, TELEOP_STATUS, quest_topic

TELEOP_STATUS_STALE_S = 3.0  # three missed 1 Hz statuses: teleop is not running


@dataclass
class OperatorGate:
    """Whether the operator holds the arm, from the grip on the headset's joy stream and teleop's status."""

    hand: str = "right"
    takeover_above: float = 0.7
    release_below: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 <= self.release_below < self.takeover_above <= 1.0:
            raise ValueError(
                f"takeover needs 0 <= takeover_release_below < takeover_above <= 1 "
                f"(got {self.release_below}, {self.takeover_above})"
            )
        self.grip_held = False
        self.squeeze = 0.0
        self._joy_ns: int | None = None
        self.teleop_engaged = False
        self._teleop_ns: int | None = None

    def on_joy(self, now_ns: int, squeeze: float) -> bool:
        """One joy message of the takeover hand; True when the grip is held after it.

        A non-finite squeeze is ignored (teleop rejects the message too) and changes nothing.
        """
        if not math.isfinite(squeeze):
            return self.grip_held
        self.squeeze, self._joy_ns = float(squeeze), int(now_ns)
        if squeeze > self.takeover_above:
            self.grip_held = True
        elif squeeze < self.release_below:
            self.grip_held = False
        return self.grip_held

    def on_teleop_status(self, now_ns: int, engaged: bool) -> bool:
        """Teleop's reported clutch; True when it says engaged."""
        self.teleop_engaged, self._teleop_ns = bool(engaged), int(now_ns)
        return self.teleop_engaged

    def holder(self, now_ns: int) -> str | None:
        """Why the operator holds the arm now (None: the arm is free for the policy)."""
        if self.grip_held:
            age = (now_ns - self._joy_ns) / 1e9 if self._joy_ns is not None else math.inf
            silent = f"; no joy message for {age:.1f} s" if age > 1.0 else ""
            return f"the operator's grip is held on {quest_topic(QUEST_JOY_PATTERN, self.hand)} (squeeze {self.squeeze:.2f}{silent})"
        if (
            self.teleop_engaged
            and self._teleop_ns is not None
            and (now_ns - self._teleop_ns) / 1e9 <= TELEOP_STATUS_STALE_S
        ):
            return f"teleop reports its clutch engaged ({TELEOP_STATUS})"
        return None

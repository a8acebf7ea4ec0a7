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

Two arms (``OperatorGates``): each arm has its gate, watching the hand of the arm's name (the left hand
drives the left arm, ``names.BIMANUAL_ARMS``) and teleop's clutch of that arm (``arms.<arm>.engaged`` in
its status, ``engaged_by_arm``). A grip on either hand holds that arm for the operator, and the policy
stops for both arms (a bimanual policy's rows move the arms together: it cannot go on with one hand
taken away); ``holder`` names the arm. What does not say its arm errs towards the operator: a joy message
of no named hand is the configured ``hand``'s, and teleop's top-level ``engaged`` (any arm) sets every
arm's clutch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from piper_recorder.names import QUEST_HANDS, QUEST_JOY_PATTERN, TELEOP_STATUS, quest_topic

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


def engaged_by_arm(status: Mapping[str, Any], arms: tuple[str, ...] = ()) -> dict[str | None, bool]:
    """Teleop's clutch per arm from its ``/teleop/status`` JSON: ``{None: engaged}`` for one arm.

    Two arms (``arms``): each arm's ``arms.<arm>.engaged``; teleop's top-level ``engaged`` (any arm) does not say
    which. A value that is not a bool is left out (the gate keeps what it knew).
    """
    if not arms:
        engaged = status.get("engaged")
        return {None: engaged} if isinstance(engaged, bool) else {}
    per_arm = status.get("arms")
    out: dict[str | None, bool] = {}
    for arm in arms:
        entry = per_arm.get(arm) if isinstance(per_arm, Mapping) else None
        engaged = entry.get("engaged") if isinstance(entry, Mapping) else None
        if isinstance(engaged, bool):
            out[arm] = engaged
    return out


class OperatorGates:
    """Whether the operator holds any arm: one ``OperatorGate`` per arm (one arm: the configured hand's)."""

    def __init__(self, arms: tuple[str, ...], hand: str, takeover_above: float, release_below: float):
        bad = [a for a in arms if a not in QUEST_HANDS]
        if bad:
            raise ValueError(
                f"arms {list(arms)}: each arm is taken over by the hand of its name, one of {list(QUEST_HANDS)}"
            )
        self.arms, self.hand = arms, hand
        keys: tuple[str | None, ...] = arms or (None,)
        self.gates = {a: OperatorGate(a or hand, takeover_above, release_below) for a in keys}

    def gate(self, arm: str | None) -> OperatorGate:
        """Arm ``arm``'s gate (None for one arm); ValueError naming the arms otherwise."""
        if arm not in self.gates:
            raise ValueError(f"no arm {arm!r} here (arms: {', '.join(map(str, self.gates))})")
        return self.gates[arm]

    def hand_arm(self, hand: str | None) -> str | None:
        """The arm a hand's joy stream takes over: the arm of its name (None: the configured hand's)."""
        if not self.arms:
            return None
        hand = hand or self.hand
        if hand not in self.arms:
            raise ValueError(f"hand {hand!r}: the arms are {', '.join(self.arms)}")
        return hand

    def on_joy(self, now_ns: int, squeeze: float, hand: str | None = None) -> bool:
        """One joy message of ``hand`` (None: the configured hand); True when that hand's grip is held after it."""
        return self.gate(self.hand_arm(hand)).on_joy(now_ns, squeeze)

    def on_teleop_status(self, now_ns: int, engaged: bool, arm: str | None = None) -> bool:
        """Teleop's reported clutch of ``arm``; True when it says engaged.

        None: one arm's clutch, or with several arms teleop's top-level ``engaged`` (any arm), which sets them all.
        """
        if arm is None and self.arms:
            for gate in self.gates.values():  # every gate, none skipped
                gate.on_teleop_status(now_ns, engaged)
            return bool(engaged)
        return self.gate(arm).on_teleop_status(now_ns, engaged)

    def holders(self, now_ns: int) -> dict[str | None, str]:
        """Each arm the operator holds now, with why."""
        out = {}
        for arm, gate in self.gates.items():
            why = gate.holder(now_ns)
            if why is not None:
                out[arm] = why
        return out

    def holder(self, now_ns: int) -> str | None:
        """Why the operator holds an arm now, naming the arm when there are several (None: every arm is free)."""
        held = self.holders(now_ns)
        if not held:
            return None
        return "; ".join(why if arm is None else f"{arm} arm: {why}" for arm, why in held.items())

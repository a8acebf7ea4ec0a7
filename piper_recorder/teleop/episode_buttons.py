"""EpisodeButtons: the controller buttons that drive the recorders, and the outcome chord (no ROS).

The buttons hand (``TeleopConfig.hand``, the right one by default) starts an episode with its primary
(A on the right controller, X on the left), stops and saves it with the same button, and discards it
with its secondary (B / Y); held together with the stop, its thumbstick pressed in labels the episode
failure (alone: success, unless ``outcome_on_stop`` is off). The other hand's primary, held for
``delete_hold_s``, deletes the last saved episode. A single-arm and a two-arm session use the same
buttons on the same hands: the grips, triggers and menu buttons belong to the arms
(``teleop.arm_engine``), and none of them is an episode button.

Presses are edges. After a change of input source the first joy of each hand only sets the state a
button is in (a button held across the change is no press), and a delete hold counts from a fresh press.
"""

from __future__ import annotations

from enum import Enum

from ..names import DELETE_LAST_EPISODE, DISCARD_EPISODE, START_EPISODE, STOP_EPISODE
from .inputs import Joy


class Action(Enum):
    """Recorder service calls requested by the buttons."""

    START = START_EPISODE
    STOP = STOP_EPISODE
    DISCARD = DISCARD_EPISODE
    DELETE_LAST = DELETE_LAST_EPISODE


class EpisodeButtons:
    """Button edges of both hands in, recorder actions (with the stop's label and stamp) out."""

    def __init__(self, hand: str, other_hand: str, delete_hold_s: float, outcome_on_stop: bool) -> None:
        """``hand``: the hand whose buttons start, stop and discard; ``other_hand``: the one whose primary deletes."""
        self.hand, self.other_hand = hand, other_hand
        self.delete_hold_s = delete_hold_s
        self.outcome_on_stop = outcome_on_stop
        self.recording = False  # optimistic (toggled by the presses); the recorders' reports correct it
        self._actions: list[Action] = []
        self._outcome: str | None = None  # the label of the last stop press, handed out with it
        self._stop_stamp: int | None = None  # the last stop press's capture stamp, handed out with it
        self._other_primary_since: float | None = None
        self._delete_fired = False
        self._baseline: set[str] = set()  # hands whose next joy only sets the button state (no press edges)

    def on_joy(self, t: float, hand: str, joy: Joy, order: int | None, prev: Joy | None) -> None:
        """One checked joy of ``hand`` at ``t`` (``order``: its capture stamp, ns).

        ``prev``: the hand's joy held before this one (the newest by the source's order; None: none since
        the source changed), against which a press is an edge.
        """
        baseline = hand in self._baseline  # the first joy of a new source: a button held is no press
        self._baseline.discard(hand)
        if hand == self.hand:
            before = joy if baseline else prev or Joy()
            if joy.primary and not before.primary:
                if self.recording:  # the stop chord: the thumbstick held in says failure
                    self._outcome = "failure" if joy.stick_click else "success" if self.outcome_on_stop else None
                    self._stop_stamp = order
                self._actions.append(Action.STOP if self.recording else Action.START)
                self.recording = not self.recording  # optimistic; the recorders' state corrects it
            if joy.secondary and not before.secondary:
                self._actions.append(Action.DISCARD)
                self.recording = False
        elif hand == self.other_hand:
            if joy.primary and baseline:
                self._delete_fired = True  # held when the source changed: the hold counts from a fresh press
            elif joy.primary:
                if self._other_primary_since is None:
                    self._other_primary_since = t
            else:
                self._other_primary_since, self._delete_fired = None, False
            self._check_delete_hold(t)

    def on_source_change(self, hands: tuple[str, ...]) -> None:
        """``hands``' streams now come from a new source: their next joys set the button state, no press."""
        if self.other_hand in hands:
            self._other_primary_since, self._delete_fired = None, False
        self._baseline.update(hands)

    def take(self, t: float) -> tuple[list[Action], str | None, int | None]:
        """The actions pressed since the last call, and the stop's label and capture stamp (None without a stop)."""
        self._check_delete_hold(t)
        actions, self._actions = self._actions, []
        stopped = Action.STOP in actions
        outcome, self._outcome = (self._outcome if stopped else None), None
        stamp, self._stop_stamp = (self._stop_stamp if stopped else None), None
        return actions, outcome, stamp

    def _check_delete_hold(self, t: float) -> None:
        since = self._other_primary_since
        if since is not None and not self._delete_fired and t - since >= self.delete_hold_s:
            self._delete_fired = True
            self._actions.append(Action.DELETE_LAST)

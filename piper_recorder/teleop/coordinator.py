"""Coordinator: each hand's inputs to the arm it drives and to the episode buttons; a new source releases every arm.

A hand's joy is both: its grip, trigger and menu belong to the arm engine of that hand
(``arm_engine.ArmEngine``), its buttons to the episode buttons (``episode_buttons.EpisodeButtons``), which
see a press as an edge against the joy the engine holds. A hand's pose and an arm's feedback go straight
to that arm's engine (``arms``, keyed by the arm's name, which is its hand's). A change of input source
(``on_source_change``: another page took over the headset relay, the headset reconnected, the SpaceMouse
was unplugged or plugged in) is a clutch event for every arm: each is force-released and stays disarmed
until its hand's grip of the new source opens, and the held hand poses and joys are forgotten, so an arm
moves only on a fresh grip of the new source, from where it stands.

``mapper.TeleopCore`` (one arm) and ``bimanual.BimanualCore`` (two) are this with their engines, and
differ only in what a tick hands out.
"""

from __future__ import annotations

from ..names import QUEST_HANDS
from .arm_engine import ArmEngine, Counters
from .config import TeleopConfig
from .episode_buttons import EpisodeButtons
from .inputs import Joy, valid_joy


class Coordinator:
    """Routes the hands' inputs to the arm engines and the episode buttons (see the module docstring)."""

    def __init__(self, cfg: TeleopConfig, arms: dict[str, ArmEngine], counters: Counters):
        """``arms``: arm name (the hand that drives it) -> engine; ``counters``: the inputs no engine counts."""
        self.cfg = cfg
        self.arms = arms
        self.counters = counters
        self.buttons = EpisodeButtons(cfg.hand, cfg.other_hand, cfg.delete_hold_s, cfg.outcome_on_stop)
        self._source_order: int | None = None  # the stamp of the last source change (both hands report it)

    def engine(self, arm: str | None = None) -> ArmEngine:
        """The engine of ``arm`` (None: the only one); ValueError for an arm this session does not drive."""
        if arm is None and len(self.arms) == 1:
            return next(iter(self.arms.values()))
        if arm is None or arm not in self.arms:
            raise ValueError(f"no arm {arm!r} in this teleop session (arms: {', '.join(self.arms)})")
        return self.arms[arm]

    def on_joy(self, t: float, hand: str, joy: Joy, order: int | None = None) -> bool:
        """One joy of ``hand`` captured at ``t`` (monotonic) with source order ``order`` (header stamp, ns).

        False when refused (an axis not finite).
        """
        checked = valid_joy(joy)
        if checked is None:
            self.counters.rejected_inputs += 1
            return False
        engine = self.arms.get(hand)
        self.buttons.on_joy(t, hand, checked, order, engine.joy if engine is not None else None)
        if engine is not None:
            engine.on_joy(t, checked, order)
        return True

    def on_source_change(self, t: float, reason: str, hand: str | None = None, order: int | None = None) -> None:
        """The input source changed (see the module docstring): release every arm, forget the held inputs.

        A headset reports it on each hand's joy
        stream (``hand``; None: every hand at once) with one source stamp (``order``): the release acts
        once, and each hand's held input is forgotten when its own stream says so, after anything that
        stream delivered of the old source.
        """
        if order is None or order != self._source_order:
            self._source_order = order
            self.counters.source_changes += 1
            for engine in self.arms.values():
                engine.release_for_new_source(t, reason)
        hands = QUEST_HANDS if hand is None else (hand,)
        for h in hands:
            if h in self.arms:
                self.arms[h].forget_hand()
        self.buttons.on_source_change(hands)

    def on_recording(self, recording: bool) -> None:
        """Recorder-reported state (from /episode_events) wins over the optimistic toggle."""
        self.buttons.recording = recording

    @property
    def recording(self) -> bool:
        """Whether an episode is being recorded (as the presses and the recorders' reports say)."""
        return self.buttons.recording

    @recording.setter
    def recording(self, value: bool) -> None:
        self.buttons.recording = value

    @property
    def engaged(self) -> bool:
        """Whether any arm's clutch is engaged."""
        return any(e.engaged for e in self.arms.values())

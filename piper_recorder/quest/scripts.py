"""Deterministic headset motion for the simulated headset: a pure function of time since connect.

Tests and the teleop engineer predict the controller at any time with ``ScriptedHeadset.sample(t)``
(``t`` = frame ``mono`` minus the ``mono`` in the sim's hello). Scripts:

``demo`` (cycle of ``CYCLE_S`` seconds, starting at ``LEAD_S``; times relative to the cycle start):
  0.0-0.15 A (right primary) pressed: start an episode (absent with ``buttons=False``)
  0.5-0.8  grip (right squeeze) ramps 0 -> 1: engage the clutch
  1.0-8.0  right controller draws a figure-eight of +-5 cm (x) by +-3 cm (y) and +-2 cm (z) in the
           XR stage frame, period ``LOOP_S``, with a +-10 deg yaw swing; the trigger closes and
           opens smoothly (period 3.5 s)
  8.2-8.5  grip ramps 1 -> 0: release
  9.0-9.15 A pressed: stop and save; every third cycle (k % 3 == 2) B (right secondary) instead:
           discard. In the cycles k % 3 == 1 the thumbstick is held pressed (right stick_click,
           8.9-9.3) across that A press: the stop chord that labels the episode ``failure`` (plain A:
           ``success``; docs/curation.md)
``idle``    controllers still, nothing pressed.
``circle``  engaged from ``LEAD_S`` + 0.3 s on, right controller on a 4 cm circle in the x-y
            (right/up) plane, period ``LOOP_S``, trigger constant 0.5, no buttons; for tracking tests.
``continuous`` engaged from ``LEAD_S`` + 0.3 s on and never released or paused: the ``demo``
            figure-eight and yaw swing (fading in over 1 s) with a trigger that keeps opening and
            closing (period ``TRIGGER_S``, incommensurate with ``LOOP_S``, so no two rows repeat), no
            buttons ever. For recording sessions driven through the recorders' services (piper-demo):
            every stretch of an episode has moving actions.

``bimanual`` both grips ramp in over 0.3 s from ``LEAD_S`` on and stay closed; for ``BIMANUAL_STILL_S`` the
            left controller stays still while the right one draws the ``circle``; then both move mirrored
            (left-right, about the operator's midline): the right along XR +x while the left goes -x, a
            +-5 cm sine of period ``LOOP_S``, trigger constant 0.5, no buttons. For two-arm tests.

Two hands (``hands=("left", "right")``): the left controller moves too. In ``bimanual`` as above; in every
other script it mirrors the right one left-right (its x offset from ``LEFT_HOME`` the negative of the right's
from ``RIGHT_HOME``, its yaw the negative) and grips and triggers with it; the buttons stay the right
hand's. One hand (the default): the left controller rests at ``LEFT_HOME``, as it always did.

Re-gripping like an operator (every script): when the headset learns that teleop released the clutch
(``regrip(t)``; the sim server calls it when the HUD's ``releases`` count grows, as an operator reads
the HUD and feels the release pulse), the hand lets go of the squeeze over ``REGRIP_OPEN_S``, waits
``REGRIP_PAUSE_S`` and squeezes again over ``REGRIP_CLOSE_S``: a forced release needs the grip
opened below the clutch's release threshold and closed again (``teleop.clutch``), and a headset that
kept squeezing would never engage again after one stall. With two hands, ``regrip(t, hands)`` re-grips the
hands named (an arm's release is its own hand's) while the other keeps squeezing. The motion goes on meanwhile;
``sample`` stays a pure function of the time and the release times noticed so far.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

SCRIPTS = ("demo", "idle", "circle", "continuous", "bimanual")
HANDS = ("right",)  # the hands a script moves by default; two: ("left", "right")
BIMANUAL_STILL_S = 4.0  # bimanual: the left hand's still phase, after the grips close
LEAD_S = 1.0
CYCLE_S = 10.0
LOOP_S = 3.5
TRIGGER_S = 2.9
HEAD_POS = (0.0, 1.6, 0.0)
LEFT_HOME = (-0.2, 1.1, -0.35)
RIGHT_HOME = (0.2, 1.1, -0.35)
PRESS_S = 0.15
REGRIP_OPEN_S = 0.15  # letting go of the squeeze ...
REGRIP_PAUSE_S = 0.4  # ... a short pause, hand open ...
REGRIP_CLOSE_S = 0.3  # ... and squeezing again
REGRIP_S = REGRIP_OPEN_S + REGRIP_PAUSE_S + REGRIP_CLOSE_S


def _smoothstep(x: float) -> float:
    x = min(max(x, 0.0), 1.0)
    return x * x * (3.0 - 2.0 * x)


def _ramp(t: float, t0: float, t1: float) -> float:
    return _smoothstep((t - t0) / (t1 - t0))


def _yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    """Rotation about XR +y (up), xyzw."""
    return (0.0, math.sin(yaw / 2.0), 0.0, math.cos(yaw / 2.0))


def _hand(
    pos: Sequence[float],
    quat: Sequence[float],
    trigger: float = 0.0,
    squeeze: float = 0.0,
    primary: bool = False,
    secondary: bool = False,
    stick_click: bool = False,
) -> dict[str, Any]:
    return {
        "pos": [float(p) for p in pos],
        "quat": [float(q) for q in quat],
        "valid": True,
        "tracked": True,
        "trigger": float(trigger),
        "squeeze": float(squeeze),
        "stick": [0.0, 0.0],
        "stick_click": bool(stick_click),
        "primary": bool(primary),
        "secondary": bool(secondary),
        "menu": False,
    }


@dataclass(frozen=True)
class RightHand:
    """The scripted right controller at one instant (also what ``sample`` encodes)."""

    pos: tuple[float, float, float]
    quat: tuple[float, float, float, float]
    trigger: float
    squeeze: float
    primary: bool
    secondary: bool
    stick_click: bool = False


class ScriptedHeadset:
    """Scripted headset state. ``sample(t)`` is deterministic for a given (script, buttons, seed)."""

    def __init__(self, script: str = "demo", buttons: bool = True, seed: int = 0, hands: Sequence[str] = HANDS):
        if script not in SCRIPTS:
            raise ValueError(f"unknown script {script!r}; choose from {SCRIPTS}")
        if set(hands) - {"left", "right"} or "right" not in hands:
            raise ValueError(f"hands must be ('right',) or ('left', 'right'), got {tuple(hands)}")
        self.script, self.buttons, self.seed = script, buttons, seed
        self.two_hands = "left" in hands
        rng = random.Random(seed)
        # The seed only varies the phase of the head's breathing sway (the hands stay predictable).
        self._head_phase = rng.uniform(0.0, 2.0 * math.pi)
        # each hand's script times at which a release was noticed (the dict replaced whole: read unlocked)
        self._regrips: dict[str, tuple[float, ...]] = {"left": (), "right": ()}

    @property
    def regrips(self) -> tuple[float, ...]:
        """The script times at which a re-grip of either hand started."""
        return tuple(sorted(set(self._regrips["left"]) | set(self._regrips["right"])))

    def regrips_of(self, hand: str) -> tuple[float, ...]:
        """The script times at which a re-grip of ``hand`` started."""
        return self._regrips[hand]

    def regrip(self, t: float, hands: Sequence[str] = ("left", "right")) -> bool:
        """Teleop released the clutch of ``hands`` (noticed at script time ``t``): open and close their grips again.

        The default is both hands: one arm's clutch is whichever hand drives it. A hand is left alone (False when
        every hand is) while its re-grip is under way or for a time before its last one.
        """
        new = dict(self._regrips)
        for hand in hands:
            times = new[hand]
            if not times or t >= times[-1] + REGRIP_S:
                new[hand] = (*times, float(t))
        if new == self._regrips:
            return False
        self._regrips = new  # one assignment: the send thread reads it unlocked
        return True

    def right(self, t: float) -> RightHand:
        """The right controller at ``t`` seconds since connect (the script, with any re-grips)."""
        return self._regripped(t, self._scripted(t), "right")

    def left(self, t: float) -> RightHand | None:
        """The left controller at ``t`` with two hands (the module docstring), else None (it rests at ``LEFT_HOME``)."""
        if not self.two_hands:
            return None
        if self.script == "bimanual":
            return self._regripped(t, self._bimanual(t - LEAD_S, "left"), "left")
        r = self._scripted(t)
        pos = (LEFT_HOME[0] - (r.pos[0] - RIGHT_HOME[0]), LEFT_HOME[1] + r.pos[1] - RIGHT_HOME[1], r.pos[2])
        quat = (r.quat[0], -r.quat[1], r.quat[2], r.quat[3])  # the yaw about XR +y, negated
        return self._regripped(t, RightHand(pos, quat, r.trigger, r.squeeze, False, False), "left")

    def _regripped(self, t: float, hand: RightHand, which: str) -> RightHand:
        factor = 1.0
        for tr in self._regrips[which]:
            if tr <= t < tr + REGRIP_S:
                factor *= (
                    1.0 - _ramp(t, tr, tr + REGRIP_OPEN_S) + _ramp(t, tr + REGRIP_S - REGRIP_CLOSE_S, tr + REGRIP_S)
                )
        return hand if factor == 1.0 else replace(hand, squeeze=hand.squeeze * factor)

    def _scripted(self, t: float) -> RightHand:
        if self.script == "idle" or t < LEAD_S:
            return RightHand(RIGHT_HOME, (0.0, 0.0, 0.0, 1.0), 0.0, 0.0, False, False)
        if self.script == "circle":
            u = t - LEAD_S
            env = _ramp(u, 0.3, 1.3)
            w = 2.0 * math.pi / LOOP_S
            r = 0.04 * env
            pos = (RIGHT_HOME[0] + r * math.sin(w * u), RIGHT_HOME[1] + r * (1.0 - math.cos(w * u)), RIGHT_HOME[2])
            return RightHand(pos, (0.0, 0.0, 0.0, 1.0), 0.5, _ramp(u, 0.0, 0.3), False, False)
        if self.script == "continuous":
            return self._continuous(t - LEAD_S)
        if self.script == "bimanual":
            return self._bimanual(t - LEAD_S, "right")
        u = t - LEAD_S
        k = int(u // CYCLE_S)
        c = u - k * CYCLE_S
        squeeze = _ramp(c, 0.5, 0.8) * (1.0 - _ramp(c, 8.2, 8.5))
        m = min(max(c - 1.0, 0.0), 7.0)  # motion time inside the cycle
        env = _ramp(c, 1.0, 1.5) * (1.0 - _ramp(c, 7.5, 8.0))
        w = 2.0 * math.pi / LOOP_S
        pos = (
            RIGHT_HOME[0] + env * 0.05 * math.sin(w * m),
            RIGHT_HOME[1] + env * 0.03 * math.sin(2.0 * w * m),
            RIGHT_HOME[2] + env * 0.02 * (1.0 - math.cos(w * m)),
        )
        quat = _yaw_quat(env * math.radians(10.0) * math.sin(w * m))
        trigger = env * 0.5 * (1.0 - math.cos(2.0 * math.pi * m / 3.5))
        press_start = self.buttons and 0.0 <= c < PRESS_S
        press_end = self.buttons and 9.0 <= c < 9.0 + PRESS_S
        discard = k % 3 == 2
        stick = self.buttons and k % 3 == 1 and 8.9 <= c < 9.3  # held across the stop press: failure
        return RightHand(
            pos, quat, trigger, squeeze, press_start or (press_end and not discard), press_end and discard, stick
        )

    @staticmethod
    def _continuous(u: float) -> RightHand:
        """``u`` s after ``LEAD_S``: grip ramps in over 0.3 s, then the figure-eight fades in and never stops."""
        m = max(u - 0.3, 0.0)
        env = _ramp(m, 0.0, 1.0)
        w = 2.0 * math.pi / LOOP_S
        pos = (
            RIGHT_HOME[0] + env * 0.05 * math.sin(w * m),
            RIGHT_HOME[1] + env * 0.03 * math.sin(2.0 * w * m),
            RIGHT_HOME[2] + env * 0.02 * (1.0 - math.cos(w * m)),
        )
        quat = _yaw_quat(env * math.radians(10.0) * math.sin(0.7 * w * m))
        trigger = 0.5 - 0.4 * env * math.cos(2.0 * math.pi * m / TRIGGER_S)
        return RightHand(pos, quat, trigger, _ramp(u, 0.0, 0.3), False, False)

    @staticmethod
    def _bimanual(u: float, hand: str) -> RightHand:
        """``hand`` in the ``bimanual`` script, ``u`` s after ``LEAD_S`` (before the re-grips)."""
        home = RIGHT_HOME if hand == "right" else LEFT_HOME
        squeeze = _ramp(u, 0.0, 0.3)
        w = 2.0 * math.pi / LOOP_S
        m = u - 0.3 - BIMANUAL_STILL_S  # the mirrored phase's time
        if m < 0.0:  # the still phase: the left hand still, the right one on the circle
            if hand == "left" or u < 0.3:
                return RightHand(home, (0.0, 0.0, 0.0, 1.0), 0.5, squeeze, False, False)
            c = u - 0.3
            r = 0.04 * _ramp(c, 0.0, 1.0)
            pos = (home[0] + r * math.sin(w * c), home[1] + r * (1.0 - math.cos(w * c)), home[2])
            return RightHand(pos, (0.0, 0.0, 0.0, 1.0), 0.5, squeeze, False, False)
        sign = 1.0 if hand == "right" else -1.0
        pos = (home[0] + sign * 0.05 * _ramp(m, 0.0, 0.5) * math.sin(w * m), home[1], home[2])
        return RightHand(pos, (0.0, 0.0, 0.0, 1.0), 0.5, squeeze, False, False)

    def sample(
        self, t: float, *, mono: float | None = None, frame: int | None = None, rate_hz: float = 90.0
    ) -> dict[str, Any]:
        """The full protocol frame at ``t`` s since connect (``mono`` defaults to ``t``)."""
        mono = t if mono is None else mono
        sway = 0.005 * math.sin(2.0 * math.pi * 0.25 * t + self._head_phase)
        r, left = self.right(t), self.left(t)
        return {
            "t": mono + 1.5 / rate_hz,  # predicted display time: about one and a half frames ahead
            "mono": mono,
            "frame": int(round(t * rate_hz)) if frame is None else frame,
            "state": "FOCUSED",
            "space": "stage",
            "head": {
                "pos": [HEAD_POS[0], HEAD_POS[1] + sway, HEAD_POS[2]],
                "quat": [0.0, 0.0, 0.0, 1.0],
                "valid": True,
                "tracked": True,
            },
            "left": _hand(LEFT_HOME, (0.0, 0.0, 0.0, 1.0))
            if left is None
            else _hand(left.pos, left.quat, left.trigger, left.squeeze),
            "right": _hand(r.pos, r.quat, r.trigger, r.squeeze, r.primary, r.secondary, r.stick_click),
        }

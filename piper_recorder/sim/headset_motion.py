"""Continuous teleoperation motion for the demo, written as a sim-headset replay file.

The sim headset's built-in scripts either pause between 10 s cycles (``demo``) or hold the trigger
constant (``circle``); a recorded episode then contains long runs of identical actions, which
lerobot-doctor flags. This stream engages the clutch once and then never stops moving: a
figure-eight with a yaw swing and a trigger that keeps opening and closing, at incommensurate
periods. ``piper-sim-quest --replay FILE`` plays it with its original timing (frames only; after
the last one it sends heartbeats, so the file is written long enough for the run).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from piper_recorder.quest.scripts import LEAD_S, RIGHT_HOME, ScriptedHeadset

ENGAGE_S = LEAD_S + 0.3  # grip ramps in over 0.3 s from here and is then held
LOOP_S = 3.5
TRIGGER_S = 2.9


def right_hand(t: float) -> dict:
    """The right controller at ``t`` s since connect (XR stage frame: x right, y up, z back)."""
    squeeze = min(max((t - ENGAGE_S) / 0.3, 0.0), 1.0)
    u = max(t - ENGAGE_S - 0.5, 0.0)
    env = min(u / 1.0, 1.0)
    w = 2.0 * math.pi / LOOP_S
    pos = [RIGHT_HOME[0] + env * 0.05 * math.sin(w * u),
           RIGHT_HOME[1] + env * 0.03 * math.sin(2.0 * w * u),
           RIGHT_HOME[2] + env * 0.02 * (1.0 - math.cos(w * u))]
    yaw = env * math.radians(10.0) * math.sin(0.7 * w * u)
    trigger = 0.5 - 0.4 * env * math.cos(2.0 * math.pi * u / TRIGGER_S)
    return {"pos": pos, "quat": [0.0, math.sin(yaw / 2.0), 0.0, math.cos(yaw / 2.0)], "valid": True,
            "tracked": True, "trigger": trigger, "squeeze": squeeze, "stick": [0.0, 0.0], "stick_click": False,
            "primary": False, "secondary": False, "menu": False}


def write_replay(path: Path, duration_s: float, rate_hz: float = 90.0) -> Path:
    """Write ``duration_s`` of frames at ``rate_hz`` (head and left hand from the idle script)."""
    base = ScriptedHeadset("idle", buttons=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for n in range(int(duration_s * rate_hz) + 1):
            t = n / rate_hz
            frame = base.sample(t, frame=n, rate_hz=rate_hz)
            frame["right"] = right_hand(t)
            f.write(json.dumps(frame, separators=(",", ":")) + "\n")
    return path

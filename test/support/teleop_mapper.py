"""The teleop core (the mapper) driven like the node drives it, on a time the test advances: hand pose, joy and
arm feedback, one tick per 10 ms; ``exact`` is a configuration whose targets equal the mapping formula.
"""

from __future__ import annotations

import math

import numpy as np

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.limits import LimitsConfig
from piper_recorder.teleop.mapper import Joy, TeleopConfig, TeleopCore
from piper_recorder.teleop.rotations import axis_angle_to_quat

DT = 0.01
I = np.array([0, 0, 0, 1.0])  # noqa: E741 - the identity quaternion
ARM_P = np.array([0.30, 0.0, 0.20])
ARM_Q = axis_angle_to_quat([0, 1, 0], math.radians(90))  # a tool-down-ish flange orientation
HAND_P = np.array([0.2, 1.1, -0.35])


class Rig:
    """Feeds the core like the node does: hand pose + joy + arm feedback, then one tick per 10 ms."""

    def __init__(self, **cfg):
        self.core = TeleopCore(TeleopConfig(**cfg))
        self.t = 0.0
        self.hand_p, self.hand_q = HAND_P.copy(), I.copy()
        self.arm_p, self.arm_q = ARM_P.copy(), ARM_Q.copy()
        self.joy = Joy()
        self.other = Joy()
        self.headset_alive = True
        self.arm_alive = True

    def step(self, n=1):
        out = []
        for _ in range(n):
            self.t += DT
            if self.headset_alive:
                self.core.on_hand_pose(self.t, self.hand_p, self.hand_q)
                self.core.on_joy(self.t, self.core.cfg.hand, self.joy)
                self.core.on_joy(self.t, self.core.cfg.other_hand, self.other)
            if self.arm_alive:
                self.core.on_arm_pose(self.t, self.arm_p, self.arm_q)
                self.core.on_joint_states(self.t, [0.0] * 7)
            out.append(self.core.tick(self.t))
        return out

    def engage(self):
        self.joy.squeeze = 1.0
        (res,) = self.step()
        assert res.clutch is ClutchEvent.ENGAGED, res
        return res


def exact(**kw):
    """No filter, no tether, generous caps: targets equal the mapping formula."""
    return dict(
        filter=FilterConfig(enabled=False),
        limits=LimitsConfig(max_linear_speed=100.0, max_angular_speed=100.0, tether_m=0.0),
        **kw,
    )

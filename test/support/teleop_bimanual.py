"""Two arms driven like the node drives them, on a time the test advances: each hand's pose and joy, each
arm's feedback, one tick per 10 ms; the core (``Rig``) or the whole session (``SessionRig``).

The two arms stand at different poses, so an arm that took the other's input shows it.
"""

from __future__ import annotations

import math

import numpy as np

from piper_recorder.teleop.bimanual import BimanualConfig, BimanualCore, BimanualTickResult
from piper_recorder.teleop.capture_time import HostToMono
from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.frames import ArmBaseConfig
from piper_recorder.teleop.haptics import HapticConfig
from piper_recorder.teleop.mapper import Joy, TeleopConfig
from piper_recorder.teleop.rotations import axis_angle_to_quat
from piper_recorder.teleop.session import ArmsTick, TeleopNodeConfig, TeleopSession

from support.teleop_session import RECORDERS, Clock

DT = 0.01
HANDS = ("left", "right")
I = np.array([0, 0, 0, 1.0])  # noqa: E741 - the identity quaternion
HAND_P = {"left": np.array([-0.2, 1.1, -0.35]), "right": np.array([0.2, 1.1, -0.35])}  # XR stage
ARM_P = {"left": np.array([0.30, 0.04, 0.20]), "right": np.array([0.28, -0.03, 0.22])}  # each in its own base
ARM_Q = {
    "left": axis_angle_to_quat([0, 1, 0], math.radians(90)),
    "right": axis_angle_to_quat([0, 1, 0], math.radians(80)),
}


def bases(**yaw_pitch_roll: tuple[float, float, float]) -> dict[str, ArmBaseConfig]:
    """``bases(right=(180, 0, 0))``: each named arm's base yaw, pitch, roll (degrees)."""
    return {arm: ArmBaseConfig(*ypr) for arm, ypr in yaw_pitch_roll.items()}


class Rig:
    """Feeds a BimanualCore like the node does: both hands' poses and joys, both arms' feedback, one tick per 10 ms."""

    def __init__(self, arm_bases: dict[str, ArmBaseConfig] | None = None, **cfg: object) -> None:
        self.core = BimanualCore(TeleopConfig(**cfg), BimanualConfig(bases=arm_bases or {}))
        self.t = 0.0
        self.hand_p = {h: HAND_P[h].copy() for h in HANDS}
        self.hand_q = {h: I.copy() for h in HANDS}
        self.joy = {h: Joy() for h in HANDS}
        self.headset_alive = True
        self.arm_alive = dict.fromkeys(HANDS, True)

    def step(self, n: int = 1) -> list[BimanualTickResult]:
        out = []
        for _ in range(n):
            self.t += DT
            for h in HANDS:
                if self.headset_alive:
                    self.core.on_hand_pose(self.t, h, self.hand_p[h], self.hand_q[h])
                    self.core.on_joy(self.t, h, Joy(**vars(self.joy[h])))
                if self.arm_alive[h]:
                    self.core.on_arm_pose(self.t, h, ARM_P[h], ARM_Q[h])
                    self.core.on_joint_states(self.t, h, [0.0] * 7)
            out.append(self.core.tick(self.t))
        return out

    def grip(self, *hands: str) -> BimanualTickResult:
        """Close the grip of ``hands`` for one tick: each must engage."""
        for h in hands:
            self.joy[h].squeeze = 1.0
        (res,) = self.step()
        for h in hands:
            assert res.arms[h].clutch is ClutchEvent.ENGAGED, (h, res.arms[h])
        return res


class SessionRig:
    """Feeds a two-arm TeleopSession like the node: stamped headset inputs per hand, feedback per arm, 10 ms ticks."""

    def __init__(self, arm_bases: dict[str, ArmBaseConfig] | None = None, **cfg: object) -> None:
        self.clock = Clock()
        self.session = TeleopSession(
            TeleopConfig(**cfg),
            TeleopNodeConfig(recorders=list(RECORDERS)),
            HapticConfig(),
            clock=self.clock,
            to_mono=HostToMono(host_ns=self.clock.ns, mono_ns=self.clock.ns),
            bimanual=BimanualConfig(bases=arm_bases or {}),
        )
        self.hand_p = {h: tuple(HAND_P[h].tolist()) for h in HANDS}
        self.joy = {h: Joy() for h in HANDS}
        self.headset_alive = True
        self.arm_alive = dict.fromkeys(HANDS, True)

    def step(self, n: int = 1) -> list[ArmsTick]:
        out = []
        for _ in range(n):
            self.clock.t += DT
            s, stamp = self.session, self.clock.ns()
            for h in HANDS:
                if self.headset_alive:
                    s.on_hand_pose(stamp, self.hand_p[h], (0.0, 0.0, 0.0, 1.0), hand=h)
                    s.on_joy(stamp, h, Joy(**vars(self.joy[h])))
                if self.arm_alive[h]:
                    s.on_arm_pose(ARM_P[h].tolist(), ARM_Q[h].tolist(), arm=h)
                    s.on_joints([0.0] * 7, arm=h)
            out.append(s.tick_arms())
        return out

    def wait(self, seconds: float) -> None:
        self.clock.t += seconds

    def poll(self, ready: bool = True):
        return self.session.poll(lambda _rec: ready)

"""The teleop session driven like the teleop node drives it, on a clock the test sets: stamped headset inputs,
arm feedback and one tick per 10 ms, with the recorders' answers handed back by the test.
"""

from __future__ import annotations

from piper_recorder.teleop.capture_time import HostToMono
from piper_recorder.teleop.haptics import HapticConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig
from piper_recorder.teleop.recorder_calls import Outcome
from piper_recorder.teleop.session import TeleopNodeConfig, TeleopSession

DT = 0.01
HAND_P, IDENTITY = (0.2, 1.1, -0.35), (0.0, 0.0, 0.0, 1.0)
ARM_P, ARM_Q = (0.30, 0.0, 0.20), (0.0, 0.7071067811865476, 0.0, 0.7071067811865476)
RECORDERS = ["lerobot_recorder", "rgbd_recorder"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def ns(self) -> int:
        return round(self.t * 1e9)


class Rig:
    """Feeds the session like the node: stamped headset inputs, arm feedback, one tick per 10 ms."""

    def __init__(self, **cfg: object) -> None:
        self.clock = Clock()
        self.session = TeleopSession(
            TeleopConfig(**cfg),
            TeleopNodeConfig(recorders=list(RECORDERS)),
            HapticConfig(),
            clock=self.clock,
            to_mono=HostToMono(host_ns=self.clock.ns, mono_ns=self.clock.ns),
        )
        self.joy, self.other = Joy(), Joy()
        self.headset_alive = self.arm_alive = True

    def step(self, n: int = 1):
        out = []
        for _ in range(n):
            self.clock.t += DT
            s, stamp = self.session, self.clock.ns()
            if self.headset_alive:
                s.on_hand_pose(stamp, HAND_P, IDENTITY)
                s.on_joy(stamp, "right", Joy(**vars(self.joy)))
                s.on_joy(stamp, "left", Joy(**vars(self.other)))
            if self.arm_alive:
                s.on_arm_pose(ARM_P, ARM_Q)
                s.on_joints([0.0] * 7)
            out.append(s.tick())
        return out

    def wait(self, seconds: float) -> None:
        self.clock.t += seconds

    def poll(self, ready: bool = True):
        return self.session.poll(lambda _rec: ready)

    def press_primary(self, stick_click: bool = False):
        self.joy.primary, self.joy.stick_click = True, stick_click
        (tick,) = self.step()
        self.joy.primary = self.joy.stick_click = False
        self.step()
        return tick


def start_recording(rig: Rig) -> None:
    """Start an episode on both recorders, answered."""
    assert rig.press_primary().result.actions == [Action.START]
    step = rig.poll()
    assert [(s.recorder, s.action) for s in step.sends] == [(r, Action.START) for r in RECORDERS]
    for send in step.sends:
        assert rig.session.on_reply(send.call_id, True, "started").report.outcome is Outcome.OK
    assert rig.session.core.recording

"""TeleopCore: one arm's teleop: controller poses + buttons + arm feedback in, safe EEF targets and recorder actions out.

Pure Python, driven with explicit monotonic times so tests can replay any sequence. The node feeds
each message into ``on_*`` and calls ``tick(t)`` at the control rate; a tick returns a target only
while the clutch is engaged.

The driving hand (``TeleopConfig.hand``) drives the arm: its grip is the clutch, its trigger the
gripper, its menu button releases the clutch, its pose moves the arm (``arm_engine.ArmEngine``: the
mapping, filters, limits, watchdogs, interlocks and haptics of one arm). The episode buttons are the
driving hand's A/X (start, stop and save; with the thumbstick held in, the stop labels the episode
failure) and B/Y (discard), and the other hand's X/A held for ``delete_hold_s`` (delete the last
saved episode) (``episode_buttons.EpisodeButtons``). A change of input source releases the arm and
forgets the held inputs (``coordinator.Coordinator``). Two arms, one per hand: ``bimanual.BimanualCore``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .arm_engine import ArmEngine, ArmTick, Counters
from .config import TeleopConfig
from .coordinator import Coordinator
from .episode_buttons import Action
from .frames import remap_matrix
from .inputs import Joy, Pose

__all__ = ["Action", "Counters", "Joy", "Pose", "TeleopConfig", "TeleopCore", "TickResult"]


@dataclass
class TickResult(ArmTick):
    """What one control tick did: the target (while engaged), clutch event, haptics (``ArmTick``), and the presses."""

    actions: list[Action] = field(default_factory=list)
    outcome: str | None = None  # the stop chord's label for the episode being stopped (docs/curation.md)
    # the capture stamp (header stamp, ROS ns) of the press that asked for the STOP: the episode ends there,
    # not when the request reaches a recorder (stop_episode_at); None: unstamped, it ends at the arrival
    stop_stamp_ns: int | None = None


class TeleopCore(Coordinator):
    """The single-arm teleop state machine: inputs in through ``on_*``, a target out of each ``tick``."""

    def __init__(self, cfg: TeleopConfig, remap: np.ndarray | None = None):
        """Start idle (clutch released, nothing held).

        ``remap``: the input's frame -> arm base (default: the XR stage remap of ``cfg.frame``); an
        input that already speaks the arm base frame (``piper_recorder.teleop.spacemouse``) passes the identity.
        """
        cfg.validate()
        counters = Counters()  # one set: the arm's and the session's
        self.arm = ArmEngine(cfg, remap_matrix(cfg.frame) if remap is None else remap, counters)
        super().__init__(cfg, {cfg.hand: self.arm}, counters)
        # the arm's parts, as the session, the SpaceMouse and the tests reach them
        self.M = self.arm.M
        self.clutch = self.arm.clutch
        self.limits = self.arm.limits
        self.pos_filter, self.rot_filter = self.arm.pos_filter, self.arm.rot_filter
        self.limits_seen = self.arm.limits_seen

    # ---- inputs (the arm's go to its engine) --------------------------------------------------
    def on_hand_pose(self, t: float, p: ArrayLike, q: ArrayLike, order: int | None = None) -> bool:
        """``t``: capture time of the pose (monotonic clock); ``order``: its source order (header stamp, ns)."""
        return self.arm.on_hand_pose(t, p, q, order)

    def on_arm_pose(self, t: float, p: ArrayLike, q: ArrayLike) -> bool:
        """Take the arm's measured flange pose at ``t``; False when refused (not finite, not unit)."""
        return self.arm.on_arm_pose(t, p, q)

    def on_joint_states(self, t: float, positions: ArrayLike) -> bool:
        """Take the arm's joint positions at ``t``; False when refused."""
        return self.arm.on_joint_states(t, positions)

    def on_arm_fault(self, fault: str | None) -> None:
        """The arm reported a fault (message) or cleared it (None)."""
        self.arm.on_arm_fault(fault)

    @property
    def last_release(self) -> str | None:
        """Why the newest forced release happened (menu, stale stream, ...)."""
        return self.arm.last_release

    @property
    def last_release_t(self) -> float | None:
        """When the newest forced release happened (monotonic)."""
        return self.arm.last_release_t

    @property
    def _hand_t(self) -> float:
        """The capture time of the hand pose held."""
        return self.arm.hand_t

    # ---- control tick -------------------------------------------------------------------------
    def tick(self, t: float) -> TickResult:
        """One control tick at ``t``: the presses, and the next target while engaged."""
        res = TickResult()
        res.actions, res.outcome, res.stop_stamp_ns = self.buttons.take(t)
        self.arm.tick(t, res)
        return res

    def rebase(self) -> None:
        """Re-anchor on the last published target (``ArmEngine.rebase``: a rate input whose target a limit held)."""
        self.arm.rebase()

"""BimanualCore: two arms, one per hand, each with its own clutch; the episode buttons as with one arm (no ROS).

The left controller drives the arm named ``left``, the right controller the arm named ``right``
(``names.BIMANUAL_ARMS``: the arms' names are also their namespaces). Each arm has its own engine
(``arm_engine.ArmEngine``): its hand's grip is its clutch, its trigger its gripper, its menu button
releases it, and its hand's pose moves it, with its own anchor, filters, limits, watchdogs, stall rule
and final check; gripping one hand never moves the other arm. What happens to one arm happens to it
alone: its stale feedback, its fault, its limits, its refusals and forced releases (felt in its own
hand). A change of input source (a new headset page or connection) releases both arms, and each then
needs a fresh grip of the new source (``coordinator.Coordinator``).

The episode buttons keep their hands and meanings (``episode_buttons.EpisodeButtons``): with
``TeleopConfig.hand`` right (the default), A starts an episode and stops and saves it (with the
right thumbstick held in, the stop labels it failure; alone, success), B discards it, and X on the
left controller held for ``delete_hold_s`` deletes the last saved episode; ``hand: left`` swaps
them (X / Y, and A held). The grips, triggers and menu buttons are never episode buttons.

Each arm's base may face another way than the operator (``ArmBaseConfig``: side by side, facing each
other, turned): its remap is the XR stage -> operator's frame remap (``frame.yaw_offset_deg``) followed
by the base's orientation, so a hand moving forward moves its flange forward in the world
(``frames.arm_remap``). Both arms take the same ``TeleopConfig`` (rates, scale, clutch thresholds,
filters, and limits in each arm's own base frame).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from numpy.typing import ArrayLike

from ..names import BIMANUAL_ARMS
from .arm_engine import ArmEngine, ArmTick, Counters, total
from .config import TeleopConfig
from .coordinator import Coordinator
from .episode_buttons import Action
from .frames import ArmBaseConfig, arm_remap

BASE_PREFIX = "arm_base."  # an arm's base calibration parameters: arm_base.<arm>.yaw_deg, ...


@dataclass
class BimanualConfig:
    """The two arms (each named after the hand that drives it) and where each one's base faces."""

    arms: tuple[str, ...] = BIMANUAL_ARMS
    # arm -> its base's orientation in the operator's frame; an arm not named faces like the operator
    bases: dict[str, ArmBaseConfig] = field(default_factory=dict)

    def base(self, arm: str) -> ArmBaseConfig:
        """Arm ``arm``'s base calibration (the default: facing like the operator)."""
        return self.bases.get(arm) or ArmBaseConfig()

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        arms = self.arms
        if not isinstance(arms, (tuple, list)) or len(arms) != len(BIMANUAL_ARMS) or set(arms) != set(BIMANUAL_ARMS):
            raise ValueError(f"arms must name the two arms {', '.join(BIMANUAL_ARMS)} once each, got {arms!r}")
        for arm, base in self.bases.items():
            if arm not in arms:
                raise ValueError(f"{BASE_PREFIX}{arm}: no arm {arm!r} (arms: {', '.join(arms)})")
            if not isinstance(base, ArmBaseConfig):
                raise ValueError(f"{BASE_PREFIX}{arm} must be an ArmBaseConfig, got {base!r}")
            base.validate(f"{BASE_PREFIX}{arm}.")


@dataclass
class BimanualTickResult:
    """What one control tick did: each arm's part (target while engaged, clutch event, haptics), and the presses."""

    arms: dict[str, ArmTick]
    actions: list[Action] = field(default_factory=list)
    outcome: str | None = None  # the stop chord's label for the episode being stopped
    stop_stamp_ns: int | None = None  # the capture stamp of the press that asked for the STOP (None: unstamped)


class BimanualCore(Coordinator):
    """Two arm engines, one per hand, and the episode buttons: inputs in through ``on_*``, targets out of ``tick``."""

    def __init__(self, cfg: TeleopConfig, bimanual: BimanualConfig | None = None):
        """Start idle (both clutches released, nothing held); ValueError names a bad setting."""
        cfg.validate()
        bimanual = bimanual or BimanualConfig()
        bimanual.validate()
        engines = {arm: ArmEngine(cfg, arm_remap(cfg.frame, bimanual.base(arm))) for arm in bimanual.arms}
        super().__init__(cfg, engines, Counters())  # the session's own: rejected joys, source changes

    # ---- inputs: a hand's pose and an arm's feedback go to that arm's engine --------------------
    def on_hand_pose(self, t: float, hand: str, p: ArrayLike, q: ArrayLike, order: int | None = None) -> bool:
        """``hand``'s pose, captured at ``t`` (monotonic) with source order ``order`` (header stamp, ns)."""
        return self.engine(hand).on_hand_pose(t, p, q, order)

    def on_arm_pose(self, t: float, arm: str, p: ArrayLike, q: ArrayLike) -> bool:
        """Arm ``arm``'s measured flange pose at ``t``; False when refused (not finite, not unit)."""
        return self.engine(arm).on_arm_pose(t, p, q)

    def on_joint_states(self, t: float, arm: str, positions: ArrayLike) -> bool:
        """Arm ``arm``'s joint positions at ``t``; False when refused."""
        return self.engine(arm).on_joint_states(t, positions)

    def on_arm_fault(self, arm: str, fault: str | None) -> None:
        """Arm ``arm`` reported a fault (message) or cleared it (None): it alone is refused or released."""
        self.engine(arm).on_arm_fault(fault)

    def total_counters(self) -> Counters:
        """The session's counters and both arms' summed."""
        return total([self.counters, *(e.counters for e in self.arms.values())])

    # ---- control tick -------------------------------------------------------------------------
    def tick(self, t: float) -> BimanualTickResult:
        """One control tick at ``t``: the presses, and each arm's next target while its clutch is engaged."""
        actions, outcome, stamp = self.buttons.take(t)
        return BimanualTickResult({arm: e.tick(t, ArmTick()) for arm, e in self.arms.items()}, actions, outcome, stamp)

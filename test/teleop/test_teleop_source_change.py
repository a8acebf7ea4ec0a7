"""A change of input source (another page took over the relay, the headset reconnected) is a clutch
event: the clutch releases at once, stays released while the new source's grip is held, and the arm
then follows the new source from where it stands, never the old anchor.
"""

import math

import numpy as np

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig, TeleopCore

from support.teleop_mapper import ARM_P, HAND_P, Rig, exact

REASON = "input source changed"


def _change(rig: Rig, hands=("left", "right"), order=None) -> None:
    for hand in hands:
        rig.core.on_source_change(rig.t, REASON, hand, order)


def test_a_new_source_holding_the_grip_moves_nothing_until_it_grips_again():
    rig = Rig(**exact())
    rig.engage()
    rig.step(5)
    published = rig.core.counters.published
    # page B takes over, its controller 30 cm further forward and its grip held
    _change(rig, order=123)
    rig.hand_p = HAND_P + [0.0, 0.0, -0.30]
    (res,) = rig.step()
    assert res.clutch is ClutchEvent.FORCED_RELEASE and res.reason == REASON
    assert res.target is None and "release" in res.haptics
    assert rig.core.counters.forced_releases == 1 and rig.core.counters.source_changes == 1
    for res in rig.step(50):  # the grip stays held: never re-engages, nothing published
        assert res.target is None and res.clutch is not ClutchEvent.ENGAGED
    assert rig.core.counters.published == published
    rig.joy.squeeze = 0.0
    rig.step(2)
    res = rig.engage()  # a fresh grip: anchored where the arm stands and where B's hand is now
    np.testing.assert_allclose(res.target.p, ARM_P, atol=1e-12)
    rig.hand_p = rig.hand_p + [0.0, 0.0, -0.02]  # B moves 2 cm forward: the arm follows 2 cm, no more
    (res,) = rig.step()
    np.testing.assert_allclose(res.target.p, ARM_P + [0.02, 0.0, 0.0], atol=1e-12)


def test_one_change_reported_on_both_hands_acts_once():
    rig = Rig(**exact())
    rig.engage()
    _change(rig, order=7)
    assert rig.core.counters.source_changes == 1 and rig.core.counters.forced_releases == 1
    _change(rig, order=8)  # a second change (e.g. the page's own hello after the relay's)
    assert rig.core.counters.source_changes == 2 and rig.core.counters.forced_releases == 1


def test_change_without_an_engaged_clutch_still_needs_an_open_grip():
    rig = Rig(**exact())
    rig.joy.squeeze = 1.0
    _change(rig)
    for res in rig.step(10):
        assert res.clutch is not ClutchEvent.ENGAGED and res.target is None
    assert rig.core.counters.forced_releases == 0  # nothing was engaged: no release counted
    rig.joy.squeeze = 0.0
    rig.step()
    rig.engage()


def test_the_old_sources_pose_is_forgotten():
    """B's grip must not latch A's last pose: with no pose of B yet, the engage is refused."""
    core = TeleopCore(TeleopConfig(**exact()))
    core.on_arm_pose(0.0, ARM_P, [0, 0, 0, 1.0])
    core.on_joint_states(0.0, [0.0] * 7)
    core.on_hand_pose(0.0, HAND_P, [0, 0, 0, 1.0])
    core.on_source_change(0.001, REASON, None)
    core.on_joy(0.002, "right", Joy(squeeze=0.0))
    core.tick(0.002)
    core.on_joy(0.003, "right", Joy(squeeze=1.0))
    res = core.tick(0.003)
    assert res.clutch is ClutchEvent.REFUSED and res.reason == "controller not tracked"


def test_buttons_held_across_the_change_are_no_press():
    rig = Rig(**exact())
    rig.step()
    _change(rig)
    rig.joy.primary = True  # the new source's first joys: the driving hand's A held ...
    rig.other.primary = True  # ... and the other hand's delete button held
    results = rig.step(int(2 * rig.core.cfg.delete_hold_s / 0.01))
    assert all(not r.actions for r in results), [r.actions for r in results if r.actions]
    rig.joy.primary = rig.other.primary = False
    rig.step()
    rig.joy.primary = True
    (res,) = rig.step()
    assert res.actions == [Action.START]


def test_stamp_order_restarts_with_the_new_source():
    """A reload whose clock runs 1,000 s behind: its stamps are older than the old page's, yet its
    inputs are taken (the order held is the old source's).
    """
    core = TeleopCore(TeleopConfig(**exact()))
    core.on_hand_pose(10.0, HAND_P, [0, 0, 0, 1.0], order=2_000_000_000_000)
    core.on_source_change(10.01, REASON, "right", order=2_000_000_000_001)
    assert core.on_hand_pose(10.02, HAND_P, [0, 0, 0, 1.0], order=1_000_000_000_000)
    assert core.on_joy(10.02, "right", Joy(), order=1_000_000_000_000)
    assert core.counters.out_of_order_inputs == 0
    assert math.isfinite(core._hand_t)

"""Clutch hysteresis, menu release, re-arming and interlock refusals."""

import math

import pytest

from piper_recorder.teleop.clutch import Clutch, ClutchConfig
from piper_recorder.teleop.clutch import ClutchEvent as E


def test_hysteresis_band():
    c = Clutch(ClutchConfig())
    assert c.update(0.69, False, None) is E.NONE and not c.engaged
    assert c.update(0.70, False, None) is E.NONE and not c.engaged  # strictly above 0.7
    assert c.update(0.71, False, None) is E.ENGAGED
    for s in (0.6, 0.4, 0.3):  # inside the band (and at the edge) it stays engaged
        assert c.update(s, False, None) is E.NONE and c.engaged
    assert c.update(0.29, False, None) is E.RELEASED and not c.engaged
    assert c.update(0.5, False, None) is E.NONE and not c.engaged  # inside the band it stays released


def test_menu_forces_release_and_requires_grip_to_open():
    c = Clutch(ClutchConfig())
    c.update(0.9, False, None)
    assert c.update(0.9, True, None) is E.FORCED_RELEASE and not c.engaged
    assert c.update(0.9, False, None) is E.NONE and not c.engaged  # grip still closed: no re-engage
    c.update(0.1, False, None)
    assert c.update(0.9, False, None) is E.ENGAGED


def test_refused_engage_retries_while_grip_held():
    c = Clutch(ClutchConfig())
    assert c.update(0.9, False, "no arm feedback") is E.REFUSED and not c.engaged
    assert c.update(0.9, False, None) is E.ENGAGED


def test_nan_grip_counts_as_open():
    c = Clutch(ClutchConfig())
    c.update(0.9, False, None)
    assert c.update(math.nan, False, None) is E.RELEASED


def test_config_validated():
    with pytest.raises(ValueError):
        Clutch(ClutchConfig(engage_above=0.3, release_below=0.7))

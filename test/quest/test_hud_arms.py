"""The HUD with two arms: each arm's clutch, state and the releases teleop made, named by arm; one arm unchanged.

Pure: the HUD model fed teleop's status as the quest_video node parses it (plain dicts), and its rendering.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

from piper_recorder.quest.hud import (
    BACKGROUND,
    INFO_GREY,
    READY_GREEN,
    HudModel,
    HudState,
    _font,
    arm_labels,
    hud_state_from_jpeg,
    render_hud,
    render_hud_image,
)

ARMS = ("left", "right")
# every field the one-arm HUD reports (the simulated headset and the graph tests read them)
ONE_ARM_FIELDS = {
    "recording",
    "episode_index",
    "elapsed_s",
    "saved_count",
    "engaged",
    "input_hz",
    "headset",
    "limits",
    "error",
    "arm",
    "releases",
    "degraded",
    "last_release",
    "last_episode",
    "lines",
}


def _arm(engaged: bool, releases: int = 0, reason: str | None = None, age: float | None = None, **kw) -> dict:
    """One arm's part of teleop's two-arm status (``session._arm_status``)."""
    return {
        "engaged": engaged,
        "limits_active": [],
        "last_release": reason,
        "last_release_age_s": age,
        "forced_releases": releases,
        **kw,
    }


def _teleop(left: dict, right: dict) -> dict:
    """Teleop's two-arm status: the one-arm keys (any arm engaged, summed counts, the newest release) and arms."""
    newest = min(
        (a for a in (left, right) if a["last_release_age_s"] is not None),
        key=lambda a: a["last_release_age_s"],
        default=left,
    )
    return {
        "engaged": left["engaged"] or right["engaged"],
        "forced_releases": left["forced_releases"] + right["forced_releases"],
        "limits_active": sorted({*left["limits_active"], *right["limits_active"]}),
        "last_release": newest["last_release"],
        "last_release_age_s": newest["last_release_age_s"],
        "last_alarm": None,
        "arms": {"left": left, "right": right},
    }


def test_arm_labels_are_initials_when_they_tell_the_arms_apart():
    assert arm_labels(ARMS) == {"left": "L", "right": "R"}
    assert arm_labels(("left", "lift")) == {"left": "LEFT", "lift": "LIFT"}


def test_one_arm_reports_and_shows_what_it_always_did():
    m = HudModel("lerobot_recorder")
    m.on_teleop_status(10.0, {"engaged": True, "forced_releases": 0, "limits_active": ["workspace"]})
    m.on_headset("connected", 90.0)
    m.on_arm(10.0, "OK", "")
    d = m.state(10.0).to_dict()
    assert set(d) == ONE_ARM_FIELDS
    assert d["lines"] == ["READY  0 saved", "0 saved | ENGAGED | input 90 Hz | arm OK", "LIMIT workspace"]
    m.on_teleop_status(11.0, {"engaged": False, "forced_releases": 1, "last_release": "headset stream stale (1.0 s)"})
    st = m.state(11.0)
    assert st.error == "RELEASED: headset stream stale (1.0 s) - re-grip" and st.releases == 1 and st.arms == {}


def test_one_arm_lines_are_drawn_at_their_size_even_when_too_wide():
    """A one-arm line wider than the strip is drawn as it always was (24 px, clipped), not fitted like two arms'."""
    m = HudModel("lerobot_recorder")
    m.on_teleop_status(10.0, {"engaged": True})
    m.on_headset("connected", 90.0)
    m.on_arm(10.0, "ERROR", "CAN bus silent for 2.0 s on can0 (driver)")
    st = m.state(10.0)
    assert _font(24).getbbox(st.info_line())[2] > 640 - 18  # too wide at 24 px
    want = Image.new("RGB", (640, 140), BACKGROUND)
    draw = ImageDraw.Draw(want)
    draw.text((18, 10), st.headline(), font=_font(44), fill=READY_GREEN)
    draw.text((18, 66), st.info_line(), font=_font(24), fill=INFO_GREY)
    assert np.array_equal(np.asarray(render_hud_image(st)), np.asarray(want))


def test_two_arms_show_each_clutch_and_keep_the_one_arm_fields():
    m = HudModel("lerobot_recorder", arms=ARMS)
    m.on_headset("connected", 90.0)
    assert m.state(0.0).info_line() == "0 saved | L --  R -- | input 90 Hz | arm --"
    m.on_teleop_status(1.0, _teleop(_arm(True), _arm(False)))
    st = m.state(1.0)
    assert st.info_line() == "0 saved | L ENGAGED  R idle | input 90 Hz | arm --"
    assert st.engaged is True  # any arm, as teleop's top-level key says
    d = st.to_dict()
    assert set(d) == ONE_ARM_FIELDS | {"arms"}
    assert d["arms"]["left"]["engaged"] is True and d["arms"]["right"]["engaged"] is False
    assert d["arms"]["left"]["label"] == "L" and d["lines"][1] == st.info_line()
    m.on_teleop_status(2.0, _teleop(_arm(False), _arm(True)))
    assert m.state(2.0).info_line() == "0 saved | L idle  R ENGAGED | input 90 Hz | arm --"


def test_two_arms_show_the_release_of_one_arm_while_the_other_stays_engaged():
    """Teleop released the left arm; the right one still engaged (teleop's top-level engaged stays true): the HUD
    says which arm to re-grip and why, and ``releases`` is the total the simulated headset re-grips on.
    """
    m = HudModel("lerobot_recorder", arms=ARMS)
    m.on_teleop_status(10.0, _teleop(_arm(True), _arm(True)))
    stale = "headset stream stale (1.013 s)"
    m.on_teleop_status(11.0, _teleop(_arm(False, 1, stale, 0.2), _arm(True)))
    st = m.state(11.5)
    assert st.error == f"RELEASED: L {stale} - re-grip" and st.alert_line() == (st.error, "error")
    assert st.engaged is True and st.releases == 1 and st.last_release == stale
    assert st.arms["left"].releases == 1 and st.arms["left"].last_release == stale
    assert st.arms["right"].releases == 0 and st.arms["right"].last_release == ""
    assert m.state(11.0 + 8.5).error == ""  # held as with one arm
    # the right arm's own menu press: counted, not told
    m.on_teleop_status(30.0, _teleop(_arm(True, 1, stale, 19.0), _arm(False, 1, "menu", 0.1)))
    st = m.state(30.0)
    assert st.error == "" and st.releases == 2 and st.arms["right"].last_release == "menu"
    # a new input source releases both: one line for both arms
    both = "headset input source changed"
    m.on_teleop_status(40.0, _teleop(_arm(False, 2, both, 0.0), _arm(False, 2, both, 0.0)))
    st = m.state(40.0)
    assert st.error == f"RELEASED: L+R {both} - re-grip" and st.releases == 4 and st.engaged is False
    # different reasons: each arm's
    m.on_teleop_status(60.0, _teleop(_arm(False, 3, "arm feedback stale", 0.0), _arm(False, 3, "arm fault: x", 0.0)))
    assert m.state(60.0).error == "RELEASED: L arm feedback stale; R arm fault: x - re-grip"
    d = hud_state_from_jpeg(render_hud(m.state(60.0)))
    assert d is not None and d["releases"] == 6 and d["arms"]["right"]["last_release"] == "arm fault: x"
    assert d["error"].startswith("RELEASED: ")  # what the simulated headset reads


def test_two_arms_heard_late_show_only_a_recent_release():
    m = HudModel("lerobot_recorder", arms=ARMS, error_hold_s=8.0)
    m.on_teleop_status(100.0, _teleop(_arm(False, 3, "old", 30.0), _arm(False, 1, "arm feedback stale", 0.5)))
    st = m.state(100.0)
    assert st.error == "RELEASED: R arm feedback stale - re-grip" and st.releases == 4
    assert m.state(107.4).error and m.state(107.6).error == ""  # held from the release, not from now
    late = HudModel("lerobot_recorder", arms=ARMS, error_hold_s=8.0)
    late.on_teleop_status(100.0, _teleop(_arm(False, 3, "old", 30.0), _arm(True, 1, "x", 0.5)))
    assert late.state(100.0).error == ""  # the recent one was answered: the right arm is engaged again


def test_two_arms_taken_from_teleop_when_no_parameter_names_them():
    m = HudModel("lerobot_recorder")
    m.on_teleop_status(1.0, _teleop(_arm(False), _arm(True)))
    assert m.state(1.0).info_line() == "0 saved | L idle  R ENGAGED | input -- | arm --"
    m.on_teleop_status(2.0, _teleop(_arm(False, 1, "arm feedback stale", 0.0), _arm(True)))
    assert m.state(2.0).error == "RELEASED: L arm feedback stale - re-grip"
    odd = HudModel("lerobot_recorder")
    odd.on_teleop_status(1.0, {"engaged": True, "arms": {"Left!": {}, "x": []}})  # not arm names: one arm
    assert odd.state(1.0).info_line() == "0 saved | ENGAGED | input -- | arm --"


def test_two_arms_state_and_limits_name_their_arm():
    m = HudModel("lerobot_recorder", arms=ARMS)
    m.on_arm(1.0, "OK", "", "left")
    assert m.state(1.0).arm == "R --"
    m.on_arm(1.0, "OK", "", "right")
    assert m.state(1.0).arm == "OK"
    m.on_arm(2.0, "ERROR", "CAN timeout", "right")
    m.on_arm(2.0, "OK", "", "elsewhere")  # an arm the HUD does not show
    st = m.state(2.0)
    assert st.arm == "R ERROR: CAN timeout" and st.arms["right"].status == "ERROR: CAN timeout"
    m.on_teleop_status(
        3.0, _teleop(_arm(True, limits_active=["workspace"]), _arm(True, limits_active=["linear_speed", "tether"]))
    )
    assert m.state(3.0).alert_line() == ("LIMIT L workspace  R linear_speed, tether", "limit")
    assert m.state(3.0).limits == ["linear_speed", "tether", "workspace"]  # the union, as teleop reports it


def test_two_arms_lines_fit_the_strip():
    """The two-arm second line is longer than one arm's: drawn smaller rather than cut at the strip's edge."""
    arms = HudModel(arms=ARMS).arms
    for a in arms.values():
        a.engaged = True
    st = HudState(saved_count=123, engaged=True, input_hz=90.0, arm="OK", arms=arms)
    assert _font(24).getbbox(st.info_line())[2] > 640 - 18  # too wide at 24 px
    with Image.open(io.BytesIO(render_hud(st))) as im:
        rgb = np.asarray(im.convert("RGB"), dtype=int)
    drawn = np.abs(rgb[66:100] - np.array(BACKGROUND)).sum(axis=2) > 120
    columns = np.nonzero(drawn.any(axis=0))[0]
    assert columns.min() < 30 and columns.max() < 630  # the whole line, short of the edge (cut: up to 639)
    assert hud_state_from_jpeg(render_hud(st))["lines"][1] == "123 saved | L ENGAGED  R ENGAGED | input 90 Hz | arm OK"

"""The simulated headset: deterministic script timeline, frames on the wire match ScriptedHeadset.sample,
replay of a recorded stream with its relative timing, and the CLI.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time

import pytest

from piper_recorder.quest import sim_server
from piper_recorder.quest.client import ClientConfig, QuestClient
from piper_recorder.quest.protocol import Frame, Hello, parse_line
from piper_recorder.quest.scripts import CYCLE_S, LEAD_S, RIGHT_HOME, ScriptedHeadset
from piper_recorder.quest.sim_server import SimConfig, SimQuestServer

pytestmark = pytest.mark.slow  # the simulated headset streams over real sockets in real time

DT = 1.0 / 90.0


def timeline(h: ScriptedHeadset, seconds: float):
    n = int(seconds / DT)
    return [(i * DT, h.right(i * DT)) for i in range(n)]


def edges(samples, attr):
    """Times at which a boolean attribute rises."""
    out, prev = [], False
    for t, r in samples:
        v = getattr(r, attr)
        if v and not prev:
            out.append(round(t - LEAD_S, 2))
        prev = v
    return out


def test_script_is_a_pure_function_of_time():
    a, b = ScriptedHeadset("demo", seed=5), ScriptedHeadset("demo", seed=5)
    for t in (0.0, 1.3, 4.56, 17.0, 123.4):
        assert a.sample(t) == b.sample(t)
    assert ScriptedHeadset("demo", seed=6).right(4.56) == a.right(4.56)  # the seed never moves the hands


def test_two_hands_mirror_the_right_one_or_follow_the_bimanual_script():
    from piper_recorder.quest.scripts import BIMANUAL_STILL_S, LEFT_HOME

    one = ScriptedHeadset("continuous")
    assert one.left(5.0) is None and one.sample(5.0)["left"]["pos"] == list(LEFT_HOME)  # as it always was
    two = ScriptedHeadset("continuous", hands=("left", "right"))
    for t in (2.0, 3.3, 7.9):
        r, lf = two.right(t), two.left(t)
        assert lf is not None and r == one.right(t)  # the right hand is the one-hand script's
        assert lf.pos[0] - LEFT_HOME[0] == pytest.approx(-(r.pos[0] - RIGHT_HOME[0]))  # mirrored left-right
        assert lf.pos[1] - LEFT_HOME[1] == pytest.approx(r.pos[1] - RIGHT_HOME[1]) and lf.pos[2] == r.pos[2]
        assert lf.squeeze == r.squeeze and not lf.primary
        assert two.sample(t)["left"]["pos"] == pytest.approx(list(lf.pos))
    # bimanual: both grip; the left hand still while the right one circles, then the two move mirrored
    b = ScriptedHeadset("bimanual", hands=("left", "right"))
    still = [LEAD_S + 0.5 + 0.25 * i for i in range(int((BIMANUAL_STILL_S - 0.3) / 0.25))]
    assert {b.left(t).pos for t in still} == {LEFT_HOME}
    assert max(abs(b.right(t).pos[0] - RIGHT_HOME[0]) for t in still) > 0.03
    assert all(b.left(t).squeeze == b.right(t).squeeze == 1.0 for t in still)
    moving = [LEAD_S + 0.3 + BIMANUAL_STILL_S + 0.8 + 0.1 * i for i in range(30)]
    dx = [(b.right(t).pos[0] - RIGHT_HOME[0], b.left(t).pos[0] - LEFT_HOME[0]) for t in moving]
    assert max(abs(r) for r, _ in dx) > 0.04 and all(lx == pytest.approx(-rx) for rx, lx in dx)
    with pytest.raises(ValueError, match="hands"):
        ScriptedHeadset("demo", hands=("left",))


def test_demo_cycle_buttons_clutch_and_motion():
    h = ScriptedHeadset("demo")
    samples = timeline(h, LEAD_S + 3 * CYCLE_S)
    # A at each cycle start and end, except the third cycle, which ends with B (discard)
    assert edges(samples, "primary") == pytest.approx([0.0, 9.0, 10.0, 19.0, 20.0], abs=0.02)
    assert edges(samples, "secondary") == pytest.approx([29.0], abs=0.02)
    engaged = [t - LEAD_S for t, r in samples if r.squeeze > 0.7]
    assert engaged[0] == pytest.approx(0.5 + 0.3 * 0.5, abs=0.05)  # smooth ramp crosses 0.7 mid-way
    # the controller only moves while engaged, within +-5 cm of home, smoothly
    for _t, r in samples:
        d = [p - q for p, q in zip(r.pos, RIGHT_HOME)]
        assert max(abs(x) for x in d) <= 0.0501
        if math.dist(r.pos, RIGHT_HOME) > 1e-6:
            assert r.squeeze > 0.99
        assert abs(math.sqrt(sum(q * q for q in r.quat)) - 1) < 1e-12
    speeds = [math.dist(a.pos, b.pos) / DT for (_, a), (_, b) in itertools.pairwise(samples)]
    assert 0.05 < max(speeds) < 0.25
    triggers = [r.trigger for _t, r in samples]
    assert max(triggers) > 0.95 and min(triggers) == 0.0


def test_no_buttons_and_other_scripts():
    samples = timeline(ScriptedHeadset("demo", buttons=False), LEAD_S + 3 * CYCLE_S)
    assert not any(r.primary or r.secondary for _t, r in samples)
    idle = timeline(ScriptedHeadset("idle"), 5.0)
    assert all(r.pos == RIGHT_HOME and r.squeeze == 0 for _t, r in idle)
    circle = timeline(ScriptedHeadset("circle"), 8.0)
    assert circle[-1][1].squeeze == 1.0 and max(math.dist(r.pos, RIGHT_HOME) for _t, r in circle) > 0.07
    with pytest.raises(ValueError):
        ScriptedHeadset("dance")


def test_continuous_script_never_pauses_or_releases():
    """piper-demo's script: engaged once, then every 1/30 s row sees a new pose and a new trigger."""
    h = ScriptedHeadset("continuous")
    samples = timeline(h, LEAD_S + 40.0)
    assert not any(r.primary or r.secondary for _t, r in samples)
    engaged = [t for t, r in samples if r.squeeze > 0.7]
    assert engaged[0] == pytest.approx(LEAD_S + 0.19, abs=0.03)  # the 0.3 s smooth ramp crosses 0.7
    assert all(r.squeeze == 1.0 for t, r in samples if t >= LEAD_S + 0.3)  # never released
    moving = [(t, r) for t, r in samples if t >= LEAD_S + 1.3]
    rows = moving[::3]  # 30 Hz rows from the 90 Hz timeline
    for (_, a), (_, b), (_, c) in zip(rows, rows[1:], rows[2:]):
        assert math.dist(a.pos, b.pos) > 1e-4, (a, b)
        assert max(abs(a.trigger - b.trigger), abs(b.trigger - c.trigger)) > 1e-4, (a, c)  # never 3 equal rows
    for _t, r in samples:
        assert max(abs(p - q) for p, q in zip(r.pos, RIGHT_HOME)) <= 0.0501
        assert 0.0 <= r.trigger <= 1.0 and abs(math.sqrt(sum(q * q for q in r.quat)) - 1) < 1e-12
    speeds = [math.dist(a.pos, b.pos) / DT for (_, a), (_, b) in itertools.pairwise(samples)]
    assert 0.05 < max(speeds) < 0.25  # hand speed as in ``demo``: smooth, no steps
    yaw = [2 * math.degrees(math.asin(r.quat[1])) for _t, r in moving]
    assert 9.0 < max(yaw) <= 10.0 and -10.0 <= min(yaw) < -9.0
    triggers = [r.trigger for _t, r in moving]
    assert min(triggers) < 0.15 and max(triggers) > 0.85


def test_every_sample_passes_the_strict_parser():
    h = ScriptedHeadset("demo")
    for i in range(0, int((LEAD_S + CYCLE_S * 3) * 90), 7):
        t = i * DT
        assert isinstance(parse_line(json.dumps(h.sample(t, mono=1000.0 + t, frame=i))), Frame)


def _collect(port: int, seconds: float):
    msgs = []
    lock = threading.Lock()

    def on_message(m, _ns):
        with lock:
            msgs.append(m)

    c = QuestClient(ClientConfig(port=port), on_message).start()
    time.sleep(seconds)
    c.stop()
    return msgs


def test_frames_on_the_wire_match_the_script():
    server = SimQuestServer(SimConfig(port=0, seed=2, mono_offset_s=77.0), log=lambda _m: None)
    port = server.start()
    try:
        msgs = _collect(port, 2.5)
    finally:
        server.stop()
    hello = msgs[0]
    assert isinstance(hello, Hello)
    assert hello.info["app"] == "piper-sim-quest" and hello.info["script"] == "demo"
    frames = [m for m in msgs if isinstance(m, Frame)]
    assert 150 <= len(frames) <= 240  # ~90 Hz over 2.5 s, generous for a loaded box
    ref = ScriptedHeadset("demo", seed=2)
    for f in frames:
        t = f.mono - hello.info["mono"]
        expect = ref.sample(t)
        assert f.right.pos == pytest.approx(tuple(expect["right"]["pos"]), abs=1e-9)
        assert f.right.squeeze == pytest.approx(expect["right"]["squeeze"], abs=1e-9)
        assert f.right.primary == expect["right"]["primary"]
    assert [f.frame for f in frames] == list(range(len(frames)))
    assert any(f.right.primary for f in frames)  # the A press at t = 1.0 s


def test_replay_resends_with_original_relative_timing(tmp_path):
    # record a live stream the way the recorder does: one raw line per line
    live = SimQuestServer(SimConfig(port=0, script="circle"), log=lambda _m: None)
    live.start()
    try:
        recorded = _collect(live.port, 1.5)
    finally:
        live.stop()
    path = tmp_path / "episode_000000.quest.jsonl"
    path.write_text("".join(m.raw + "\n" for m in recorded) + "garbage line\n")
    rec_frames = [m for m in recorded if isinstance(m, Frame)]

    replay = SimQuestServer(SimConfig(port=0, replay=str(path)), log=lambda _m: None)
    replay.start()
    try:
        t0 = time.monotonic()
        msgs = _collect(replay.port, 3.0)
    finally:
        replay.stop()
    hello = msgs[0]
    assert hello.info["script"] == "replay" and hello.info["replay"]["frames"] == len(rec_frames)
    frames = [m for m in msgs if isinstance(m, Frame)]
    assert [f.right.pos for f in frames] == [f.right.pos for f in rec_frames]
    assert [f.frame for f in frames] == [f.frame for f in rec_frames]
    for a, b, ra, rb in zip(frames, frames[1:], rec_frames, rec_frames[1:]):
        assert b.mono - a.mono == pytest.approx(rb.mono - ra.mono, abs=1e-6)
        assert b.t - b.mono == pytest.approx(rb.t - rb.mono, abs=1e-6)
    assert abs(frames[0].mono - t0) < 1.0  # re-stamped to now


def test_cli_runs_for_duration(capsys):
    assert sim_server.main(["--port", "0", "--duration", "0.3", "--script", "idle", "--no-buttons"]) == 0
    out = capsys.readouterr().out
    assert "listening on 127.0.0.1:" in out and "stopped" in out
    assert sim_server.main(["--port", "0", "--replay", "/nonexistent.quest.jsonl"]) == 2


# ---- re-gripping after a release teleop made ----------------------------------------
def test_regrip_opens_below_release_and_closes_above_engage():
    """The teleop clutch re-engages only after the grip opened below 0.3 and closed above 0.7 again."""
    from piper_recorder.quest.scripts import REGRIP_S
    from piper_recorder.teleop.clutch import ClutchConfig

    cc = ClutchConfig()
    h = ScriptedHeadset("continuous")
    assert h.right(5.0).squeeze == 1.0
    assert h.regrip(5.0) and not h.regrip(5.3)  # one re-grip at a time
    squeeze = [h.right(5.0 + i * DT).squeeze for i in range(int(REGRIP_S / DT) + 10)]
    low = min(range(len(squeeze)), key=squeeze.__getitem__)
    assert squeeze[low] < cc.release_below and squeeze[-1] > cc.engage_above
    assert sum(s < cc.release_below for s in squeeze) * DT >= 0.3  # open long enough for teleop to see it
    assert h.right(5.0 + REGRIP_S).pos == ScriptedHeadset("continuous").right(5.0 + REGRIP_S).pos  # motion goes on
    assert ScriptedHeadset("continuous").right(5.3).squeeze == 1.0  # deterministic: only the noticed one acts


class Listener:
    """A headset client keeping each frame the sim sends with its arrival time."""

    def __init__(self, port: int):
        self._frames: list[tuple[float, Frame]] = []
        self._lock = threading.Lock()
        self.client = QuestClient(ClientConfig(port=port), self._on_message).start()

    def _on_message(self, m, _ns) -> None:
        if isinstance(m, Frame):
            with self._lock:
                self._frames.append((time.monotonic(), m))

    def since(self, t0: float) -> list[Frame]:
        """The frames that arrived after ``t0`` (monotonic)."""
        with self._lock:
            return [m for t, m in self._frames if t > t0]


def _hud(sender, **state):
    from piper_recorder.quest.hud import HudState, render_hud
    from piper_recorder.quest.video import HUD_PANEL

    assert sender.send(HUD_PANEL, render_hud(HudState(**state)))


def test_sim_headset_regrips_when_the_hud_shows_a_release():
    """Over the real channels: the headset squeezes (continuous script); a HUD frame whose release count
    grew makes it open the grip below the clutch's release threshold and squeeze again. The first HUD
    only sets the count; a HUD that still shows the clutch idle a while after the re-grip re-grips again.
    """
    from piper_recorder.quest.video import PanelSender, SenderConfig

    server = SimQuestServer(SimConfig(port=0, script="continuous", video_port=0), log=lambda _m: None)
    port = server.start()
    listener = Listener(port)
    sender = PanelSender(SenderConfig(port=server.video.port))
    try:
        time.sleep(LEAD_S + 0.8)
        _hud(sender, engaged=True, releases=3)  # the first HUD: the count so far, no re-grip
        time.sleep(0.5)
        assert server.report()["regrips"] == []
        t_release = time.monotonic()
        _hud(sender, engaged=False, releases=4, last_release="headset stream stale (1.013 s)")
        time.sleep(1.5)
        after = [m.right.squeeze for m in listener.since(t_release)]
        assert min(after) < 0.3 and after[-1] > 0.7, after[::10]
        assert len(server.report()["regrips"]) == 1
        time.sleep(0.5)
        _hud(sender, engaged=False, releases=4)  # still idle > REGRIP_RETRY_S after: again
        time.sleep(0.2)
        assert len(server.report()["regrips"]) == 2
        _hud(sender, engaged=True, releases=4)
        time.sleep(2.0)
        _hud(sender, engaged=False, releases=4)  # engaged since: an idle clutch is not ours to fix
        time.sleep(0.2)
        assert len(server.report()["regrips"]) == 2
    finally:
        sender.close()
        listener.client.stop()
        server.stop()


def test_sim_headset_regrips_when_its_first_hud_already_says_to():
    """A video channel that comes up after a release: the first HUD already shows the clutch idle with
    the release's error line; the operator reading it re-grips, and so does the sim. A first HUD that
    shows only a count (no error, or the clutch engaged) does not.
    """
    from piper_recorder.quest.video import PanelSender, SenderConfig

    for first, regrips in (
        (
            {
                "engaged": False,
                "releases": 1,
                "last_release": "headset stream stale (0.251 s)",
                "error": "RELEASED: headset stream stale (0.251 s) - re-grip",
            },
            1,
        ),
        ({"engaged": False, "releases": 1, "last_release": "x"}, 0),
        ({"engaged": True, "releases": 1, "error": "RELEASED: x - re-grip"}, 0),
    ):
        server = SimQuestServer(SimConfig(port=0, script="continuous", video_port=0), log=lambda _m: None)
        port = server.start()
        client = QuestClient(ClientConfig(port=port), lambda _m, _ns: None).start()
        sender = PanelSender(SenderConfig(port=server.video.port))
        try:
            time.sleep(LEAD_S + 0.3)
            _hud(sender, **first)
            time.sleep(0.3)
            assert len(server.report()["regrips"]) == regrips, first
        finally:
            sender.close()
            client.stop()
            server.stop()


def test_two_hands_regrip_only_the_hand_named():
    """Two arms: a release of one arm re-grips its own hand; the other hand keeps squeezing throughout."""
    from piper_recorder.quest.scripts import REGRIP_S

    h = ScriptedHeadset("continuous", hands=("left", "right"))
    assert h.regrip(5.0, ("right",)) and not h.regrip(5.2, ("right",))
    assert h.regrips_of("right") == (5.0,) and h.regrips_of("left") == ()
    ts = [5.0 + i * DT for i in range(int(REGRIP_S / DT))]
    assert min(h.right(t).squeeze for t in ts) < 0.3
    assert min(h.left(t).squeeze for t in ts) == 1.0
    assert h.regrip(5.2, ("left",))  # the other hand's own re-grip is not held back by the right's
    assert min(h.left(5.2 + i * DT).squeeze for i in range(int(REGRIP_S / DT))) < 0.3
    assert h.regrips == (5.0, 5.2)


def test_sim_headset_regrips_the_hand_of_the_arm_released():
    """Over the real channels, two arms: the HUD's ``arms`` part shows the right arm released (its count grew,
    the left arm stays engaged): only the right hand opens and squeezes again, and a retry follows while the
    right arm stays idle; then the left arm's release re-grips the left hand only.
    """
    from piper_recorder.quest.hud import ArmHud
    from piper_recorder.quest.video import PanelSender, SenderConfig

    def arms(left: tuple[bool, int], right: tuple[bool, int]) -> dict:
        return {
            "left": ArmHud("L", engaged=left[0], releases=left[1], last_release="x" if left[1] else ""),
            "right": ArmHud("R", engaged=right[0], releases=right[1], last_release="y" if right[1] else ""),
        }

    cfg = SimConfig(port=0, script="continuous", video_port=0, two_hands=True)
    server = SimQuestServer(cfg, log=lambda _m: None)
    port = server.start()
    listener = Listener(port)

    def squeezes(since: float) -> tuple[list[float], list[float]]:
        frames = listener.since(since)
        return [f.left.squeeze for f in frames], [f.right.squeeze for f in frames]

    sender = PanelSender(SenderConfig(port=server.video.port))
    try:
        time.sleep(LEAD_S + 0.8)
        _hud(sender, engaged=True, arms=arms((True, 0), (True, 0)))  # the first HUD: the counts so far
        time.sleep(0.3)
        assert server.report()["regrips"] == []
        t_release = time.monotonic()
        _hud(sender, engaged=True, releases=1, arms=arms((True, 0), (False, 1)))
        time.sleep(1.5)
        left, right = squeezes(t_release)
        assert min(right) < 0.3 and right[-1] > 0.7, right[::10]
        assert min(left) == 1.0, left[::10]
        assert [r.get("arm") for r in server.report()["regrips"]] == ["right"]
        time.sleep(0.5)
        _hud(sender, engaged=True, releases=1, arms=arms((True, 0), (False, 1)))  # still idle: again, right only
        time.sleep(0.2)
        assert [r.get("arm") for r in server.report()["regrips"]] == ["right", "right"]
        _hud(sender, engaged=True, releases=1, arms=arms((True, 0), (True, 1)))  # engaged again: retries end
        time.sleep(1.0)  # the retry's squeeze is back
        t_left = time.monotonic()
        _hud(sender, engaged=True, releases=2, arms=arms((False, 1), (True, 1)))
        time.sleep(1.5)
        left, right = squeezes(t_left)
        assert min(left) < 0.3 and left[-1] > 0.7, left[::10]
        assert min(right) > 0.7, right[::10]  # the right hand squeezes on
        assert [r.get("arm") for r in server.report()["regrips"]] == ["right", "right", "left"]
    finally:
        sender.close()
        listener.client.stop()
        server.stop()


def test_no_regrip_keeps_squeezing():
    from piper_recorder.quest.video import PanelSender, SenderConfig

    server = SimQuestServer(SimConfig(port=0, script="continuous", video_port=0, regrip=False), log=lambda _m: None)
    server.start()
    sender = PanelSender(SenderConfig(port=server.video.port))
    try:
        _hud(sender, releases=0)
        _hud(sender, releases=1, engaged=False)
        time.sleep(0.3)
        assert server.report()["regrips"] == []
    finally:
        sender.close()
        server.stop()

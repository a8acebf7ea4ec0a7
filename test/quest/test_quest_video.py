"""Headset video channel, HUD and haptic patterns: the ROS-free parts (framing, sender, sim receiver)."""

from __future__ import annotations

import io
import socket
import struct
import time

import numpy as np
import pytest
from PIL import Image

from piper_recorder.quest.hud import HudModel, HudState, encode_panel, hud_state_from_jpeg, render_hud, render_hud_image
from piper_recorder.quest.sim_video import SimVideoServer
from piper_recorder.quest.video import (
    HUD_PANEL,
    FrameReader,
    FramingError,
    PanelSender,
    SenderConfig,
    encode_frame,
    ui_command_from_json,
)
from piper_recorder.teleop.haptics import HapticConfig, HapticScheduler
from piper_recorder.teleop.limits import Limits, LimitsConfig

from support.waiting import wait_for


def test_frame_layout_is_the_apps():
    data = encode_frame(2, b"\xff\xd8abc")
    # written out by hand from the app's reader: u32 LE magic 'PCV1', u8 panel, 3 zero bytes, u32 LE length
    assert data[:4] == b"PCV1" and data[4] == 2 and data[5:8] == b"\0\0\0"
    assert struct.unpack("<I", data[8:12])[0] == 5 and data[12:] == b"\xff\xd8abc"
    with pytest.raises(FramingError):
        encode_frame(4, b"x")
    with pytest.raises(FramingError):
        encode_frame(0, b"")


def test_reader_reassembles_chunks_and_stops_on_bad_framing():
    stream = encode_frame(0, b"a" * 100) + encode_frame(HUD_PANEL, b"b" * 7)
    r = FrameReader()
    got = []
    for i in range(0, len(stream), 5):
        got += r.feed(stream[i : i + 5])
    assert [(f.panel, f.payload) for f in got] == [(0, b"a" * 100), (3, b"b" * 7)]
    bad = FrameReader()
    assert bad.feed(b"XCV1" + bytes(8)) == [] and "framing error" in bad.error
    panel4 = FrameReader()
    assert panel4.feed(struct.pack("<IB3xI", 0x31564350, 4, 3) + b"abc") == [] and panel4.error


def test_ui_commands_are_checked():
    assert ui_command_from_json('{"cmd":"color","r":0.6,"g":0.02,"b":0.02,"a":0.25}') == {
        "cmd": "color",
        "r": 0.6,
        "g": 0.02,
        "b": 0.02,
        "a": 0.25,
    }
    assert ui_command_from_json('{"cmd":"panel","cam":1,"x":0.1,"y":1.2,"z":-0.9,"width":0.55}')["yaw"] == 0.0
    for bad in (
        '{"cmd":"color","r":2,"g":0,"b":0,"a":0}',
        '{"cmd":"color","r":NaN,"g":0,"b":0,"a":0}',
        '{"cmd":"anchor_clear"}',
        '{"cmd":"panel","cam":7,"x":0,"y":0,"z":0,"width":1}',
        "[]",
        "x",
    ):
        assert ui_command_from_json(bad) is None, bad


def _rgb(w=640, h=480):
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (h, w, 3), dtype=np.uint8)


def test_panel_jpeg_width_and_quality():
    jpeg = encode_panel(_rgb(1280, 720), quality=70, max_width=640, label="cam_front")
    with Image.open(io.BytesIO(jpeg)) as im:
        assert im.format == "JPEG" and im.size == (640, 360)


def test_panel_is_the_frame_pillow_would_label_and_encode():
    """The banner painted in numpy is Pillow's: darkened rows, the name blended by its glyph coverage."""
    from piper_recorder.quest.hud import _DARKEN, _draw_text

    rgb = _rgb()
    img = Image.fromarray(rgb, "RGB")
    h = 480 // 16
    img.paste(img.crop((0, 0, 640, h)).point(_DARKEN), (0, 0))
    _draw_text(img, (8, 2), "cam_front", h - 6, (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=70)
    before = rgb.copy()
    assert encode_panel(rgb, 70, 640, "cam_front") == buf.getvalue()
    assert np.array_equal(rgb, before)  # the caller's frame is left as it was


def test_sender_to_sim_headset_decodes_and_reconnects():
    server = SimVideoServer("127.0.0.1", 0)
    port = server.start()
    sender = PanelSender(SenderConfig(port=port, reconnect_s=0.05, reconnect_max_s=0.1))
    try:
        jpeg = encode_panel(_rgb(), 70, 640, "cam")  # noise: ~165 kB a frame against a 256 kB send buffer
        for i in range(5):
            for panel in (0, 1):
                # paced like the node (one frame per tick): the sender drops rather than queue while the
                # headset still reads the previous frame, so each frame goes out once the link is free
                wait_for(lambda: sender.send(panel, jpeg), 5.0, logs=lambda: str(sender.stats))
                wait_for(lambda: server.report()["panels"].get(str(panel), {}).get("frames") == i + 1, 5.0)
        rep = server.report()
        assert rep["panels"]["0"]["size"] == [640, 480] and rep["panels"]["0"]["decode_errors"] == 0
        server.stop()  # the headset goes away ...
        server = SimVideoServer("127.0.0.1", port)
        server.start()  # ... and comes back on the same port
        wait_for(lambda: sender.send(0, jpeg) and server.report()["panels"].get("0", {}).get("frames", 0) > 0, 5.0)
        assert sender.stats.connects >= 2
    finally:
        sender.close()
        server.stop()


def test_sender_drops_instead_of_blocking_when_the_link_is_busy():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    sender = PanelSender(SenderConfig(port=ls.getsockname()[1], sndbuf_bytes=65536))
    conn = None
    try:
        payload = bytes(200_000)  # the receiver never reads: buffers fill, then every frame drops
        t0 = time.monotonic()
        results = [sender.send(0, payload) for _ in range(40)]
        elapsed = time.monotonic() - t0
        conn, _ = ls.accept()
        assert results.count(False) >= 30 and sender.stats.dropped[0] == results.count(False)
        assert elapsed < 3.0  # at most one bounded finish, never a queue
        # what did arrive is whole frames only
        conn.setblocking(False)
        data = b""
        while True:
            try:
                chunk = conn.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        reader = FrameReader()
        frames = reader.feed(data)
        assert not reader.error and all(len(f.payload) == len(payload) for f in frames)
    finally:
        sender.close()
        if conn is not None:
            conn.close()
        ls.close()


def test_hud_model_follows_events_and_refusals():
    m = HudModel("lerobot_recorder")
    m.on_teleop_status(100.0, {"engaged": True, "limits_active": ["workspace"], "last_alarm": None})
    m.on_headset("connected", 89.7)
    m.on_arm(100.0, "OK", "")
    st = m.state(100.0)
    assert (
        not st.recording
        and st.engaged
        and st.limits == ["workspace"]
        and st.alert_line() == ("LIMIT workspace", "limit")
    )
    m.on_episode_event(
        101.0, {"recorder": "lerobot_recorder", "event": "started", "episode_index": 4, "start_ns": 101_000_000_000}
    )
    st = m.state(113.5)
    assert st.recording and st.episode_index == 4 and st.headline() == "REC ep4  00:12.5"
    m.on_episode_event(114.0, {"recorder": "lerobot_recorder", "event": "saved", "episode_index": 4})
    m.on_recorder_status(114.2, {"recorder": "lerobot_recorder", "state": "recording"})  # sent before the save
    assert not m.state(114.2).recording
    m.on_episode_event(114.0, {"recorder": "rgbd_recorder", "event": "saved", "episode_index": 9})
    assert m.state(114.0).saved_count == 1 and not m.state(114.0).recording
    m.on_recorder_status(
        115.0,
        {
            "recorder": "lerobot_recorder",
            "state": "idle",
            "saved_this_session": [4],
            "ok": False,
            "answers": 7,
            "message": "no episode in progress",
        },
    )
    assert m.state(115.5).error == "lerobot_recorder: no episode in progress"
    assert m.state(115.0 + 60).error == ""  # errors fade; the limit shows again
    m.on_recorder_status(
        200.0,
        {
            "recorder": "lerobot_recorder",
            "state": "idle",
            "ok": False,
            "answers": 7,
            "message": "no episode in progress",
        },
    )
    assert m.state(200.0).error == ""  # the same answer again is not a new refusal
    alarm = {"recorder": "rgbd_recorder", "action": "start_episode", "outcome": "refused", "message": "no", "seq": 1}
    m.on_teleop_status(300.0, {"last_alarm": alarm})
    assert m.state(300.0).error == "rgbd_recorder/start_episode: refused no"
    m.on_teleop_status(310.0, {"last_alarm": dict(alarm)})
    assert m.state(310.0).error == ""  # still the same alarm (faded)
    m.on_teleop_status(320.0, {"last_alarm": {**alarm, "seq": 2}})
    assert m.state(320.0).error.startswith("rgbd_recorder/start_episode")  # the same press refused again


def test_hud_jpeg_is_640x140_and_carries_its_state():
    st = HudState(
        recording=True,
        episode_index=2,
        elapsed_s=65.2,
        saved_count=3,
        engaged=False,
        input_hz=90.0,
        arm="OK",
        error="lerobot_recorder: refused",
    )
    jpeg = render_hud(st)
    with Image.open(io.BytesIO(jpeg)) as im:
        assert im.size == (640, 140)
        bar = im.convert("RGB").getpixel((3, 70))
    assert bar[0] > 180 and bar[1] < 120  # the red recording bar
    state = hud_state_from_jpeg(jpeg)
    assert (
        state["recording"] and state["lines"][0] == "REC ep2  01:05.2" and state["error"] == "lerobot_recorder: refused"
    )
    idle = hud_state_from_jpeg(render_hud(HudState()))
    assert idle["lines"][0] == "READY  0 saved"


def test_haptic_patterns_defaults_and_dedupe():
    cfg = HapticConfig()
    assert cfg.pattern("start") == [(0.0, 0.8, 120)] and cfg.pattern("save") == [(0.0, 0.5, 200)]
    assert cfg.pattern("discard") == [(0.0, 1.0, 60), (0.2, 1.0, 60), (0.4, 1.0, 60)]
    assert cfg.pattern("refused") != cfg.pattern("start")
    h = HapticScheduler(cfg)
    assert h.confirm(10.0, "save") and not h.confirm(17.0, "save")  # two recorders saving, 7 s apart: felt once
    assert [(p.amp, p.ms) for p in h.due(17.0)] == [(0.5, 200)]
    h.new_press()
    assert h.confirm(18.0, "save")  # the next press's save is felt again
    assert h.confirm(19.0, "start") and h.confirm(20.0, "save")  # so is a save after a start
    assert len(h.due(21.0)) == 3
    assert h.play(30.0, "discard")
    assert len(h.due(30.25)) == 2 and len(h.due(31.0)) == 1
    with pytest.raises(ValueError):
        HapticConfig(start=[1.5, 100, 1]).validate()


def test_limits_report_which_one_shaped_the_target():
    lim = Limits(LimitsConfig())
    prev_q = np.array([0.0, 0.0, 0.0, 1.0])
    prev = np.array([0.3, 0.0, 0.2])
    lim.apply(prev + [0.0005, 0, 0], prev_q, prev, prev_q, prev, 0.01)
    assert lim.acted == ()
    lim.apply(np.array([0.3, 0.0, -0.2]), prev_q, prev, prev_q, np.array([0.3, 0.0, -0.1]), 0.01)
    assert "workspace" in lim.acted and "linear_speed" in lim.acted


def test_hud_shows_a_release_teleop_made_and_counts_it():
    """A forced release (teleop's forced_releases grows, the clutch idle) shows on the HUD
    with its reason and what to do, and the HUD state carries the count (the sim headset re-grips on it).
    """
    m = HudModel("lerobot_recorder")
    m.on_teleop_status(10.0, {"engaged": False, "forced_releases": 2, "last_release": "menu"})
    assert m.state(10.0).error == "" and m.state(10.0).releases == 2  # the first status: the count only
    m.on_teleop_status(11.0, {"engaged": True, "forced_releases": 2, "last_release": "menu"})
    m.on_teleop_status(12.0, {"engaged": False, "forced_releases": 3, "last_release": "headset stream stale (1.013 s)"})
    st = m.state(12.5)
    assert st.error == "RELEASED: headset stream stale (1.013 s) - re-grip" and st.releases == 3
    assert st.alert_line() == (st.error, "error") and not st.engaged
    state = hud_state_from_jpeg(render_hud(st))
    assert state["releases"] == 3 and state["last_release"].startswith("headset stream stale")
    m.on_teleop_status(30.0, {"engaged": False, "forced_releases": 4, "last_release": "menu"})
    assert m.state(30.0).error == "" and m.state(30.0).releases == 4  # the operator's own menu press


def test_hud_that_hears_teleop_late_still_shows_a_recent_release():
    """A quest_video that hears teleop only after a release (started late, discovery slow, restarted)
    shows it if it is recent (``last_release_age_s`` within the error hold), from when it happened; an
    old one, or one on a teleop that gives no age, only sets the count.
    """
    m = HudModel("lerobot_recorder", error_hold_s=8.0)
    m.on_teleop_status(
        100.0,
        {
            "engaged": False,
            "forced_releases": 1,
            "last_release_age_s": 0.5,
            "last_release": "headset stream stale (0.251 s)",
        },
    )
    assert m.state(100.0).error == "RELEASED: headset stream stale (0.251 s) - re-grip"
    assert m.state(107.4).error and m.state(107.6).error == ""  # held 8 s from the release, not from now
    for status in (
        {"engaged": False, "forced_releases": 1, "last_release_age_s": 9.0, "last_release": "x"},
        {"engaged": False, "forced_releases": 1, "last_release": "x"},
        {"engaged": True, "forced_releases": 1, "last_release_age_s": 0.5, "last_release": "x"},
        {"engaged": False, "forced_releases": 1, "last_release_age_s": 0.5, "last_release": "menu"},
    ):
        late = HudModel("lerobot_recorder", error_hold_s=8.0)
        late.on_teleop_status(100.0, status)
        assert late.state(100.0).error == "" and late.state(100.0).releases == 1, status


def test_hud_image_is_encoded_once_per_look_and_each_frame_carries_its_own_state(monkeypatch):
    """A HUD whose pixels did not change reuses its JPEG (drawn once); the state (timer, rates) still
    reaches the headset in each frame's comment, and the image decodes to what a direct render gives.
    """
    from piper_recorder.quest import hud

    monkeypatch.setattr(hud, "_HUD_JPEG", {})  # no look cached by an earlier test
    drawn: list[HudState] = []
    monkeypatch.setattr(hud, "render_hud_image", lambda st: drawn.append(st) or render_hud_image(st))
    a = HudState(saved_count=2, input_hz=72.0, arm="OK", elapsed_s=1.0)
    b = HudState(saved_count=2, input_hz=72.4, arm="OK", elapsed_s=1.0)  # same text ("72 Hz"): same pixels
    ja, jb = render_hud(a), render_hud(b)
    assert drawn == [a]  # b reused a's JPEG
    assert hud_state_from_jpeg(ja)["input_hz"] == 72.0 and hud_state_from_jpeg(jb)["input_hz"] == 72.4
    scan = ja.index(b"\xff\xda")
    assert ja[ja.index(b"\xff\xdb") : scan] == jb[jb.index(b"\xff\xdb") : jb.index(b"\xff\xda")]  # the same image
    with Image.open(io.BytesIO(jb)) as im:
        got = np.asarray(im.convert("RGB"), dtype=int)
    direct = io.BytesIO()
    render_hud_image(b).save(direct, format="JPEG", quality=80)
    with Image.open(io.BytesIO(direct.getvalue())) as im:
        assert np.array_equal(got, np.asarray(im.convert("RGB"), dtype=int))
    c = HudState(saved_count=3, input_hz=72.0, arm="OK")
    assert hud_state_from_jpeg(render_hud(c))["lines"][0] == "READY  3 saved" and drawn == [a, c]  # new text


def test_kept_text_masks_draw_what_imagedraw_draws():
    from PIL import ImageDraw

    from piper_recorder.quest.hud import _draw_text, _font

    for text, size in (("REC ep12  01:05.2", 44), ("cam_front", 24), ("LIMIT workspace", 24)):
        want = Image.new("RGB", (640, 80), (18, 18, 24))
        ImageDraw.Draw(want).text((18, 10), text, font=_font(size), fill=(255, 70, 70))
        got = Image.new("RGB", (640, 80), (18, 18, 24))
        _draw_text(got, (18, 10), text, size, (255, 70, 70))
        assert np.array_equal(np.asarray(got), np.asarray(want)), text


def test_with_comment_refuses_what_is_not_a_jpeg_or_too_long():
    from piper_recorder.quest.hud import with_comment

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (1, 2, 3)).save(buf, format="JPEG")
    jpeg = buf.getvalue()
    with pytest.raises(ValueError):
        with_comment(b"\x89PNG....", b"{}")
    with pytest.raises(ValueError):
        with_comment(jpeg, b"x" * 70_000)
    with Image.open(io.BytesIO(with_comment(jpeg, b'{"a":1}'))) as im:
        im.load()
        assert im.info["comment"] == b'{"a":1}'

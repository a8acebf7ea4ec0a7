"""Per-subscriber delivery health, without ROS: consumers count frames received per camera,
cameras report what they published, ``link_health`` judges each (consumer, camera), and the dashboard's
graph health and the HUD follow it. Publisher rates alone called all of these healthy.
"""

from __future__ import annotations

import timeit
from types import SimpleNamespace

import pytest

from piper_recorder.dashboard.model import DashboardConfig, DashboardModel
from piper_recorder.process.delivery import ImageCounts, link_health, panel_target
from piper_recorder.quest.hud import HudModel

FPS = 30.0


def header(ns: int) -> SimpleNamespace:
    return SimpleNamespace(stamp=SimpleNamespace(sec=ns // 10**9, nanosec=ns % 10**9))


def feed(counts: ImageCounts, seconds: float, drop_every: int = 0, t0: float = 100.0) -> dict:
    """A 30 fps camera (stamps on its grid) seen by one consumer, snapshots at 2 Hz; returns the last."""
    snap: dict = {}
    n = int(seconds * FPS)
    for k in range(n + 1):
        if not (drop_every and k % drop_every == 0):
            counts.on_image(0, header(int((t0 + k / FPS) * 1e9)))
        if k % 15 == 0:
            snap = counts.snapshot(t0 + k / FPS + 0.003)  # the status timer, a little after a frame
    return snap


def test_counts_and_exact_stamp_rate():
    c = ImageCounts(["cam_front"])
    st = feed(c, 12.0)["cam_front"]
    assert st["count"] == 361 and st["stamp_fps"] == pytest.approx(30.0, abs=1e-6)
    assert st["fps"] == pytest.approx(30.0, abs=0.5)  # the arrival clock: +-1 frame per window
    lossy = feed(ImageCounts(["cam_front"]), 12.0, drop_every=50)["cam_front"]  # 2 % lost
    assert lossy["stamp_fps"] == pytest.approx(29.4, abs=0.05)


def test_hot_path_is_a_counter_bump():
    c = ImageCounts(["a", "b"])
    h = header(1)
    per_call = min(timeit.repeat(lambda: c.on_image(1, h), number=20000, repeat=5)) / 20000
    assert c.count == [0, 100000] and c.last[1] is h
    print(f"ImageCounts.on_image: {per_call * 1e9:.0f} ns per frame")
    assert per_call < 5e-6


def _recorder(ratio_drop_every: int = 0) -> dict:
    c = ImageCounts(["cam_front"])
    return {
        "state": "idle",
        "images_received": feed(c, 12.0, ratio_drop_every),
        "images_required": {"min_delivery": 0.99},
    }


def _video(panel_fps: float) -> dict:
    target, floor = panel_target(15.0, FPS)
    return {
        "images_received": {"cam_front": {"count": 300, "fps": 30.0, "stamp_fps": 30.0}},
        "panels": {"cam_front": {"fps": panel_fps, "target_fps": target, "min_fps": floor}},
    }


def _policy(fps: float) -> dict:
    return {
        "images_received": {"cam_front": {"count": 300, "fps": fps, "stamp_fps": fps}},
        "images_required": {"min_fps": 30.0},
    }


def test_link_health_marks_what_publisher_rates_hid():
    published = {"cam_front": 30.0}
    fine = link_health(
        {"lerobot_recorder": _recorder(), "quest_video": _video(14.8), "policy": _policy(30.0)}, published
    )
    assert len(fine) == 4 and all(link.ok for link in fine), fine

    (panels,) = [link for link in link_health({"quest_video": _video(2.0)}, published) if link.kind == "panels"]
    assert not panels.ok and "2.0 fps" in panels.why and panels.ratio == pytest.approx(2.0 / 15.0)

    (rec,) = link_health({"lerobot_recorder": _recorder(ratio_drop_every=50)}, published)  # 98 %
    assert not rec.ok and rec.ratio == pytest.approx(0.98, abs=0.002) and "98.0%" in rec.why

    (pol,) = link_health({"policy": _policy(20.0)}, published)
    assert not pol.ok and "input rate 30" in pol.why

    silent = {"images_received": {"cam_front": {"count": 300, "fps": 0.0, "stamp_fps": None}}}
    (s,) = link_health({"rgbd_recorder": silent}, published)
    assert not s.ok and "nothing" in s.why
    # a camera that is paused publishes nothing either: no fault of the subscriber
    assert link_health({"rgbd_recorder": silent}, {"cam_front": 0.0})[0].ok


def test_panel_target_follows_a_slow_camera():
    assert panel_target(15.0, 30.0) == (15.0, pytest.approx(12.0))
    assert panel_target(15.0, 5.0) == (5.0, pytest.approx(4.0))  # it cannot send frames never delivered
    assert panel_target(15.0, None) == (15.0, pytest.approx(12.0))


def test_dashboard_graph_health_uses_delivery():
    cfg = DashboardConfig(
        nodes=["lerobot_recorder", "quest_video"], cameras=["cam_front"], recorders=["lerobot_recorder"]
    )
    m = DashboardModel(cfg)
    m.set_nodes({"lerobot_recorder", "quest_video", "cam_front"}, 10.0)
    m.on_camera_status("cam_front", {"camera": "cam_front", "published": 360, "fps": 30.0}, 10.0)
    m.on_recorder_status("lerobot_recorder", _recorder(), 10.0)
    m.on_consumer_status("quest_video", _video(14.9), 10.0)
    g = m.view(10.5)["graph"]
    assert g["healthy"] and {(d["consumer"], d["kind"]) for d in g["delivery"]} == {
        ("lerobot_recorder", "images"),
        ("quest_video", "images"),
        ("quest_video", "panels"),
    }
    m.on_consumer_status("quest_video", _video(2.0), 11.0)  # panels at 2 fps
    g = m.view(11.5)["graph"]
    assert not g["healthy"] and [d["consumer"] for d in g["delivery"] if not d["ok"]] == ["quest_video"]
    m.on_consumer_status("quest_video", _video(14.9), 12.0)
    m.on_recorder_status("lerobot_recorder", _recorder(ratio_drop_every=50), 12.0)  # 98 % of the frames
    g = m.view(12.5)["graph"]
    bad = [d for d in g["delivery"] if not d["ok"]]
    assert (
        not g["healthy"]
        and bad[0]["consumer"] == "lerobot_recorder"
        and bad[0]["delivery"] == pytest.approx(0.98, abs=0.002)
    )
    # no camera status (a realsense): the camera_info rate the dashboard measures is the reference
    m2 = DashboardModel(cfg)
    m2.watch_topic("/cam_front/color/camera_info")
    for k in range(61):
        m2.tick("/cam_front/color/camera_info", 8.0 + k / FPS)
    m2.on_recorder_status("lerobot_recorder", _recorder(), 10.0)
    (d,) = m2.view(10.0)["graph"]["delivery"]
    assert d["reference_fps"] == pytest.approx(30.0, abs=0.1) and d["ok"]
    # ... and with a second consumer, the best capture-stamp rate received (exact), not the noisy meter
    m2.on_recorder_status("lerobot_recorder", _recorder(ratio_drop_every=50), 10.0)  # 98 %
    m2.on_consumer_status("quest_video", _video(14.9), 10.0)  # all 30 fps
    bad = [d for d in m2.view(10.0)["graph"]["delivery"] if not d["ok"]]
    assert [d["consumer"] for d in bad] == ["lerobot_recorder"] and bad[0]["reference_fps"] == 30.0


def test_hud_shows_degraded_delivery():
    m = HudModel()
    links = link_health({"quest_video": _video(2.0), "lerobot_recorder": _recorder(50)}, {"cam_front": 30.0})
    m.on_delivery([link.why for link in links if not link.ok])
    st = m.state(0.0)
    assert st.alert_line()[0].startswith("DEGRADED ") and st.alert_line()[0].endswith("(+1)")
    assert len(st.degraded) == 2 and st.to_dict()["degraded"] == st.degraded
    m.on_teleop_status(0.0, {"limits_active": ["tether"]})
    assert m.state(0.0).alert_line() == ("LIMIT tether", "limit")  # what shapes the arm now comes first
    m.on_teleop_status(0.0, {"limits_active": []})
    m.on_delivery([])
    assert m.state(0.0).alert_line() == ("", "")

"""piper-dashboard without ROS: rates, the view model, the token rule, the HTTP server's routes, the
thumbnail cadence and the re-alignment reference frame (checked against an independent PyAV decode).
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from piper_recorder.dashboard.model import DashboardConfig, DashboardModel, is_loopback
from piper_recorder.dashboard.page import render_page
from piper_recorder.dashboard.rates import RateMeter
from piper_recorder.dashboard.server import Dashboard, DashboardServer

from support.lerobot_fixtures import small_root


class Clock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_rate_meter():
    m = RateMeter(window_s=1.0)
    assert m.rate(0.0) == 0.0 and m.age(0.0) is None
    for k in range(201):
        m.tick(10.0 + k / 200)
    assert m.rate(11.0) == pytest.approx(200.0, rel=1e-6)
    assert m.age(11.5) == pytest.approx(0.5)
    assert m.rate(12.5) == 0.0 and m.total == 201


def test_token_rule():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("robot.local")
    DashboardConfig().validate()
    with pytest.raises(ValueError, match="token"):
        DashboardConfig(host="0.0.0.0").validate()
    DashboardConfig(host="0.0.0.0", token="s3cret").validate()


def _status(state: str, elapsed: float | None, rows: int, repeated: int) -> dict:
    st = {
        "recorder": "lerobot_recorder",
        "state": state,
        "episode_index": 4,
        "task": "pick",
        "saved_this_session": [0, 1, 2],
        "writer_backlog": 0,
        "message": "started episode 4",
    }
    if elapsed is not None:
        st.update(
            elapsed_s=elapsed,
            rows=rows,
            counters={
                "timestamp_mode": "nominal",
                "rows": rows,
                "frames_received": {"cam_front": 60, "cam_wrist": 59},
                "frames_repeated": {"cam_front": 0, "cam_wrist": repeated},
                "frames_dropped": {"cam_front": 0},
                "messages_late": {},
                "frame_offset_max_ms": {"cam_front": 3.5, "cam_wrist": 7.25},
            },
        )
    return st


def test_view_model():
    cfg = DashboardConfig(cameras=["cam_front", "cam_wrist"])
    m = DashboardModel(cfg)
    m.watch_topic("/arm/joint_states")
    m.watch_topic("/arm/target_pose", required=False)
    m.watch_topic("/cam_front/color/camera_info")
    v = m.view(0.0)
    assert not v["graph"]["healthy"] and v["episode"]["recording"] is False
    assert [r["state"] for r in v["recorders"]] == ["unknown", "unknown"]
    assert [x["name"] for x in v["teleop"]["limits"]] == ["tether", "workspace", "linear_speed", "angular_speed"]

    for k in range(61):
        m.tick("/arm/joint_states", 9.0 + k / 60)
        m.tick("/cam_front/color/camera_info", 9.0 + k / 60)
    m.set_nodes({*cfg.nodes, "cam_front", "cam_wrist", "stranger"}, 10.0)
    m.on_recorder_status("lerobot_recorder", _status("recording", 2.0, 60, 3), 10.0)
    m.on_recorder_status("rgbd_recorder", _status("idle", None, 0, 0) | {"recorder": "rgbd_recorder"}, 10.0)
    m.on_teleop_status(
        {
            "engaged": True,
            "recording": True,
            "published": 500,
            "limits_active": ["workspace"],
            "limit_hits": {"workspace": 2, "tether": 1},
            "last_alarm": None,
        },
        10.0,
    )
    m.on_diagnostic(
        "quest_bridge: headset",
        0,
        "streaming 90.0 Hz",
        {
            "state": "connected",
            "frame_rate_hz": "89.95",
            "clock_offset_ns": "-1500000",
            "rejected_total": "3",
            "rejected.bad_json": "2",
            "rejected.too_long": "1",
            "last_rejection": "bad_json: Expecting value",
            "arrival_delay_ms": "0.210",
        },
        10.0,
    )
    m.on_diagnostic("something else", 2, "ignored", {}, 10.0)
    m.on_joints(
        ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"],
        [0.0, 3.13, -1.0, 0.0, float("nan"), 0.0, 0.035],
        10.0,
    )
    m.on_event({"recorder": "lerobot_recorder", "event": "started", "episode_index": 4}, 9.0)
    v = m.view(10.5)
    json.dumps(v, allow_nan=False)
    assert v["t"] == 10.5

    g = v["graph"]
    assert {n["name"]: n["present"] for n in g["nodes"]}["stranger"] and all(n["present"] for n in g["nodes"])
    topics = {t["topic"]: t for t in g["topics"]}
    assert topics["/arm/joint_states"]["rate_hz"] == pytest.approx(60.0, abs=0.1) and topics["/arm/joint_states"]["ok"]
    assert topics["/arm/target_pose"]["age_s"] is None and not topics["/arm/target_pose"]["required"]
    assert v["cameras"][0] == {"name": "cam_front", "rate_hz": 60.0, "age_s": 0.5}
    assert v["cameras"][1] == {"name": "cam_wrist", "rate_hz": None, "age_s": None}  # its topic not watched
    # every required topic fresh: healthy (the optional target topic never seen does not count)
    assert g["healthy"] and g["falling_behind"] == []
    # a recorder whose writer is behind real time says so (recording.worker): the graph is degraded at once
    m.on_recorder_status(
        "rgbd_recorder",
        _status("recording", 2.0, 60, 3)
        | {
            "recorder": "rgbd_recorder",
            "falling_behind": True,
            "writer_lag_s": 1.4,
            "frames_dropped_writer_behind": {"cam_front": 12},
        },
        10.4,
    )
    behind = m.view(10.5)
    assert not behind["graph"]["healthy"] and behind["graph"]["falling_behind"] == ["rgbd_recorder"]
    assert behind["recorders"][1]["writer_lag_s"] == 1.4
    assert behind["recorders"][1]["frames_dropped_writer_behind"] == {"cam_front": 12}
    m.on_recorder_status("rgbd_recorder", _status("idle", None, 0, 0) | {"recorder": "rgbd_recorder"}, 10.45)

    lr = v["recorders"][0]
    assert lr["state"] == "recording" and lr["elapsed_s"] == pytest.approx(2.5) and lr["rows"] == 60
    assert lr["saved_this_session"] == 3
    counters = {c["key"]: c for c in lr["counters"]}
    assert counters["frames_repeated"]["total"] == 3 and counters["frames_repeated"]["problem"]
    assert counters["frames_dropped"]["total"] == 0 and counters["messages_late"]["total"] == 0
    assert counters["frames_received"]["total"] == 119 and not counters["frames_received"]["problem"]
    assert counters["frame_offset_max_ms"]["total"] == 7.25
    assert v["episode"] == {
        "recording": True,
        "elapsed_s": pytest.approx(2.5),
        "episode_index": 4,
        "saved_this_session": 3,
    }

    limits = {x["name"]: x for x in v["teleop"]["limits"]}
    assert limits["workspace"] == {"name": "workspace", "active": True, "hits": 2}
    assert limits["tether"] == {"name": "tether", "active": False, "hits": 1}
    assert v["teleop"]["engaged"] and v["teleop"]["counters"] == {"published": 500}
    assert v["teleop"]["last_release"] is None
    m.on_teleop_status({"engaged": False, "forced_releases": 1, "last_release": "headset stream stale (1.013 s)"}, 10.4)
    t = m.view(10.5)["teleop"]  # a release teleop made: counted and why
    assert t["counters"]["forced_releases"] == 1 and t["last_release"] == "headset stream stale (1.013 s)"

    h = v["headset"]
    assert h["rate_hz"] == pytest.approx(89.95) and h["clock_offset_ms"] == -1.5 and h["rejected_total"] == 3
    assert h["rejected"] == {"bad_json": 2, "too_long": 1} and h["state"] == "connected"
    assert h["clock_drift_ms"] == 0.0
    diag = {"state": "connected", "clock_offset_ns": "-1250000", "connects": "", "clock_resets": ""}
    m.on_diagnostic("quest_bridge: headset", 0, "streaming", diag, 11.0)
    assert m.view(11.0)["headset"]["clock_drift_ms"] == 0.25  # drifted by 0.25 ms
    m.on_diagnostic("quest_bridge: headset", 0, "streaming", diag | {"connects": "2"}, 11.5)
    assert m.view(11.5)["headset"]["clock_drift_ms"] == 0.0  # a new connection: a new origin

    joints = {j["name"]: j for j in v["joints"]["joints"]}
    assert joints["joint2"]["near_limit"] and not joints["joint1"]["near_limit"] and "joint5" not in joints
    assert v["joints"]["gripper"]["position"] == 0.035
    assert v["events"][0]["event"] == "started" and v["events"][0]["age_s"] == 1.5

    # statuses going silent: stale, the teleop limits no longer shown as active, the graph degraded
    v = m.view(20.0)
    assert v["recorders"][0]["stale"] and not any(x["active"] for x in v["teleop"]["limits"])
    assert not v["graph"]["healthy"]


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def served(tmp_path):
    servers = []

    def make(**kw) -> tuple[Dashboard, DashboardServer, Clock]:
        clock = Clock()
        dash = Dashboard.create(DashboardConfig(port=0, **kw), clock)
        srv = DashboardServer(dash).start()
        servers.append(srv)
        return dash, srv, clock

    yield make
    for s in servers:
        s.close()


def test_server_token_and_read_only(served):
    _dash, srv, _ = served(token="s3cret")
    base = srv.url
    assert _get(base)[0] == 401 and _get(base + "api/state")[0] == 401
    assert _get(base + "api/state?token=wrong")[0] == 401
    assert _get(base + "api/thumb?camera=cam_front")[0] == 401
    code, headers, body = _get(base + "?token=s3cret")
    assert code == 200 and b"piper dashboard" in body and "default-src 'none'" in headers["Content-Security-Policy"]
    code, _, body = _get(base + "api/state", {"Authorization": "Bearer s3cret"})
    assert code == 200 and "recorders" in json.loads(body)
    req = urllib.request.Request(base + "api/state?token=s3cret", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
    _dash, srv2, _ = served()
    assert _get(srv2.url + "api/state")[0] == 200  # loopback without a token: open


def test_thumbnails_only_on_request_and_at_most_thumb_hz(served):
    dash, srv, clock = served(thumb_hz=2.0, thumb_width=160, watch_timeout_s=5.0)
    assert not dash.frames.watched(clock())
    assert _get(srv.url + "api/thumb?camera=cam_front")[0] == 204  # nothing received yet
    assert dash.frames.watched(clock())
    rgb = np.zeros((480, 640, 3), np.uint8)
    rgb[:, :320] = (200, 30, 30)
    for k in range(30):
        dash.frames.put("cam_front", rgb, 1000 + k)  # a 30 fps camera costs no encoding
    assert dash.frames.encoded == 0
    code, headers, body = _get(srv.url + "api/thumb?camera=cam_front")
    img = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(int)
    assert code == 200 and img.shape == (120, 160, 3) and headers["X-Frame-Stamp"] == "1029"
    assert np.abs(img[60, 20] - (200, 30, 30)).max() < 12 and img[60, 140].max() < 12
    dash.frames.put("cam_front", rgb, 2000)
    clock.t += 0.2
    assert _get(srv.url + "api/thumb?camera=cam_front")[1]["X-Frame-Stamp"] == "1029"  # within 1/thumb_hz
    clock.t += 0.4
    assert _get(srv.url + "api/thumb?camera=cam_front")[1]["X-Frame-Stamp"] == "2000"
    clock.t += 1.0
    assert _get(srv.url + "api/thumb?camera=cam_front")[1]["X-Frame-Stamp"] == "2000"  # no new frame: cached
    assert dash.frames.encoded == 2
    clock.t += 6.0
    assert not dash.frames.watched(clock())


def test_reference_frame_is_frame_zero(served, tmp_path):
    import av

    root = small_root(tmp_path / "ds", lengths=(8, 6))
    _dash, srv, _ = served(roots=[str(root), str(tmp_path / "not_yet")], thumb_width=32)
    roots = json.loads(_get(srv.url + "api/roots")[2])["roots"]
    assert [len(r["episodes"]) for r in roots] == [2, 0] and roots[0]["cameras"] == ["cam_front", "cam_wrist"]
    code, _, body = _get(srv.url + "api/reference?root=0&episode=1&camera=cam_wrist")
    assert code == 200
    got = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(int)
    path = next(root.glob("videos/chunk-000/observation.images.cam_wrist/episode_000001.mp4"))
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    step = -(-frames[0].shape[1] // 32)
    want = [f[::step, ::step].astype(int) for f in frames]
    assert got.shape == want[0].shape
    errs = [float(np.abs(got - w).mean()) for w in want]
    assert errs[0] < 6 and errs[0] == min(errs), errs
    for bad in ("root=0&episode=9&camera=cam_wrist", "root=0&episode=0&camera=cam_nope", "root=5&episode=0&camera=x"):
        assert _get(srv.url + "api/reference?" + bad)[0] == 404


def test_page_is_self_contained():
    """No CDN, nothing from the network: the script and the stylesheet are this server's own paths, and
    the document carries no inline script, style or event handler (the CSP allows none).
    """
    import re

    from piper_recorder.dashboard.page import static_file

    html = render_page()
    srcs = re.findall(r'<script\b[^>]*\bsrc="([^"]*)"', html) + re.findall(r'<link\b[^>]*\bhref="([^"]*)"', html)
    assert sorted(srcs) == sorted(["/dashboard.js", "/dashboard.css", "data:,"])
    for text in (html, static_file("/dashboard.js")[0].decode(), static_file("/dashboard.css")[0].decode()):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert len(re.findall(r"<script\b", html)) == 1 and "<style" not in html
    assert not re.search(r"\sstyle=", html) and not re.search(r"\son[a-z]+=", html)

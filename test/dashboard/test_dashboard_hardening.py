"""piper-dashboard on a hostile network and a graph that misbehaves (issue #21, items 3, 4, 5, 7).

Real parts throughout: the dashboard's own HTTP server on loopback, raw sockets for the slow and
vanishing clients, headless Chromium (test/support/browser.py) for the page. No ROS: statuses are fed to the
model as the node would, as parsed JSON.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

import pytest

from piper_recorder.dashboard.model import DashboardConfig, DashboardModel
from piper_recorder.dashboard.server import Dashboard, DashboardServer

from support.browser import open_page

pytestmark = pytest.mark.slow  # HTTP deadlines and slow clients against wall-clock time

HOSTILE = '"><img src=x onerror="window.__pwned=(window.__pwned||0)+1"><script>window.__pwned=1</script>'


@pytest.fixture
def served():
    servers: list[DashboardServer] = []

    def make(**kw) -> tuple[Dashboard, DashboardServer]:
        dash = Dashboard.create(DashboardConfig(port=0, **kw))
        srv = DashboardServer(dash).start()
        servers.append(srv)
        return dash, srv

    yield make
    for s in servers:
        s.close()


def _request(srv: DashboardServer, path: str, host: str | None) -> tuple[int, bytes]:
    """GET ``path`` with exactly this Host header (None: none at all)."""
    port = srv.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.putrequest("GET", path, skip_host=True)
        if host is not None:
            c.putheader("Host", host)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


# ---- item 3: no script from a hostile status -----------------------------------------------------
def _hostile_statuses(dash: Dashboard) -> None:
    m, now = dash.model, dash.clock()
    m.on_recorder_status(
        "lerobot_recorder",
        {
            "state": "recording" + HOSTILE,
            "rows": HOSTILE,
            "episode_index": HOSTILE,
            "task": HOSTILE,
            "elapsed_s": HOSTILE,
            "message": HOSTILE,
            "writer_backlog": HOSTILE,
            "waiting_for": [HOSTILE],
            "saved_this_session": HOSTILE,
            "counters": {"frames_dropped": {HOSTILE: 3}, "frames_received": {"cam_front": HOSTILE}, HOSTILE: HOSTILE},
        },
        now,
    )
    # rgbd_recorder has not published: its placeholder must draw too
    m.on_teleop_status(
        {
            "engaged": HOSTILE,
            "limits_active": [HOSTILE],
            "limit_hits": {HOSTILE: 2},
            "published": HOSTILE,
            "last_alarm": {"recorder": HOSTILE, "action": HOSTILE, "outcome": HOSTILE, "message": HOSTILE},
        },
        now,
    )
    m.on_diagnostic(
        "quest_bridge: headset",
        0,
        HOSTILE,
        {"state": HOSTILE, "connects": HOSTILE, "last_rejection": HOSTILE, "rejected." + HOSTILE: "2"},
        now,
    )
    m.on_event(
        {"recorder": HOSTILE, "event": HOSTILE, "episode_index": HOSTILE, "rows": HOSTILE, "reason": HOSTILE}, now
    )
    m.set_nodes({HOSTILE}, now)
    m.on_joints([HOSTILE, "gripper"], [0.5, 0.02], now)
    m.set_cameras([HOSTILE])


@pytest.mark.integration
def test_hostile_status_runs_no_script_in_the_page(served):
    dash, srv = served()
    _hostile_statuses(dash)
    requests: list[str] = []
    with open_page(srv.url) as (page, errors):
        page.on("request", lambda r: requests.append(r.url))
        page.wait_for_function("() => window.__dashboard && window.__dashboard.polls >= 3", timeout=15000)
        time.sleep(0.5)
        got = page.evaluate("""() => ({
          pwned: window.__pwned ?? null,
          imgs: [...document.querySelectorAll('img')].map(i => i.getAttribute('src')).filter(s => s === 'x'),
          scripts: document.querySelectorAll('script').length,
          message: document.querySelector('#rec-lerobot_recorder .msg').textContent,
          state: document.querySelector('#rec-lerobot_recorder').dataset.state,
          rows: document.querySelector('#rec-lerobot_recorder .rows').textContent,
          placeholder: document.querySelector('#rec-rgbd_recorder') && document.querySelector('#rec-rgbd_recorder').dataset.state,
          events: document.querySelector('#events').textContent,
          renderErrors: window.__dashboard.renderErrors})""")
        errors_from_statuses = list(errors)
        # the CSP on its own: an inline handler that got into the DOM anyway does not run
        page.evaluate("""() => { const d = document.createElement('div');
          d.innerHTML = '<img src="data:," onerror="window.__csp = 1" onload="window.__csp = 1">';
          document.body.append(d); }""")
        time.sleep(0.5)
        csp = page.evaluate("() => window.__csp ?? null")
        blocked = [e for e in errors if "Content Security Policy" in e]
    assert got["pwned"] is None and got["imgs"] == [] and got["scripts"] == 1
    assert got["message"] == HOSTILE  # shown as text, byte for byte
    assert got["state"] == "recording" + HOSTILE
    assert got["rows"] == "–"  # not a count: not shown as one
    assert got["placeholder"] == "unknown" and HOSTILE in got["events"]
    assert got["renderErrors"] == 0
    assert csp is None and blocked  # the browser reported refusing the handler
    assert not [u for u in requests if urlsplit(u).path == "/x"], requests
    assert errors_from_statuses == [], errors_from_statuses


def test_csp_has_no_unsafe_inline(served):
    _dash, srv = served()
    port = srv.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    csp = r.getheader("Content-Security-Policy")
    c.close()
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "script-src 'self'" in csp
    assert _request(srv, "/dashboard.js", f"127.0.0.1:{port}")[0] == 200


# ---- item 4: DNS rebinding -----------------------------------------------------------------------
def test_foreign_host_header_gets_421(served):
    dash, srv = served(allowed_hosts=["robot.local"])
    dash.frames.put("cam_front", __import__("numpy").zeros((48, 64, 3), "uint8"), 1)
    port = srv.server_address[1]
    paths = [
        "/",
        "/api/state",
        "/api/roots",
        "/api/thumb?camera=cam_front",
        "/dashboard.js",
        "/api/reference?root=0&episode=0&camera=cam_front",
    ]
    for path in paths:
        for host in (
            "evil.example",
            f"evil.example:{port}",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "[::2]",
            "0.0.0.0",
            "",
        ):
            code, _ = _request(srv, path, host)
            assert code == 421, (path, host, code)
        assert _request(srv, path, None)[0] == 421, path  # no Host at all
    for host in (
        f"127.0.0.1:{port}",
        "127.0.0.1",
        f"localhost:{port}",
        "LOCALHOST",
        f"[::1]:{port}",
        "robot.local",
        f"Robot.Local:{port}",
    ):
        code, _ = _request(srv, "/api/state", host)
        assert code == 200, (host, code)


def test_host_rule_for_a_bound_address():
    from piper_recorder.dashboard.server import host_allowed

    # bound to every interface: the address the client connected to is its own name, nothing else
    assert host_allowed("192.168.1.5:8740", "0.0.0.0", "192.168.1.5", [])
    assert not host_allowed("192.168.1.6:8740", "0.0.0.0", "192.168.1.5", [])
    assert not host_allowed("0.0.0.0:8740", "0.0.0.0", "0.0.0.0", [])
    assert host_allowed("10.0.0.2", "10.0.0.2", "10.0.0.2", [])
    assert not host_allowed("robot.local", "0.0.0.0", "192.168.1.5", [])
    assert host_allowed("robot.local.", "0.0.0.0", "192.168.1.5", ["robot.local"])
    assert not host_allowed("[::1", "127.0.0.1", "127.0.0.1", []) and not host_allowed("::1", "::1", "::1", [])


# ---- item 5: one bad status hides nothing ---------------------------------------------------------
GOOD_RECORDER = {
    "state": "recording",
    "episode_index": 2,
    "task": "pick",
    "elapsed_s": 1.5,
    "rows": 45,
    "saved_this_session": [0, 1],
    "writer_backlog": 0,
    "message": "ok",
    "waiting_for": [],
    "counters": {
        "rows": 45,
        "frames_dropped": {"cam_front": 1},
        "frame_offset_max_ms": {"cam_front": 2.0},
        "timestamp_mode": "nominal",
    },
    "tick_delay_ms": {"ticks": 3, "p50": 0.1},
}
GOOD_TELEOP = {
    "engaged": True,
    "recording": False,
    "limits_active": ["tether"],
    "limit_hits": {"tether": 2},
    "published": 10,
    "last_alarm": {"recorder": "r", "action": "a", "outcome": "o", "message": "m"},
    "calls_in_flight": 0,
}
BAD_VALUES = [
    "lots",
    [1, 2],
    {"a": "b"},
    float("nan"),
    float("inf"),
    -3,
    1.5,
    True,
    None,
    {"tether": "lots"},
    [["x"]],
    {"x": {"y": {"z": 1}}},
    "1e999",
    10**400,
]


def _check_view(m: DashboardModel, now: float) -> dict:
    v = m.view(now)
    json.dumps(v, allow_nan=False)  # what /api/state sends
    return v


def test_every_malformed_field_is_dropped_where_it_enters():
    cfg = DashboardConfig()
    for key in [*GOOD_RECORDER, "unexpected"]:
        for bad in BAD_VALUES:
            m = DashboardModel(cfg)
            m.on_recorder_status("rgbd_recorder", GOOD_RECORDER, 10.0)
            m.on_recorder_status("lerobot_recorder", {**GOOD_RECORDER, key: bad}, 10.0)
            m.on_teleop_status({**GOOD_TELEOP, key: bad}, 10.0)
            v = _check_view(m, 10.0)
            lr, rg = v["recorders"]
            assert rg["rows"] == 45 and rg["state"] == "recording" and rg["invalid_fields"] == []  # the other one
            for field in ("rows", "episode_index", "writer_backlog"):
                assert lr[field] is None or (isinstance(lr[field], int) and not isinstance(lr[field], bool))
            assert isinstance(lr["state"], str) and isinstance(lr["message"], str)
            assert isinstance(lr["waiting_for"], list) and all(isinstance(x, str) for x in lr["waiting_for"])
            assert lr["elapsed_s"] is None or math.isfinite(lr["elapsed_s"])
            for c in lr["counters"]:
                assert isinstance(c["total"], (int, float)) and math.isfinite(c["total"])
    for key in GOOD_TELEOP:
        for bad in BAD_VALUES:
            m = DashboardModel(cfg)
            m.on_teleop_status({**GOOD_TELEOP, key: bad}, 10.0)
            t = _check_view(m, 10.0)["teleop"]
            assert all(isinstance(x["hits"], int) for x in t["limits"]) and isinstance(t["engaged"], bool)
            assert all(isinstance(n, int) for n in t["counters"].values())


def test_reported_cases():
    m = DashboardModel(DashboardConfig())
    v = _check_view(m, 1.0)
    assert all(r["waiting_for"] == [] and "task" in r for r in v["recorders"])  # placeholder: every field
    m.on_teleop_status({"limit_hits": {"tether": "lots"}}, 1.0)
    t = _check_view(m, 1.0)["teleop"]
    assert {x["name"]: x["hits"] for x in t["limits"]}["tether"] == 0 and "limit_hits" in t["invalid_fields"]
    m.on_teleop_status({"limit_hits": ["tether"]}, 1.0)
    _check_view(m, 1.0)
    m.on_recorder_status("lerobot_recorder", {"rows": float("nan"), "state": "idle"}, 1.0)
    assert _check_view(m, 1.0)["recorders"][0]["invalid_fields"] == ["rows"]
    m.on_event(["not", "an", "object"], 1.0)  # type: ignore[arg-type]
    m.on_recorder_status("rgbd_recorder", "nope", 1.0)  # type: ignore[arg-type]
    _check_view(m, 1.0)


def test_api_state_survives_malformed_statuses(served):
    dash, srv = served()
    port = srv.server_address[1]
    dash.model.on_recorder_status("lerobot_recorder", {**GOOD_RECORDER, "rows": float("nan")}, dash.clock())
    dash.model.on_teleop_status({"limit_hits": {"tether": "lots"}, "limits_active": "tether"}, dash.clock())
    code, body = _request(srv, "/api/state", f"127.0.0.1:{port}")
    assert code == 200
    state = json.loads(body)
    assert state["recorders"][0]["state"] == "recording" and state["recorders"][1]["state"] == "unknown"


# ---- item 7: slow and vanishing clients ----------------------------------------------------------
def test_half_sent_requests_are_bounded_and_time_out(served):
    _dash, srv = served()
    cfg = srv.dashboard.cfg
    port = srv.server_address[1]
    before = threading.active_count()
    socks = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            socks.append(s)
        time.sleep(0.5)
        peak = threading.active_count() - before
        assert peak <= cfg.max_connections + 2, peak
        t0 = time.monotonic()
        for s in socks:  # every one is closed by the server: 503 at once, or after its timeout
            s.settimeout(cfg.request_timeout_s + 10)
            while s.recv(4096):
                pass
        waited = time.monotonic() - t0
        assert waited < cfg.request_timeout_s + 5, waited
    finally:
        for s in socks:
            s.close()
    assert _request(srv, "/api/state", f"127.0.0.1:{port}")[0] == 200
    deadline = time.monotonic() + 5
    while threading.active_count() > before + 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert threading.active_count() <= before + 1


def test_clients_that_vanish_print_no_traceback(served, capfd):
    _dash, srv = served()
    port = srv.server_address[1]
    for k in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (b"X-A: b\r\n" if k % 2 else b""))
        time.sleep(0.02)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not a close
        s.close()
    time.sleep(0.5)
    assert _request(srv, "/api/state", f"127.0.0.1:{port}")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err


def test_a_trickling_client_is_dropped_at_the_request_deadline(served):
    """One byte every 0.3 s never trips a per-recv timeout: the request as a whole must arrive in time."""
    _dash, srv = served(request_timeout_s=1.5)
    port = srv.server_address[1]
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    request = b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200
    t0, closed_at = time.monotonic(), None
    try:
        for byte in request:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic()
                break
            time.sleep(0.3)
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed_at = time.monotonic()
                    break
            except BlockingIOError:
                pass
            except OSError:
                closed_at = time.monotonic()
                break
            finally:
                s.setblocking(True)
            if time.monotonic() - t0 > 10:
                break
    finally:
        s.close()
    assert closed_at is not None and closed_at - t0 < 1.5 + 1.0, closed_at and closed_at - t0
    assert _request(srv, "/api/state", f"127.0.0.1:{port}")[0] == 200

"""piper-dashboard in headless Chromium against the running sim graph (real processes, the dashboard
started by the launcher's ``dashboard`` switch): every node present, thumbnails refresh, the episode
timer, rows and counters run while an episode records (started and stopped through the recorders'
services), a teleop safety limit lights its indicator when the scripted headset drives into it (the
``demo`` script's +-10 deg yaw swing peaks at 0.31 rad/s, the angular speed cap is set to 0.2 rad/s; the
script releases the grip for 3 s of every 10 s cycle, when no limit acts), the
re-alignment view blends the live camera with frame 0 of the episode just saved (pixels checked in the
page against its two source images), no console errors; bound to 0.0.0.0 it refuses requests without
the token (401).
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request

import pytest

from piper_recorder.graph.ports import free_port

from support.browser import open_page
from support.paths import ROOT

SIM = ROOT / "config" / "sim.yaml"
W, H = 320, 240
pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

# In the page: the blended canvas against (1 - a) * live + a * reference, computed from the very two
# images the page drew (window.__dashboard.align), and how many pixels the two sources differ in.
BLEND_CHECK = """() => {
  const {live, ref} = window.__dashboard.align, cv = document.getElementById('align-canvas');
  const a = parseFloat(document.getElementById('align-alpha').value), w = cv.width, h = cv.height;
  const px = img => { const c = document.createElement('canvas'); c.width = w; c.height = h;
    const g = c.getContext('2d'); g.drawImage(img, 0, 0, w, h); return g.getImageData(0, 0, w, h).data; };
  const L = px(live), R = px(ref), B = cv.getContext('2d').getImageData(0, 0, w, h).data;
  const mode = document.getElementById('align-mode').value;
  let err = 0, maxErr = 0, differ = 0, between = 0;
  for (let i = 0; i < B.length; i += 4) for (let k = 0; k < 3; k++) {
    const l = L[i + k], r = R[i + k], want = mode === 'difference' ? Math.abs(l - r) : (1 - a) * l + a * r;
    const e = Math.abs(B[i + k] - want); err += e; maxErr = Math.max(maxErr, e);
    if (Math.abs(l - r) > 60) { differ++; if (Math.abs(B[i + k] - l) > 15 && Math.abs(B[i + k] - r) > 15) between++; }
  }
  return {w, h, meanErr: err / (w * h * 3), maxErr, differ, between, alpha: a};
}"""


def _wait(page, expr: str, timeout: float, state_url: str = "") -> None:
    """Poll ``expr`` in the page; as a function, since the page's CSP forbids eval of a string. On a
    timeout the message carries the dashboard's state (``state_url``).
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(f"() => ({expr})", timeout=timeout)
    except PlaywrightTimeout:
        state = urllib.request.urlopen(state_url, timeout=5).read().decode() if state_url else ""
        raise AssertionError(f"not true within {timeout / 1000:.0f} s: {expr}\n{state}") from None


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_dashboard_live_in_browser(tmp_path):
    from piper_recorder.graph.sim_session import SimSession, size_overrides

    port, token = free_port(), secrets.token_urlsafe(12)
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.dashboard=true",
        "dashboard.host=0.0.0.0",
        f"dashboard.port={port}",
        f"dashboard.token={token}",
        "piper_launch.sim_quest.script=demo",
        "teleop.limits.max_angular_speed=0.2",
        # the test machine is shared: a niced recorder may pause for seconds, and so may the arm emulator
        # (its CAN-silence fault would keep the clutch from engaging, and the limit from being reached)
        "dashboard.silent_s=5.0",
        "piper_arm.can_silence_s=5.0",
        "teleop.arm_stale_timeout_s=3.0",
    ]
    with SimSession(tmp_path / "out", sets=sets) as s:
        assert "dashboard" in s.plan.node_names
        base = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 20  # the node is in the graph a moment before its server listens
        while True:
            try:
                urllib.request.urlopen(base, timeout=5)
            except urllib.error.HTTPError:
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline, "dashboard not serving"
                time.sleep(0.2)
        # bound to a non-loopback address: nothing without the token
        for path in ("", "api/state", "api/thumb?camera=cam_front", "api/roots", f"api/state?token={token}x"):
            assert _get(base + path) == 401, path
        assert _get(base + f"api/state?token={token}") == 200
        # read-only in the graph too: no publisher but rclpy's own, no service client, no service of its own
        probe = s._node  # the session's rclpy node
        pubs = {t for t, _ in probe.get_publisher_names_and_types_by_node("dashboard", "/")}
        # (and its own ~/status: what it received, like every image consumer; never a command topic)
        assert pubs <= {"/rosout", "/parameter_events", "/dashboard/status"}, pubs
        assert probe.get_client_names_and_types_by_node("dashboard", "/") == []
        services = {t for t, _ in probe.get_service_names_and_types_by_node("dashboard", "/")}
        rclpy_own = {
            "describe_parameters",
            "get_parameter_types",
            "get_parameters",
            "get_type_description",
            "list_parameters",
            "set_parameters",
            "set_parameters_atomically",
        }
        assert services and services <= {f"/dashboard/{n}" for n in rclpy_own}, services

        with open_page(base + f"?token={token}") as (page, errors):
            # graph health: every node of the plan present
            _wait(
                page,
                "document.getElementById('health').textContent === 'graph healthy'",
                60000,
                base + f"api/state?token={token}",
            )
            present = page.eval_on_selector_all(
                "#nodes .chip", "cs => cs.map(c => [c.dataset.node, c.dataset.present])"
            )
            assert {n for n, p in present if p == "true"} >= set(s.plan.node_names) - {"dashboard"}

            # thumbnails refresh: newer capture stamps, and different pixels once the arm moves in the scene
            # (the demo script holds still for 3.5 s of each 10 s cycle)
            thumbs = "Array.from(document.querySelectorAll('img.thumb'))"
            _wait(page, f"{thumbs}.length === 2 && {thumbs}.every(i => i.dataset.stamp && i.naturalWidth)", 20000)
            page.evaluate(f"""() => {{ window.__pix = i => {{ const c = document.createElement('canvas');
                c.width = i.naturalWidth; c.height = i.naturalHeight;
                const g = c.getContext('2d'); g.drawImage(i, 0, 0);
                return g.getImageData(0, 0, c.width, c.height).data; }};
              window.__first = {thumbs}.map(i => [BigInt(i.dataset.stamp), window.__pix(i)]); }}""")
            _wait(page, f"{thumbs}.every((i, k) => BigInt(i.dataset.stamp) > window.__first[k][0] + 500000000n)", 10000)
            _wait(
                page,
                f"{thumbs}.every((i, k) => {{ const a = window.__pix(i), b = window.__first[k][1];"
                " let n = 0; for (let j = 0; j < a.length; j++) if (Math.abs(a[j] - b[j]) > 40) n++;"
                " return n > 20; })",
                15000,
            )
            assert page.evaluate("window.__dashboard.thumbs") >= 4

            # an episode: the timer runs, rows and counters grow
            assert page.inner_text("#timer") == "--:--.-"
            s.start_episode()
            _wait(
                page,
                "document.getElementById('rec-dot').className === 'on' && "
                "document.querySelector('#rec-lerobot_recorder').dataset.rows > 0",
                timeout=15000,
            )
            read = """() => { const timer = document.getElementById('timer'),
                rec = document.querySelector('#rec-lerobot_recorder');
              return {t: parseFloat(timer.dataset.elapsed), at: Number(timer.dataset.at),
                      text: timer.textContent, rows: Number(rec.dataset.rows),
                      recv: Number(rec.querySelector('[data-counter=frames_received]').dataset.total)}; }"""
            a = page.evaluate(read)

            # the angular speed cap: lit while the yaw swings fast, dark while the grip is released, hits counted;
            # the page records what it rendered after every poll (a round trip from here may take seconds)
            page.evaluate("""() => { const seen = window.__limit = [];
              setInterval(() => { const e = document.getElementById('limit-angular_speed');
                if (e) seen.push([e.dataset.active, Number(e.dataset.hits), e.classList.contains('active')]); }, 100); }""")
            _wait(
                page,
                "(s => s.some(x => x[0] === 'true') && s.some(x => x[0] === 'false')"
                " && s[s.length - 1][1] > s[0][1])(window.__limit)",
                40000,
                base + f"api/state?token={token}",
            )
            seen = page.evaluate("window.__limit")
            assert all((active == "true") == lit for active, _, lit in seen)
            hits = [h for _, h, _ in seen]
            assert hits == sorted(hits) and hits[-1] > hits[0] >= 0
            assert page.eval_on_selector("#limit-workspace", "e => e.dataset.hits") == "0"

            _wait(page, f"Number(document.getElementById('timer').dataset.at) > {a['at'] + 4}", 15000)
            b = page.evaluate(read)
            # the timer runs with the dashboard's clock between the two views the page showed
            assert b["t"] - a["t"] == pytest.approx(b["at"] - a["at"], abs=1.0), (a, b)
            assert b["at"] - a["at"] > 3.0
            assert b["rows"] > a["rows"] + 15 and b["recv"] > a["recv"], (a, b)  # cameras slow down on a loaded machine
            assert b["text"] != a["text"] and b["text"].startswith("00:")
            result = s.stop_episode()
            assert result.events["lerobot_recorder"]["event"] == "saved"
            _wait(
                page,
                "document.getElementById('rec-dot').className === '' && "
                "document.getElementById('saved').textContent.endsWith(': 1')",
                timeout=10000,
            )
            assert "saved" in page.inner_text("#events")

            # re-alignment: live cam_front blended with frame 0 of the episode just saved
            page.evaluate("loadRoots()")
            _wait(page, "document.querySelectorAll('#align-episode option').length === 1", timeout=10000)
            page.select_option("#align-camera", "cam_front")
            page.evaluate("loadReference()")
            _wait(
                page,
                "(c => c.dataset.ref === '0/0/cam_front' && c.dataset.live)(document.getElementById('align-canvas'))",
                timeout=10000,
            )
            blend = page.evaluate(BLEND_CHECK)
            deadline = time.monotonic() + 30  # the live view must have moved away from frame 0 (the demo
            while blend["differ"] <= 50 and time.monotonic() < deadline:  # script moves the arm)
                time.sleep(0.5)
                blend = page.evaluate(BLEND_CHECK)
            assert (blend["w"], blend["h"]) == (W, H) and blend["alpha"] == 0.5
            assert blend["meanErr"] < 1.0 and blend["maxErr"] <= 3, blend
            assert blend["differ"] > 50 and blend["between"] >= 0.9 * blend["differ"], blend  # really both images
            page.select_option("#align-mode", "difference")
            diff = page.evaluate(BLEND_CHECK)
            assert diff["meanErr"] < 1.0 and diff["maxErr"] <= 3, diff
            page.wait_for_timeout(1200)  # a few more polls: still no error
            assert errors == []


def test_dashboard_shows_each_arm_of_a_two_arm_graph_in_browser(tmp_path):
    """Two arms: the page lists each arm's node, and shows each arm under its name with its own feedback (its
    namespace's joint states at the arm's rate), its commanded pose and its clutch engaged by its own hand.
    """
    from piper_recorder.graph.sim_session import SimSession, size_overrides

    port = free_port()
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.dashboard=true",
        f"dashboard.port={port}",
        "dashboard.silent_s=5.0",
        "piper_arm.can_silence_s=5.0",
        "teleop.arm_stale_timeout_s=3.0",
    ]
    arms = ("left", "right")
    with SimSession(tmp_path / "out", sets=sets, arms=",".join(arms)) as s:
        assert {f"{a}/piper_arm" for a in arms} <= set(s.plan.node_names)
        base, state_url = f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port}/api/state"
        deadline = time.monotonic() + 20
        while _get(base) != 200:
            assert time.monotonic() < deadline, "dashboard not serving"
            time.sleep(0.2)
        with open_page(base) as (page, errors):
            _wait(page, "document.getElementById('health').textContent === 'graph healthy'", 60000, state_url)
            present = page.eval_on_selector_all(
                "#nodes .chip", "cs => cs.map(c => [c.dataset.node, c.dataset.present])"
            )
            assert {n for n, p in present if p == "true"} >= set(s.plan.node_names) - {"dashboard"}
            heads = "Array.from(document.querySelectorAll('#joints tr.arm-head'))"
            _wait(
                page,
                f"{heads}.map(h => h.dataset.arm).join() === 'left,right' && "
                f"{heads}.every(h => h.querySelector('.clutch').textContent === 'engaged')",
                30000,
                state_url,
            )
            view = _get_json(state_url)["arms"]
            assert [a["name"] for a in view] == list(arms)
            for a in view:
                assert a["feedback_topic"] == f"/{a['name']}/arm/joint_states"
                assert a["feedback_rate_hz"] > 50 and a["commanded"]["rate_hz"] > 20, a
                assert a["clutch"]["engaged"] is True, a
            # each arm's head row, then its own joint rows (six joints and the gripper at least)
            rows = page.eval_on_selector_all(
                "#joints tr", "rs => rs.map(r => r.classList.contains('arm-head') ? r.dataset.arm : 'joint')"
            )
            split = rows.index("right")
            assert rows[0] == "left" and rows[1:split].count("joint") >= 6 and rows[split + 1 :].count("joint") >= 6
            heads_text = page.eval_on_selector_all("#joints tr.arm-head", "hs => hs.map(h => h.textContent)")
            assert all(" Hz" in t and "s ago" in t for t in heads_text), heads_text
            page.wait_for_timeout(1200)  # a few more polls: still no error
            assert errors == []

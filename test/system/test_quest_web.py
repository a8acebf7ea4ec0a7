"""The WebXR headset page through the whole simulated graph, with an emulated Quest 3 (real processes).

The graph is ``piper-launch sim --headset web``'s: piper-quest-web (the page's server, relaying to the
bridge and the video channel as the native app's two servers), quest_bridge, teleop, piper_arm (the
CAN-level emulator under piper_sdk), two sim cameras, both recorders, quest_video. The page runs in
headless Debian Chromium (swiftshader WebGL) with Meta's IWER (npm ``iwer``, Meta Quest 3 with Touch
Plus controllers) installed into it as its WebXR runtime; the test moves IWER's controller and
presses its buttons, and checks what the graph did: the measured end effector follows the scripted
controller motion (direction and magnitude, through the XR -> robot remap), A starts and saves an
episode on both recorders and B discards one, the confirmation pulses reach IWER's haptic actuator,
the panels arrive in the page at >= 14 fps, and a blurred XR session, then a hidden page (document.hidden),
stop the frames so that teleop releases the clutch (headset stream stale). ~40 s on a quiet 2-core machine.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.ports import free_port
from piper_recorder.graph.supervisor import Graph
from piper_recorder.quest.video import TINT_RECORDING

from support.browser import CHROMIUM_ARGS, chromium_path
from support.paths import ROOT
from support.reports import read_report
from support.waiting import wait_for

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]
IWER = ROOT / "test" / "web" / "node_modules" / "iwer" / "build" / "iwer.js"
RECORDERS = ("lerobot_recorder", "rgbd_recorder")
# The emulated Quest 3, and a record of every haptic pulse that reaches its controllers' actuators.
INSTALL_IWER = """
window.__pulses = [];
const device = new IWER.XRDevice(IWER.metaQuest3);
device.installRuntime({forceInstall: true});
device.stereoEnabled = false;   // one view: swiftshader renders on the CPU the graph under test shares
window.__iwer = device;
for (const hand of ['left', 'right']) {
  const act = device.controllers[hand].inputSource.gamepad.hapticActuators[0];
  const pulse = act.pulse.bind(act);
  act.pulse = (value, duration) => { window.__pulses.push({hand, value, duration}); return pulse(value, duration); };
}
"""


class Watcher:
    """An rclpy node in this process: the arm's measured pose, teleop's status, episode events, the hello."""

    def __init__(self) -> None:
        import rclpy
        from geometry_msgs.msg import PoseStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("quest_web_test", context=self.ctx)
        self.eef: tuple[float, float, float] | None = None
        self.teleop: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.hello: dict[str, Any] = {}
        n = self.node
        n.create_subscription(PoseStamped, "/arm/eef_pose", self._on_eef, 10)
        n.create_subscription(String, "/teleop/status", lambda m: self.teleop.update(json.loads(m.data)), 10)
        n.create_subscription(String, "/episode_events", lambda m: self.events.append(json.loads(m.data)), 50)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        n.create_subscription(String, "/quest/hello", lambda m: self.hello.update(json.loads(m.data)), latched)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(n)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _on_eef(self, m: Any) -> None:
        p = m.pose.position
        self.eef = (p.x, p.y, p.z)

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def saw(self, event: str, since: int) -> set[str]:
        return {e["recorder"] for e in self.events[since:] if e.get("event") == event}

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


def test_webxr_page_drives_the_sim_graph_with_an_emulated_quest3(tmp_path, ros_domain):
    assert IWER.is_file(), "IWER is missing: run `make web-test-deps` (npm ci in test/web)"
    from playwright.sync_api import sync_playwright

    t_start = time.monotonic()
    report = tmp_path / "web.json"
    sets = [
        f"lerobot_recorder.root={tmp_path / 'lerobot'}",
        f"rgbd_recorder.path={tmp_path / 'rgbd.hdf5'}",
        f"quest_bridge.port={free_port()}",
        f"quest_video.port={free_port()}",
        "piper_launch.quest_web.port=0",
        f"piper_launch.quest_web.report={report}",
        "cam_front.width=320",
        "cam_front.height=240",
        "cam_wrist.width=320",
        "cam_wrist.height=240",
        "lerobot_recorder.camera_width=320",
        "lerobot_recorder.camera_height=240",
        "rgbd_recorder.camera_width=320",
        "rgbd_recorder.camera_height=240",
    ]
    plan = plan_graph("sim", config_path("sim"), sets, tmp_path / "logs", headset="web")
    assert "quest_web" in [p.name for p in plan.processes] and "sim_quest" not in [p.name for p in plan.processes]
    graph = Graph(plan, ros_domain.env(), tmp_path / "logs")
    ros_domain.apply()
    w = None
    try:
        graph.start()
        w = Watcher()
        graph.wait_nodes(w.node, 120.0)
        port = wait_for(
            lambda: (read_report(report).get("ports") or {}).get("web"), 30.0, "the page's port", graph.logs, step=0.05
        )
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=chromium_path(),
                headless=True,
                viewport={"width": 480, "height": 360},
                args=[*CHROMIUM_ARGS, "--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
            )
            try:
                ctx.add_init_script(path=str(IWER))
                ctx.add_init_script(script=INSTALL_IWER)
                page = ctx.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function("window.piperWeb && window.piperWeb.stats.wsOpen", timeout=20000)
                page.click("#enter-ar")  # a real click: the user activation a session needs
                page.wait_for_function("window.piperWeb.stats.session === 'immersive-ar'", timeout=20000)
                # IWER reports every space as emulated (emulatedPosition); a Quest reports tracked controllers
                page.evaluate(
                    "for (const h of ['left', 'right']) "
                    "__iwer.controllers[h].inputSource.gripSpace[IWER.P_SPACE].emulated = false"
                )
                _run_session(page, w, report, graph)
                assert not errors, errors
            finally:
                ctx.close()
        print(f"test_quest_web: {time.monotonic() - t_start:.1f} s")
    finally:
        if w is not None:
            w.close()
        graph.stop()


def _stats(page: Any) -> dict[str, Any]:
    return page.evaluate("JSON.parse(JSON.stringify(window.piperWeb.stats))")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _corner(page: Any) -> tuple[float, float, float]:
    """Mean colour of the view's top-left corner (no panel there), from a screenshot."""
    import io

    from PIL import Image, ImageStat

    im = Image.open(io.BytesIO(page.screenshot())).convert("RGB").crop((0, 0, 24, 24))
    r, g, b = ImageStat.Stat(im).mean
    return r, g, b


def _press(page: Any, button: str, hold_s: float = 0.3) -> None:
    page.evaluate(f"__iwer.controllers.right.updateButtonValue('{button}', 1)")
    time.sleep(hold_s)
    page.evaluate(f"__iwer.controllers.right.updateButtonValue('{button}', 0)")


def _move(page: Any, start: tuple[float, float, float], delta: tuple[float, float, float], seconds: float) -> None:
    steps = max(1, int(seconds / 0.02))
    for i in range(1, steps + 1):
        x, y, z = (s + d * i / steps for s, d in zip(start, delta))
        page.evaluate(f"__iwer.controllers.right.position.set({x}, {y}, {z})")
        time.sleep(seconds / steps)


def _run_session(page: Any, w: Watcher, report: Path, graph: Graph) -> None:
    def dump() -> str:
        return (
            json.dumps({"page": _stats(page), "relay": read_report(report), "teleop": w.teleop})[:4000]
            + "\n"
            + graph.logs(12)
        )

    # -- the hello through the bridge says which client this is ----------------------------------------
    wait_for(
        lambda: w.hello.get("client") == "web" and w.hello.get("mode") == "immersive-ar",
        20.0,
        "the web hello on /quest/hello",
        dump,
        step=0.05,
    )

    # -- the clutch: squeeze, then the arm follows the controller ------------------------------------
    # A motion during which teleop released the clutch itself (a starved machine: the arm's CAN feedback
    # late, "arm fault: can_silent") is done again after a re-grip, as an operator would; the check is
    # made on a motion with the clutch held throughout, up to 3 attempts.
    home = (0.2, 1.1, -0.4)
    delta_xr = (0.0, 0.04, -0.06)  # up 4 cm, forward (-z in XR) 6 cm
    expected = (-delta_xr[2], -delta_xr[0], delta_xr[1])  # robot x = -xr z, y = -xr x, z = xr y (teleop.frames)
    for attempt in range(3):
        page.evaluate("__iwer.controllers.right.updateButtonValue('squeeze', 0)")
        page.evaluate(f"__iwer.controllers.right.position.set({home[0]}, {home[1]}, {home[2]})")
        time.sleep(0.4)
        page.evaluate("__iwer.controllers.right.updateButtonValue('squeeze', 1)")
        wait_for(lambda: w.teleop.get("engaged") is True, 20.0, "the clutch engaged", dump, step=0.05)
        time.sleep(1.0)
        releases, e0 = w.teleop.get("forced_releases"), w.eef
        assert e0 is not None
        _move(page, home, delta_xr, 1.0)
        time.sleep(1.5)
        e1 = w.eef
        assert e1 is not None
        why = {k: w.teleop.get(k) for k in ("engaged", "forced_releases", "last_release", "limits_active")}
        if w.teleop.get("forced_releases") == releases and w.teleop.get("engaged"):
            break
        print(f"attempt {attempt + 1}: teleop released the clutch during the motion ({why}); again")
    else:
        raise AssertionError(f"teleop released the clutch during each of 3 motions: {why}, load {os.getloadavg()}")
    moved = [b - a for a, b in zip(e0, e1)]
    norm = math.dist(e0, e1)
    cos = sum(m * e for m, e in zip(moved, expected)) / (norm * math.hypot(*expected))
    print(f"end effector moved {[round(m, 4) for m in moved]} m for a controller motion of {expected} (robot axes)")
    assert cos > 0.95, (moved, expected, why, dump())
    assert 0.8 * math.hypot(*expected) <= norm <= 1.2 * math.hypot(*expected), (moved, expected, why, os.getloadavg())

    # -- A: start on both recorders, the start pulse, the red tint; A again: save; then A, B: discard --
    n = len(w.events)
    p0 = len(page.evaluate("__pulses"))
    _press(page, "a-button")
    wait_for(lambda: w.saw("started", n) == set(RECORDERS), 20.0, "started from A", dump, step=0.05)
    wait_for(
        lambda: any(p["value"] == 0.8 and p["duration"] == 120 for p in page.evaluate("__pulses")[p0:]),
        10.0,
        "the start pulse at the emulated controller",
        dump,
        step=0.05,
    )
    wait_for(
        lambda: _stats(page)["tint"] == pytest.approx(list(TINT_RECORDING), abs=1e-6), 10.0, "red tint", dump, step=0.05
    )
    r, g, b = _corner(page)  # drawn: IWER composes the XR canvas over the page (passthrough: the page behind)
    assert r > 2 * g + 20 and r > 2 * b + 20, ("the view is not tinted red while recording", (r, g, b))
    _move(page, tuple(h + d for h, d in zip(home, delta_xr)), (0.0, -0.03, 0.03), 1.0)  # motion in the episode
    time.sleep(1.0)
    n, p0 = len(w.events), len(page.evaluate("__pulses"))
    _press(page, "a-button")
    wait_for(lambda: w.saw("saved", n) == set(RECORDERS), 60.0, "saved from A", dump, step=0.05)
    wait_for(lambda: _stats(page)["tint"][3] == 0.0, 10.0, "the tint off after the save", dump, step=0.05)
    time.sleep(0.3)
    r, g, b = _corner(page)
    assert abs(r - g) < 12 and abs(r - b) < 12, ("still tinted after the save", (r, g, b))
    wait_for(
        lambda: any(p["value"] == 0.5 and p["duration"] == 200 for p in page.evaluate("__pulses")[p0:]),
        10.0,
        "the save pulse",
        dump,
        step=0.05,
    )
    n = len(w.events)
    _press(page, "a-button")
    wait_for(lambda: w.saw("started", n) == set(RECORDERS), 20.0, "started again", dump, step=0.05)
    time.sleep(1.0)
    n, p0 = len(w.events), len(page.evaluate("__pulses"))
    _press(page, "b-button")
    wait_for(lambda: w.saw("discarded", n) == set(RECORDERS), 20.0, "discarded from B", dump, step=0.05)
    wait_for(
        lambda: sum(p["value"] == 1.0 and p["duration"] == 60 for p in page.evaluate("__pulses")[p0:]) >= 3,
        10.0,
        "three discard pulses",
        dump,
        step=0.05,
    )
    assert all(p["hand"] == "right" for p in page.evaluate("__pulses")), "teleop's hand is the right one"

    # -- a blurred session (headset off, system menu) sends no frames: teleop releases the clutch -----
    def regrip(why: str) -> None:
        """Open and close the grip, as an operator does after a release; teleop engages again."""
        page.evaluate("__iwer.controllers.right.updateButtonValue('squeeze', 0)")
        time.sleep(0.4)
        page.evaluate("__iwer.controllers.right.updateButtonValue('squeeze', 1)")
        wait_for(lambda: w.teleop.get("engaged") is True, 20.0, f"the clutch engaged {why}", dump, step=0.05)

    def released_stale(script: str) -> tuple[int, dict]:
        """Run ``script`` (it returns framesSent before it hides the page): teleop releases the clutch as
        the stream goes stale; the frames sent before and the page's stats half a second later.
        """
        sent = page.evaluate(script)
        wait_for(lambda: w.teleop.get("engaged") is False, 5.0, "the clutch released", dump, step=0.05)
        assert "stale" in str(w.teleop.get("last_release")), w.teleop
        time.sleep(0.5)
        return sent, _stats(page)

    if not w.teleop.get("engaged"):  # a release teleop made meanwhile (a starved machine: arm feedback late)
        regrip("again")
    sent, st = released_stale(
        "(() => { const n = piperWeb.stats.framesSent; __iwer.updateVisibilityState('visible-blurred'); return n; })()"
    )
    # IWER applies the new state at the next frame's start: at most the frame already running went out
    assert st["framesSuppressed"] > 0 and st["framesSent"] - sent <= 1 and st["visibility"] == "visible-blurred", st

    # -- panels: both cameras and the HUD arrive in the page at >= 14 fps (counted there), and are drawn ----
    wait_for(lambda: min(_stats(page)["panels"][p] for p in (0, 1, 3)) > 10, 60.0, "panels and HUD", dump, step=0.05)
    (relay_pid,) = [r.popen.pid for r in graph.running if r.spec.name == "quest_web"]
    c0 = _cpu_s(relay_pid)
    a0, s0, r0, t0 = (
        _stats(page)["panelsReceived"],
        _stats(page)["panels"],
        read_report(report).get("panels_sent", {}),
        time.monotonic(),
    )
    time.sleep(4.0)
    a1, s1, r1, t1 = (
        _stats(page)["panelsReceived"],
        _stats(page)["panels"],
        read_report(report).get("panels_sent", {}),
        time.monotonic(),
    )
    relay_cpu = (_cpu_s(relay_pid) - c0) / (t1 - t0)
    print(f"piper-quest-web CPU, relaying the page's frames and 2 panels + HUD: {relay_cpu * 100:.1f} % of a core")
    arrived = [(a1[p] - a0[p]) / (t1 - t0) for p in range(4)]
    decoded = [(s1[p] - s0[p]) / (t1 - t0) for p in range(4)]
    relayed = {p: (r1.get(p, 0) - r0.get(p, 0)) / (t1 - t0) for p in ("0", "1", "3")}
    print(
        f"panels arrived in the page: {arrived[0]:.1f} / {arrived[1]:.1f} fps, HUD {arrived[3]:.1f} fps; decoded and "
        f"drawn {decoded[0]:.1f} / {decoded[1]:.1f} / HUD {decoded[3]:.1f} fps (relayed: {relayed}; load "
        f"{os.getloadavg()[0]:.1f})"
    )
    assert arrived[0] >= 14.0 and arrived[1] >= 14.0, (arrived, decoded, relayed, read_report(report), os.getloadavg())
    assert arrived[3] >= 3.0 and min(decoded[p] for p in (0, 1, 3)) > 0, (arrived, decoded)
    assert _stats(page)["panelDecodeErrors"] == 0

    # -- a hidden page (the browser tab backgrounded: document.hidden) sends no frames either -------------
    blurred_sent = _stats(page)["framesSent"]
    page.evaluate("__iwer.updateVisibilityState('visible')")
    wait_for(lambda: _stats(page)["framesSent"] > blurred_sent + 10, 10.0, "frames again once visible", dump, step=0.05)
    regrip("after the blur")
    # headless Chromium keeps its only tab visible: the page's document is made to report what a
    # backgrounded tab reports (hidden, 'hidden', a visibilitychange event)
    sent, st = released_stale(
        "(() => { const n = piperWeb.stats.framesSent; "
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true}); "
        "Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'}); "
        "document.dispatchEvent(new Event('visibilitychange')); return n; })()"
    )
    assert st["framesSuppressed"] > 0 and st["framesSent"] - sent <= 1 and st["visibility"] == "hidden", st
    page.evaluate(
        "(() => { delete document.hidden; delete document.visibilityState; "
        "document.dispatchEvent(new Event('visibilitychange')); })()"
    )
    wait_for(
        lambda: _stats(page)["framesSent"] > st["framesSent"] + 10, 10.0, "frames again once shown", dump, step=0.05
    )

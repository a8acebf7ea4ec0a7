"""A second headset page cannot take over an engaged arm, through real processes.

piper-quest-web (the relay), quest_bridge, teleop and the emulated piper_arm. Page A grips and holds
still; page B (a reload, a second tab: the same origin) connects with its grip held, its controller
30 cm further forward and its clock 1,000 s behind. The relay replaces A, and the arm must not move
(< 1 mm, measured and commanded) until B opens its grip and grips again; then it follows B from where
it stands (B's 5 cm, not the 30 cm offset).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.graph.ports import free_port  # noqa: E402
from piper_recorder.names import ARM_GO_HOME, COMMANDED_POSE, EEF_POSE, TELEOP_STATUS  # noqa: E402
from piper_recorder.nodes.teleop import SOURCE_CHANGE_REASON  # noqa: E402
from piper_recorder.quest.scripts import HEAD_POS, LEFT_HOME, RIGHT_HOME  # noqa: E402

from support.proc import ProcGroup  # noqa: E402
from support.spun_node import SpunNode  # noqa: E402
from support.waiting import wait_for  # noqa: E402
from support.wsclient import WebSocketClient  # noqa: E402

pytestmark = pytest.mark.timeout(150)
RATE_HZ = 90.0
MM = 1e-3


def _hand(pos: tuple[float, float, float], squeeze: float) -> dict[str, Any]:
    return {
        "pos": list(pos),
        "quat": [0.0, 0.0, 0.0, 1.0],
        "valid": True,
        "tracked": True,
        "trigger": 0.0,
        "squeeze": squeeze,
        "stick": [0.0, 0.0],
        "stick_click": False,
        "primary": False,
        "secondary": False,
        "menu": False,
    }


class Page(threading.Thread):
    """A headset page on the relay's WebSocket: streams frames at 90 Hz of a right hand set by the test."""

    def __init__(self, port: int, name: str, clock_offset_s: float, forward_m: float, squeeze: float):
        super().__init__(daemon=True, name=name)
        self.ws = WebSocketClient(port)
        assert self.ws.status == 101, self.ws.status
        self.offset, self.forward, self.squeeze = clock_offset_s, forward_m, squeeze
        self.stop = threading.Event()
        self.ws.send(json.dumps({"hello": {"app": name, "client": "web"}}).encode())

    def run(self) -> None:
        frame = 0
        while not self.stop.wait(1.0 / RATE_HZ):
            mono = time.monotonic() + self.offset
            right = (RIGHT_HOME[0], RIGHT_HOME[1], RIGHT_HOME[2] - self.forward)  # XR -z is forward
            line = {
                "t": mono,
                "mono": mono,
                "frame": frame,
                "state": "FOCUSED",
                "space": "stage",
                "head": {"pos": list(HEAD_POS), "quat": [0.0, 0.0, 0.0, 1.0], "valid": True, "tracked": True},
                "left": _hand(LEFT_HOME, 0.0),
                "right": _hand(right, self.squeeze),
            }
            try:
                self.ws.send(json.dumps(line).encode())
            except OSError:
                return  # replaced: the relay closed this page
            frame += 1


class Probe(SpunNode):
    def __init__(self) -> None:
        super().__init__("takeover_probe")
        self.status: list[dict[str, Any]] = []
        self.eef: list[tuple[float, np.ndarray]] = []
        self.commanded: list[tuple[float, np.ndarray]] = []
        self.node.create_subscription(String, TELEOP_STATUS, lambda m: self.status.append(json.loads(m.data)), 50)
        self.node.create_subscription(PoseStamped, EEF_POSE, lambda m: self.eef.append(self._p(m)), 200)
        self.node.create_subscription(PoseStamped, COMMANDED_POSE, lambda m: self.commanded.append(self._p(m)), 200)
        self.go_home = self.node.create_client(Trigger, ARM_GO_HOME)
        self.start()

    @staticmethod
    def _p(m: PoseStamped) -> tuple[float, np.ndarray]:
        p = m.pose.position
        return time.monotonic(), np.array([p.x, p.y, p.z])

    def last(self) -> dict[str, Any]:
        return self.status[-1] if self.status else {}


def _moved(samples: list[tuple[float, np.ndarray]], since: float, origin: np.ndarray) -> float:
    return max((float(np.linalg.norm(p - origin)) for t, p in samples if t >= since), default=0.0)


def test_a_second_page_cannot_take_over_an_engaged_arm(ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    probe = Probe()
    pages: list[Page] = []
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            web, bridge = free_port(), free_port()
            procs.start("piper-arm", "--ros-args", "-p", "emulate:=true")
            procs.start("piper-teleop")
            relay = procs.start(
                "piper-quest-web", "--port", str(web), "--bridge-port", str(bridge), "--video-port", "-1"
            )
            procs.start("piper-quest-bridge", "--ros-args", "-p", f"port:={bridge}", "-p", "reconnect_s:=0.1")
            wait_for(
                lambda: probe.go_home.service_is_ready() and probe.status and "page at" in relay.output(),
                40,
                "arm, teleop and the relay",
                procs.logs,
            )
            fut = probe.go_home.call_async(Trigger.Request())
            wait_for(fut.done, 10, "go_home reply", procs.logs)
            assert fut.result().success, fut.result().message
            time.sleep(3.0)  # homed: inside the workspace

            a = Page(web, "page-a", 0.0, 0.0, 0.0)
            pages.append(a)
            a.start()
            time.sleep(0.5)
            a.squeeze = 1.0
            wait_for(lambda: probe.last().get("engaged"), 20, "page A's grip engaging the clutch", procs.logs)
            time.sleep(1.0)  # A holds still: the arm settles where it is
            origin = probe.eef[-1][1]
            commanded_origin = probe.commanded[-1][1]
            releases = probe.last()["forced_releases"]

            # B: its grip held, 30 cm further forward, its clock 1,000 s behind A's
            b = Page(web, "page-b", -1000.0, 0.30, 1.0)
            pages.append(b)
            t_b = time.monotonic()
            b.start()
            time.sleep(2.0)  # B keeps its grip held
            moved, commanded = _moved(probe.eef, t_b, origin), _moved(probe.commanded, t_b, commanded_origin)
            assert moved < 1 * MM and commanded < 1 * MM, (moved, commanded)
            st = probe.last()
            assert not st["engaged"] and st["forced_releases"] == releases + 1, st
            assert st["last_release"] == SOURCE_CHANGE_REASON and st["source_changes"] >= 1, st

            # B opens its grip, grips again, and moves 5 cm forward: the arm follows 5 cm, from where it is
            b.squeeze = 0.0
            time.sleep(0.3)
            b.squeeze = 1.0
            wait_for(lambda: probe.last().get("engaged"), 10, "B's fresh grip engaging", procs.logs)
            for k in range(1, 51):
                b.forward = 0.30 + 0.05 * k / 50
                time.sleep(0.02)
            time.sleep(1.5)
            end = probe.eef[-1][1]
            delta = end - origin
            assert abs(delta[0] - 0.05) < 0.005 and np.linalg.norm(delta[1:]) < 0.005, delta
    finally:
        for p in pages:
            p.stop.set()
        probe.close()
        rclpy.shutdown()

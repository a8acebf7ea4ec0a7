"""Haptic confirmations from the teleop process (real piper-teleop): driven by what the recorders answer and
announce on /episode_events, not by the press, so a refused start feels different from a started one;
a safety limit starting to hold the target pulses and shows in /teleop/status.
"""

from __future__ import annotations

import json
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from std_msgs.msg import String  # noqa: E402

from piper_recorder.teleop.haptics import HapticConfig  # noqa: E402

from support.proc import ProcGroup  # noqa: E402
from support.teleop_graph import FakeGraph  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(120)
CFG = HapticConfig()


def pulses(name: str) -> list[tuple[float, int]]:
    return [(amp, ms) for _, amp, ms in CFG.pattern(name)]


class Recorders(FakeGraph):
    """FakeGraph whose recorders refuse or accept as told, and announce what they did like the real ones."""

    def __init__(self) -> None:
        self.accept = False
        self.recording = False
        super().__init__()
        self.pub_events = self.node.create_publisher(String, "/episode_events", 10)

    def _handler(self, name):
        rec, srv = name.split("/")

        def handle(_req, resp):
            self.calls.append(name)
            if not self.accept:
                resp.success, resp.message = False, "parameter task must be a non-blank string"
                return resp
            event = {
                "start_episode": "started",
                "stop_episode": "saved",
                "discard_episode": "discarded",
                "delete_last_episode": "deleted",
            }[srv]
            self.pub_events.publish(String(data=json.dumps({"recorder": rec, "event": event, "episode_index": 0})))
            resp.success, resp.message = True, event
            return resp

        return handle

    def on_label(self, rec, label):
        """As a recorder: a refusal when told to refuse, else the ``labeled`` event (teleop confirms it)."""
        if not self.accept:
            return False, "no episode in flight and none saved in this session"
        self.pub_events.publish(
            String(
                data=json.dumps({"recorder": rec, "event": "labeled", "episode_index": 0, "outcome": label["outcome"]})
            )
        )
        return True, f"episode 0 labelled {label['outcome']}"

    def press_a(self) -> None:
        self.joy["right"][2] = 1
        time.sleep(0.15)
        self.joy["right"][2] = 0
        time.sleep(0.15)

    def felt(self, since: int) -> list[tuple[float, int]]:
        return [(h["amp"], h["ms"]) for h in self.haptics[since:]]


@pytest.fixture
def recorders(ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    g = Recorders()
    with ProcGroup(ros_domain.env(), tmp_path) as procs:
        procs.start("piper-teleop", "--ros-args", "-p", "control_rate_hz:=100.0", "-p", "call_timeout_s:=5.0")
        try:
            wait_for(lambda: g.status, 30, "teleop status")
            yield g
        finally:
            print(procs.logs())
            g.close()
            rclpy.shutdown()


def test_refused_start_feels_different_from_a_started_one_and_limits_pulse(recorders):
    g = recorders
    time.sleep(1.0)
    # refused by both recorders: one long pulse (once), never the start confirmation
    n = len(g.haptics)
    g.press_a()
    wait_for(lambda: g.felt(n).count(pulses("refused")[0]) >= 1, 10, "refused pulse")
    time.sleep(1.0)
    assert g.felt(n) == pulses("refused"), g.felt(n)
    assert g.status[-1]["last_alarm"]["outcome"] == "refused"

    # accepted: the start confirmation once (two recorders announced), then save, then discard's three
    g.accept = True
    # (the stop is the plain A of the stop chord: the episode is labelled success, felt once for both)
    for expect in (["start"], ["save", "success"], ["start"]):
        n = len(g.haptics)
        g.press_a()
        want = sorted(p for name in expect for p in pulses(name))
        wait_for(lambda: sorted(g.felt(n)) == want, 10, f"{expect} pulses")
        time.sleep(0.8)
        assert sorted(g.felt(n)) == want, (expect, g.felt(n))
    assert sorted((r, lab["outcome"]) for r, lab in g.labels) == [
        ("lerobot_recorder", "success"),
        ("rgbd_recorder", "success"),
    ]
    n = len(g.haptics)
    g.joy["right"][3] = 1  # B discards
    time.sleep(0.15)
    g.joy["right"][3] = 0
    wait_for(lambda: g.felt(n) == pulses("discard"), 10, "discard pattern")
    assert pulses("discard") == [(1.0, 60)] * 3 and pulses("start") == [(0.8, 120)]

    # engage, then drive the hand 1 m forward: the fake arm never moves, so the tether to the measured
    # pose (0.12 m) holds the target, after the speed cap while it travels
    g.joy["right"][1] = 1.0
    wait_for(lambda: len(g.targets) > 20, 10, "targets after engage")
    assert g.status[-1]["limits_active"] == [], g.status[-1]
    n = len(g.haptics)
    g.hand = [0.2, 1.1, -1.35]
    wait_for(lambda: pulses("limit")[0] in g.felt(n), 10, "limit pulse")
    wait_for(lambda: "tether" in g.status[-1].get("limits_active", []), 10, "the tether in the status")
    wait_for(lambda: abs(g.targets[-1][1].pose.position.x - (0.25 + 0.12)) < 1e-6, 5, "target held at the tether")
    st = g.status[-1]
    assert st["limit_hits"].get("tether", 0) >= 1 and st["haptics"]["limit"] >= 1, st


def test_refused_grip_and_forced_release_reach_quest_haptic(recorders):
    """A grip refused by the interlocks (no arm feedback) gives the refused pattern on
    /quest/haptic (it gave none), once for the held grip; a stalled headset stream releases the clutch
    with the release pattern, and /teleop/status counts it and says why.
    """
    g = recorders
    time.sleep(0.5)
    g.arm = False
    time.sleep(1.0)  # > arm_stale_timeout_s: the arm feedback is stale
    n = len(g.haptics)
    g.joy["right"][1] = 1.0
    wait_for(lambda: pulses("refused")[0] in g.felt(n), 10, "refused pulse for the refused grip")
    time.sleep(1.5)  # the grip stays closed and refused: told once, not at every retry
    assert g.felt(n) == pulses("refused"), g.felt(n)
    assert g.targets == []
    g.arm = True  # the interlock clears while the grip is held: engages (no fresh grip needed)
    wait_for(lambda: len(g.targets) > 10, 10, "targets once the arm feedback is back")
    n, releases = len(g.haptics), g.status[-1]["forced_releases"]
    g.headset = False  # a headset stall: the stream goes stale
    wait_for(lambda: g.felt(n) == pulses("release"), 10, "release pattern")
    wait_for(
        lambda: g.status[-1]["forced_releases"] == releases + 1 and not g.status[-1]["engaged"],
        5,
        "the release in /teleop/status",
    )
    assert g.status[-1]["last_release"].startswith("headset stream stale"), g.status[-1]
    assert pulses("release") == [(0.7, 300)] * 2
    g.headset = True  # the stream is back, the grip still closed: stays released until re-gripped
    time.sleep(0.5)
    count = len(g.targets)
    time.sleep(0.5)
    assert len(g.targets) == count and not g.status[-1]["engaged"]
    g.joy["right"][1] = 0.0
    time.sleep(0.2)
    g.joy["right"][1] = 1.0
    wait_for(lambda: len(g.targets) > count + 10, 10, "targets after the re-grip")

"""SpaceMouse teleop through real processes: recorded HID reports replayed through a fake hidraw device
(a FIFO teleop opens as its ``spacemouse.device``, one report per read) drive the emulated Piper
(piper-arm over piper_sdk's CAN emulator) through piper-teleop in ``input: spacemouse`` mode.

The arm holds while the clutch is off, however hard the cap is pushed; after the clutch button the
flange moves forward (+x) by what the deflection commands (0.1 m/s at full deflection); garbage reports
are counted drops in /teleop/status and move nothing; the clutch button again stops it; holding the
right button 1 s calls start_episode, holding it again stop_episode (on a recorder's services the test
offers); teleop publishes the latched hello the recorders put in their provenance.
"""

from __future__ import annotations

import itertools
import json
import struct
import time
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from support.proc import ProcGroup  # noqa: E402
from support.spacemouse import FakeHidraw, buttons, trans  # noqa: E402
from support.spun_node import SpunNode  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
REPORT_PERIOD_S = 0.008  # the replay sends a report every 8 ms while deflected


class Probe(SpunNode):
    def __init__(self) -> None:
        super().__init__("spacemouse_probe")
        self.status: dict[str, Any] = {}
        self.eef: np.ndarray | None = None
        self.commanded = 0
        self.hello: dict[str, Any] = {}
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.node.create_subscription(
            String, "/quest/hello", lambda m: setattr(self, "hello", json.loads(m.data)), latched
        )
        self.node.create_subscription(String, "/teleop/status", self._on_status, 50)
        self.node.create_subscription(PoseStamped, "/arm/eef_pose", self._on_eef, qos_profile_sensor_data)
        self.node.create_subscription(PoseStamped, "/arm/target_pose", self._on_cmd, 50)  # teleop's
        self.go_home = self.node.create_client(Trigger, "/arm/go_home")
        self.calls: list[str] = []  # a recorder's services, as teleop calls them on the buttons
        for action in ("start_episode", "stop_episode", "discard_episode", "delete_last_episode"):
            self.node.create_service(Trigger, f"/probe_rec/{action}", lambda req, resp, a=action: self._call(a, resp))
        self.start()

    def _on_status(self, m: String) -> None:
        self.status = json.loads(m.data)

    def _on_eef(self, m: PoseStamped) -> None:
        p = m.pose.position
        self.eef = np.array([p.x, p.y, p.z])

    def _on_cmd(self, _m: PoseStamped) -> None:
        self.commanded += 1

    def _call(self, action: str, resp: Trigger.Response) -> Trigger.Response:
        self.calls.append(action)
        resp.success, resp.message = True, f"{action} done"
        return resp


def replay(dev: FakeHidraw, report: bytes, seconds: float, timeout_s: float = 0.25) -> float:
    """The device streaming one deflection at its report rate, then coming to rest; returns how long the
    deflection was on the wire as teleop counts it (a gap between reports longer than its
    ``spacemouse.report_timeout_s`` counts as rest after it: this process starved on a loaded machine
    is a device that stopped reporting).
    """
    end = time.monotonic() + seconds
    sent: list[float] = []
    while time.monotonic() < end:
        dev.send(report)
        sent.append(time.monotonic())
        time.sleep(REPORT_PERIOD_S)
    dev.send(trans(0, 0, 0))
    sent.append(time.monotonic())
    return sum(min(b - a, timeout_s) for a, b in itertools.pairwise(sent))


def press(dev: FakeHidraw, mask: int) -> None:
    dev.send(buttons(mask))
    time.sleep(0.05)
    dev.send(buttons(0))


def settled(probe: Probe, seconds: float = 1.0) -> np.ndarray:
    time.sleep(seconds)
    assert probe.eef is not None
    return probe.eef.copy()


def test_replayed_reports_drive_the_emulated_arm(ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    probe = Probe()
    dev = FakeHidraw(tmp_path / "hidraw0")
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            procs.start("piper-arm", "--ros-args", "-p", "emulate:=true")
            procs.start(
                "piper-teleop",
                "--ros-args",
                "-p",
                "input:=spacemouse",
                "-p",
                f"spacemouse.device:={dev.path}",
                "-p",
                "recorders:=[probe_rec]",
            )
            wait_for(
                lambda: (
                    probe.go_home.service_is_ready()
                    and probe.eef is not None
                    and (probe.status.get("spacemouse") or {}).get("device") == "open"
                ),
                40,
                "arm, teleop and the device open",
                procs.logs,
            )
            assert probe.status["input"] == "spacemouse"
            wait_for(lambda: probe.hello, 5, "the latched hello for the recorders' provenance", procs.logs)
            assert probe.hello == {"client": "spacemouse", "device": dev.path}
            fut = probe.go_home.call_async(Trigger.Request())
            wait_for(fut.done, 10, "go_home reply", procs.logs)
            assert fut.result().success, fut.result().message
            home = settled(probe, 3.0)

            # clutch off: a full push moves nothing
            replay(dev, trans(0, -350, 0), 1.0)
            assert np.abs(settled(probe, 0.5) - home).max() < 0.002
            assert probe.commanded == 0 and not probe.status["engaged"]

            # clutch on, full deflection away from the user for 1.5 s: +x by ~0.15 m
            press(dev, 1)
            wait_for(lambda: probe.status.get("engaged"), 5, "the clutch engaged by the button", procs.logs)
            start = settled(probe, 0.5)
            deflected = replay(dev, trans(0, -350, 0), 1.5)
            moved = settled(probe, 1.5) - start
            print(
                f"home {np.round(home, 4).tolist()} moved {np.round(moved, 4).tolist()} for {deflected:.3f} s "
                f"of deflection; stalls {probe.status['spacemouse']['stalls']}"
            )
            assert deflected > 1.0
            assert moved[0] == pytest.approx(0.1 * deflected, abs=0.02), moved  # 0.1 m/s at full deflection
            assert abs(moved[1]) < 0.01 and abs(moved[2]) < 0.01, moved
            assert probe.commanded > 100

            # garbage: counted, no motion
            before = settled(probe, 0.2)
            for bad in (struct.pack("<B3h", 1, 0, -32767, 0), b"\x01\x00\x00", b"\x02" + bytes(8)):
                for _ in range(5):
                    dev.send(bad)
            wait_for(
                lambda: probe.status["spacemouse"]["drops"] == {"out_of_range": 5, "bad_length": 10},
                5,
                "the garbage reports counted as drops",
                procs.logs,
            )
            assert np.abs(settled(probe, 0.5) - before).max() < 0.002
            assert probe.status["engaged"]

            # clutch off again: pushing moves nothing
            press(dev, 1)
            wait_for(lambda: not probe.status.get("engaged"), 5, "the clutch released by the button", procs.logs)
            stopped = settled(probe, 0.5)
            n = probe.commanded
            replay(dev, trans(0, -350, 0), 1.0)
            assert np.abs(settled(probe, 0.5) - stopped).max() < 0.002
            assert probe.commanded == n
            st = probe.status["spacemouse"]
            assert st["clutch_presses"] == 2 and st["layout"] == "split", st

            # the right button held 1 s: start, held again: stop and save (teleop's recorder calls)
            for expected in (["start_episode"], ["start_episode", "stop_episode"]):
                dev.send(buttons(2))
                time.sleep(1.3)
                dev.send(buttons(0))
                wait_for(lambda: probe.calls == expected, 10, f"the recorder calls {expected}", procs.logs)
            assert probe.status["spacemouse"]["record_holds"] == 2
            assert probe.status["spacemouse"]["gripper_toggles"] == 0
    finally:
        probe.close()
        dev.unplug()
        rclpy.shutdown()

"""Two arms through real processes: each arm follows its own hand only.

Two emulated piper_arm processes under the namespaces left and right, teleop with ``arms:=[left, right]``,
quest_bridge and the simulated headset's ``bimanual`` script with both hands: both grips close; the left hand
stays still while the right one circles, then the two move mirrored (left-right). Read from each arm's own
``/<arm>/arm/eef_pose``: while the left hand is still, the left arm stays put and the right one follows its
circle; then both move, in opposite directions along the robot's y (the operator's left-right).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.graph.ports import free_port  # noqa: E402
from piper_recorder.names import (  # noqa: E402
    ARM_GO_HOME,
    BIMANUAL_ARMS,
    EEF_POSE,
    QUEST_RAW,
    TELEOP_STATUS,
    arm_topic,
)
from piper_recorder.quest.scripts import BIMANUAL_STILL_S, LEAD_S  # noqa: E402

from support.proc import ProcGroup  # noqa: E402
from support.spun_node import SpunNode  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(150)
SIM_CONFIG = Path(__file__).resolve().parents[2] / "config" / "sim.yaml"
RATE_HZ = 90.0  # the simulated headset's frame rate (its default)


class Probe(SpunNode):
    """Each arm's flange positions (monotonic time, xyz) and teleop's status, spun on a thread of its own."""

    def __init__(self) -> None:
        super().__init__("bimanual_probe")
        self.poses: dict[str, list[tuple[float, np.ndarray]]] = {a: [] for a in BIMANUAL_ARMS}
        self.status: dict[str, Any] = {}
        for arm in BIMANUAL_ARMS:
            self.node.create_subscription(
                PoseStamped, arm_topic(arm, EEF_POSE), lambda m, a=arm: self._pose(a, m), qos_profile_sensor_data
            )
        self.node.create_subscription(String, TELEOP_STATUS, lambda m: setattr(self, "status", json.loads(m.data)), 10)
        self.script_start: float | None = None  # the headset script's t = 0 on this host's monotonic clock
        self.node.create_subscription(String, QUEST_RAW, self._raw, 10)
        self.go_home = {a: self.node.create_client(Trigger, arm_topic(a, ARM_GO_HOME)) for a in BIMANUAL_ARMS}
        self.start()

    def _pose(self, arm: str, m: PoseStamped) -> None:
        p = m.pose.position
        self.poses[arm].append((time.monotonic(), np.array([p.x, p.y, p.z])))

    def _raw(self, m: String) -> None:
        """A headset frame's ``mono`` (the sim's clock: host monotonic) less its script time ``frame / 90``."""
        if self.script_start is None:
            frame = json.loads(m.data)
            if "mono" in frame and "frame" in frame:
                self.script_start = float(frame["mono"]) - int(frame["frame"]) / RATE_HZ

    def engaged(self) -> dict[str, bool]:
        return {a: bool((self.status.get("arms") or {}).get(a, {}).get("engaged")) for a in BIMANUAL_ARMS}

    def between(self, arm: str, t0: float, t1: float) -> np.ndarray:
        return np.array([p for t, p in list(self.poses[arm]) if t0 <= t <= t1])

    def y_on(self, arm: str, grid: np.ndarray) -> np.ndarray:
        """The arm's flange y interpolated onto ``grid`` (monotonic times)."""
        seen = list(self.poses[arm])
        return np.interp(grid, [t for t, _ in seen], [p[1] for _, p in seen])


def test_each_arm_follows_its_own_hand_only(ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    probe = Probe()
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            for arm in BIMANUAL_ARMS:
                procs.start("piper-arm", "--ros-args", "-r", f"__ns:=/{arm}", "-p", "emulate:=true", name=arm)
            # teleop as the simulated graph runs it (its watchdogs loosened for a shared machine, config/sim.yaml):
            # with the robot's 0.25 s, one stall of the headset path right after the grips released both
            # clutches (1 run in 21), and this script's operator never grips again
            procs.start(
                "piper-teleop",
                "--ros-args",
                "--params-file",
                str(SIM_CONFIG),
                "-p",
                f"arms:=[{', '.join(BIMANUAL_ARMS)}]",
            )
            wait_for(
                lambda: all(c.service_is_ready() for c in probe.go_home.values()) and probe.status,
                40,
                "both arms and teleop",
                procs.logs,
            )
            assert set(probe.status.get("arms", {})) == set(BIMANUAL_ARMS), probe.status
            for arm, client in probe.go_home.items():
                fut = client.call_async(Trigger.Request())
                wait_for(fut.done, 10, f"{arm} go_home reply", procs.logs)
                assert fut.result().success, (arm, fut.result().message)
            time.sleep(3.0)  # homed: inside the workspace, so the grips are not refused
            port = free_port()
            sim = procs.start(
                "piper-sim-quest", "--port", str(port), "--script", "bimanual", "--two-hands", "--no-buttons"
            )
            wait_for(lambda: "listening" in sim.output(), 10, "sim headset", procs.logs)
            procs.start("piper-quest-bridge", "--ros-args", "-p", f"port:={port}", "-p", "reconnect_s:=0.1")
            wait_for(lambda: all(probe.engaged().values()), 30, "both clutches engaged by the grips", procs.logs)
            wait_for(lambda: probe.script_start is not None, 10, "a headset frame on /quest/raw", procs.logs)
            assert probe.script_start is not None
            t0 = probe.script_start + LEAD_S  # the grips close over the next 0.3 s; then the still phase
            time.sleep(max(0.0, t0 + BIMANUAL_STILL_S + 5.5 - time.monotonic()))
            still = {a: probe.between(a, t0 + 0.3, t0 + BIMANUAL_STILL_S - 0.8) for a in BIMANUAL_ARMS}
            moving = {
                a: probe.between(a, t0 + BIMANUAL_STILL_S + 1.0, t0 + BIMANUAL_STILL_S + 5.0) for a in BIMANUAL_ARMS
            }
            assert all(len(v) > 50 for v in (*still.values(), *moving.values())), {a: len(v) for a, v in still.items()}
            # the left hand still: its arm does not move; the right hand circles (4 cm): its arm follows
            left_span = np.ptp(still["left"], axis=0)
            right_span = np.ptp(still["right"], axis=0)
            assert left_span.max() < 0.001, left_span
            assert right_span.max() > 0.02, right_span
            # then mirrored: both move, one arm's y against the other's
            grid = np.linspace(t0 + BIMANUAL_STILL_S + 1.0, t0 + BIMANUAL_STILL_S + 5.0, 400)
            ly, ry = probe.y_on("left", grid), probe.y_on("right", grid)
            assert np.ptp(ly) > 0.03 and np.ptp(ry) > 0.03, (np.ptp(ly), np.ptp(ry))
            corr = np.corrcoef(ly, ry)[0, 1]
            assert corr < -0.9, corr
            assert probe.status.get("forced_releases", 0) == 0, probe.status
    finally:
        probe.close()
        rclpy.shutdown()

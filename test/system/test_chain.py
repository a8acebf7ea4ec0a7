"""The whole teleop chain as real processes, in both arm backends:

piper-sim-quest (script ``circle``) -> piper-quest-bridge -> piper-teleop -> piper-arm (emulate:=true)

The sim headset's motion is a pure function of time since connect (``ScriptedHeadset``; the hello
carries the headset ``mono`` of t = 0, and with no ``--mono-offset`` that is this host's
CLOCK_MONOTONIC), so the test predicts the controller pose at any instant and from it the target
the mapping should produce: ``e0.p + M (c(t) - c0)``, with e0 the first published target (the
measured pose latched at engage). Checked per backend:

* tracking over one full loop of the 4 cm circle: RMS of the measured ``/arm/eef_pose`` against
  (a) the teleop target at the same instant (arm servo error), (b) the script-predicted target at
  the same instant (end to end, including the one-euro filter's lag) and (c) the same with the best
  constant delay (shape error once the chain's latency is taken out). Figures are printed; the
  asserted bounds are loose (2-core CI box).
* stall: SIGSTOP the sim headset while engaged -> teleop stops publishing within its 0.25 s
  watchdog and the arm holds still; after SIGCONT nothing resumes while the grip stays closed.
* re-engage: a fresh headset connection (script restarts: grip opens, closes again) re-engages;
  the first new target is the measured pose and the arm does not jump.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from piper_recorder.graph.ports import free_port  # noqa: E402
from piper_recorder.quest.scripts import ScriptedHeadset  # noqa: E402
from piper_recorder.teleop.frames import FrameConfig, remap_matrix  # noqa: E402
from piper_recorder.teleop.rotations import angle_between, matrix_to_quat, quat_to_matrix  # noqa: E402

from support.proc import ProcGroup  # noqa: E402
from support.waiting import wait_for  # noqa: E402

STALL_AT = 6.5  # script time of the SIGSTOP (engaged, moving)
STALL_FOR = 1.5
TRACK = (2.8, 6.3)  # script-time window for the tracking figures: one full loop at full radius
REENGAGE_END = 2.0  # script time of the second connection to stop at (engage at about 1.2)
BOUNDS = {  # generous regression bounds (m); the measured figures are printed
    "position": {"arm": 0.008, "aligned": 0.008, "hold": 0.002},
    "impedance": {"arm": 0.025, "aligned": 0.025, "hold": 0.008},
}


@dataclass
class Sample:
    t: float  # script time of the header stamp
    mono: float  # arrival, monotonic
    p: np.ndarray
    q: np.ndarray


class Probe:
    def __init__(self):
        self.node = rclpy.create_node("chain_probe")
        self.eef: list[tuple[float, float, np.ndarray, np.ndarray]] = []  # (stamp s, mono, p, q)
        self.targets: list[tuple[float, float, np.ndarray, np.ndarray]] = []
        self.hellos: list[dict] = []
        self.status: dict | None = None
        n = self.node
        n.create_subscription(
            PoseStamped, "/arm/eef_pose", lambda m: self.eef.append(self._rec(m)), qos_profile_sensor_data
        )
        n.create_subscription(PoseStamped, "/arm/target_pose", lambda m: self.targets.append(self._rec(m)), 1000)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        n.create_subscription(String, "/quest/hello", lambda m: self.hellos.append(json.loads(m.data)), latched)
        n.create_subscription(String, "/teleop/status", lambda m: setattr(self, "status", json.loads(m.data)), 10)
        self.bridge: dict[str, str] = {}  # quest_bridge's diagnostic values
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.go_home = n.create_client(Trigger, "/arm/go_home")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(n)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    @staticmethod
    def _rec(m: PoseStamped):
        p, q = m.pose.position, m.pose.orientation
        return (
            m.header.stamp.sec + m.header.stamp.nanosec * 1e-9,
            time.monotonic(),
            np.array([p.x, p.y, p.z]),
            np.array([q.x, q.y, q.z, q.w]),
        )

    def _on_diagnostics(self, m: DiagnosticArray) -> None:
        for st in m.status:
            if st.name.startswith("quest_bridge"):
                self.bridge = {kv.key: kv.value for kv in st.values}

    def teleop_listens(self) -> bool:
        """quest_bridge's right-hand pose and grip streams have a matched subscriber (teleop's)."""
        return all(int(self.bridge.get(f"subscribers.right_{k}", "0")) >= 1 for k in ("pose", "joy"))

    def _spin(self):
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.executor.shutdown()
        self.node.destroy_node()


def segments(samples: list[Sample], gap: float = 0.1) -> list[list[Sample]]:
    out: list[list[Sample]] = []
    for s in samples:
        if out and s.t - out[-1][-1].t <= gap:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def interp(samples: list[Sample], t: np.ndarray) -> np.ndarray:
    ts = np.array([s.t for s in samples])
    ps = np.array([s.p for s in samples])
    return np.stack([np.interp(t, ts, ps[:, k]) for k in range(3)], axis=1)


def rms(err: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum(err**2, axis=1))))


@pytest.mark.timeout(80)
@pytest.mark.parametrize("backend", ["position", "impedance"])
def test_chain(backend, ros_domain, tmp_path):
    ros_domain.apply()
    rclpy.init()
    probe = Probe()
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            procs.start("piper-arm", "--ros-args", "-p", "emulate:=true", "-p", f"backend:={backend}")
            procs.start("piper-teleop")
            wait_for(lambda: probe.eef and probe.go_home.service_is_ready(), 30, "arm feedback", procs.logs)
            fut = probe.go_home.call_async(Trigger.Request())
            wait_for(fut.done, 10, "go_home reply", procs.logs)
            assert fut.result().success, fut.result().message

            def still():  # homed: the arm has stopped moving for 0.3 s
                recent = [p for _, m, p, _ in probe.eef if m > time.monotonic() - 0.3]
                return len(recent) > 5 and np.ptp(np.array(recent), axis=0).max() < 2e-4

            time.sleep(0.3)
            wait_for(still, 15, "arm at home", procs.logs)
            wait_for(lambda: probe.status is not None, 20, "teleop up", procs.logs)
            port = free_port()
            # the bridge first, and the headset once teleop has matched the bridge's streams, so that teleop
            # sees the grip close at script time 1.0-1.3 s: endpoint discovery took ~2.8 s now and then on a
            # loaded machine (Fast DDS's 3 s heartbeat), and the first grip teleop saw was already held
            procs.start(
                "piper-quest-bridge",
                "--ros-args",
                "-p",
                f"port:={port}",
                "-p",
                "reconnect_s:=0.1",
                "-p",
                "reconnect_max_s:=0.3",
            )
            wait_for(probe.teleop_listens, 20, "teleop subscribed to the bridge's right-hand streams", procs.logs)
            sim_args = ("piper-sim-quest", "--port", str(port), "--script", "circle")
            sim = procs.start(*sim_args)
            wait_for(lambda: probe.hellos, 20, "headset hello", procs.logs)
            mono0 = float(probe.hellos[-1]["mono"])
            wait_for(lambda: time.monotonic() - mono0 >= STALL_AT, 20, "stall time", procs.logs)
            sim.signal(19)  # SIGSTOP: the socket stays open, nothing arrives
            t_stop = time.monotonic()
            time.sleep(STALL_FOR)
            sim.signal(18)  # SIGCONT: frames flow again, the grip is still closed
            t_cont = time.monotonic()
            time.sleep(1.0)
            sim.signal(2)  # SIGINT: the headset goes away (the bridge sees the connection close)
            sim.popen.wait(10)
            sim2 = procs.start(*sim_args, name="piper-sim-quest-2")  # the operator puts the headset back on
            wait_for(lambda: len(probe.hellos) >= 2, 20, "second headset connection", procs.logs)
            mono1 = float(probe.hellos[-1]["mono"])
            wait_for(lambda: time.monotonic() - mono1 >= REENGAGE_END, 20, "re-engage phase", procs.logs)
            status = dict(probe.status)
            logs = procs.logs()
            del sim2
    finally:
        probe.close()
        rclpy.shutdown()

    # ---- bring everything onto the script clock ----------------------------------------------
    off = time.time() - time.monotonic()  # realtime - monotonic (same on every process of this host)
    to_t = lambda stamp: stamp - off - mono0  # noqa: E731
    # when teleop published a target / the arm measured a pose, on this host's monotonic clock: the
    # header stamp, not the arrival at this probe (which a loaded CI box delays)
    at = lambda s: s.t + mono0  # noqa: E731
    eef = [Sample(to_t(s), m, p, q) for s, m, p, q in probe.eef]
    targets = [Sample(to_t(s), m, p, q) for s, m, p, q in probe.targets]
    script = ScriptedHeadset("circle")
    M = remap_matrix(FrameConfig())

    for s in targets:  # everything teleop sent is finite and inside its limits
        assert np.all(np.isfinite(s.p)) and np.all(np.isfinite(s.q))
        assert np.all(s.p >= [0.05, -0.35, 0.03]) and np.all(s.p <= [0.55, 0.35, 0.50])
    assert status["unsafe_targets"] == 0
    segs = segments(targets, gap=0.3)  # a shorter gap in publishing is host starvation, not a release
    spans = [(round(g[0].t, 2), round(g[-1].t, 2)) for g in segs]
    covering = [g for g in segs if g[0].t < TRACK[0] and g[-1].t > TRACK[1]]
    assert covering, f"teleop was not engaged throughout {TRACK}: engaged spans {spans}\n{status}\n{logs}"
    seg1 = covering[0]
    later = [g for g in segs if at(g[0]) > t_cont + 1.0]
    assert later, f"no re-engage after the stall: engaged spans {spans}\n{logs}"
    seg2 = later[0]

    # ---- tracking ------------------------------------------------------------------------------
    e0 = seg1[0]
    c0 = script.right(e0.t)
    R_c0 = quat_to_matrix(np.array(c0.quat))

    def expected(t: float) -> tuple[np.ndarray, np.ndarray]:
        c = script.right(t)
        p = e0.p + M @ (np.array(c.pos) - np.array(c0.pos))
        R = M @ quat_to_matrix(np.array(c.quat)) @ R_c0.T @ M.T @ quat_to_matrix(e0.q)
        return p, matrix_to_quat(R)

    win = [s for s in eef if TRACK[0] <= s.t <= TRACK[1]]
    assert len(win) > 100, f"only {len(win)} eef samples in the tracking window"
    wt = np.array([s.t for s in win])
    wp = np.array([s.p for s in win])
    arm_rms = rms(wp - interp(seg1, wt))
    e2e = {}
    for d_ms in range(0, 401, 5):
        e2e[d_ms] = rms(wp - np.array([expected(t - d_ms / 1000.0)[0] for t in wt]))
    best = min(e2e, key=e2e.get)
    rot_err = np.degrees([angle_between(s.q, expected(s.t - best / 1000.0)[1]) for s in win])
    amplitude = float(np.ptp(np.array([expected(t)[0] for t in wt]), axis=0).max())
    print(
        f"\nCHAIN[{backend}] eef vs target RMS {arm_rms * 1e3:.2f} mm | eef vs script target RMS "
        f"{e2e[0] * 1e3:.2f} mm at zero lag, {e2e[best] * 1e3:.2f} mm at best lag {best} ms | rotation RMS "
        f"{float(np.sqrt(np.mean(rot_err**2))):.2f} deg | motion span {amplitude * 1e3:.0f} mm | "
        f"{len(win)} samples"
    )
    assert amplitude > 0.04  # the window really contains motion
    assert arm_rms < BOUNDS[backend]["arm"], logs
    assert e2e[best] < BOUNDS[backend]["aligned"], logs
    assert best <= 300, f"best lag {best} ms"

    # ---- stall: targets stop within the watchdog, the arm holds -------------------------------
    last_target = max(at(s) for s in targets if at(s) < t_cont)
    assert last_target - t_stop < 0.6, f"targets kept coming {last_target - t_stop:.3f} s into the stall"
    held = np.array([s.p for s in eef if t_stop + 0.7 <= at(s) <= t_cont])
    assert len(held) > 50
    last_p = max((s for s in targets if at(s) < t_cont), key=at).p
    off_target = float(np.linalg.norm(held - last_p, axis=1).max())
    drift = float(np.linalg.norm(held - held[0], axis=1).max())
    print(
        f"CHAIN[{backend}] stall: last target {1e3 * (last_target - t_stop):.0f} ms after SIGSTOP; while held "
        f"the arm stayed within {off_target * 1e3:.2f} mm of the last target (moved {drift * 1e3:.2f} mm)"
    )
    assert off_target < BOUNDS[backend]["hold"]
    resumed = [s for s in targets if t_cont <= at(s) < at(seg2[0])]
    assert not resumed, "targets resumed after SIGCONT although the grip never opened"

    # ---- re-engage on the second connection: no jump -------------------------------------------
    t2 = at(seg2[0]) - mono1  # script time of the re-engage on the second connection
    assert 0.9 < t2 < 1.8, f"re-engage at script time {t2:.2f}, engaged spans {spans}"
    before = [s for s in eef if at(s) <= at(seg2[0])]
    jump = float(np.linalg.norm(seg2[0].p - before[-1].p))
    window = [s for s in eef if at(seg2[0]) <= at(s) <= at(seg2[0]) + 0.3]
    assert len(window) > 10
    moved = float(np.linalg.norm(np.array([s.p for s in window]) - before[-1].p, axis=1).max())
    c_engage = np.array(script.right(t2).pos)
    hand_moved = max(float(np.linalg.norm(np.array(script.right(t2 + k * 0.01).pos) - c_engage)) for k in range(31))
    print(
        f"CHAIN[{backend}] re-engage: first target {jump * 1e3:.2f} mm from the measured pose; in the next "
        f"0.3 s the arm moved {moved * 1e3:.2f} mm while the controller moved {hand_moved * 1e3:.2f} mm"
    )
    assert jump < 0.002
    assert moved < hand_moved + 0.002

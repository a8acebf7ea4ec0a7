"""piper-sim-quest + piper-quest-bridge as real processes; an rclpy subscriber checks the ROS side.

Poses/joy/raw/hello arrive with finite values; pose stamps are capture times (checked against the
sim's true capture time of the same frame, identified by its position in the raw line), also after the
headset restarts with an unrelated clock; the hello is latched; diagnostics report the stream;
/quest/haptic reaches the headset. Measured here: stamps late by 2.28 ms against a simulated 2 ms
minimum one-way delay (+2 ms mean exponential jitter), before and after the restart.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time

import pytest

from support.proc import ProcGroup

MONO_OFFSET = -500.0  # the sim headset clock = host CLOCK_MONOTONIC - 500 s
MONO_OFFSET_2 = 3000.0  # after the simulated headset restart


def _wait_port(proc, timeout=10.0) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.output())
        if m:
            return int(m.group(1))
        if not proc.alive():
            break
        time.sleep(0.05)
    raise AssertionError(f"sim did not start:\n{proc.output()}")


def _stamp_errors(poses, raws, mono_offset: float, min_stamp_ns: int = 0):
    """(stamp - true capture time, arrival - stamp) in ms for right poses matched to raw lines by position.

    CLOCK_MONOTONIC is shared by all processes on this machine, so the true host time of a sim frame
    is (mono - mono_offset) + (realtime - monotonic). The circle repeats every 3.5 s, so a position
    can recur: the pose is matched to the nearest such frame (a gross error still shows as >= 25 ms).
    """
    mono_to_realtime_ns = time.time_ns() - time.monotonic_ns()
    truths_by_pos: dict[tuple, list[int]] = {}
    for r in raws:
        obj = json.loads(r)
        if "right" not in obj:
            continue
        truth = round((obj["mono"] - mono_offset) * 1e9) + mono_to_realtime_ns
        if truth < min_stamp_ns:
            continue  # a line of the previous headset session, delivered late
        truths_by_pos.setdefault(tuple(obj["right"]["pos"]), []).append(truth)
    for truths in truths_by_pos.values():
        truths.sort()
    errors_ms, late_ms = [], []
    for m, recv_ns in poses:
        p = m.pose.position
        truths = truths_by_pos.get((p.x, p.y, p.z), [])
        stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        if not truths or stamp < min_stamp_ns:
            continue
        if any(b - a < 10**9 for a, b in itertools.pairwise(truths)):
            continue  # the controller rests here (before the motion starts): not identifiable
        truth = min(truths, key=lambda t: abs(stamp - t))
        errors_ms.append((stamp - truth) / 1e6)
        late_ms.append((recv_ns - stamp) / 1e6)
    errors_ms.sort()
    return errors_ms, late_ms


def _check_stamps(errors_ms, late_ms, label):
    assert len(errors_ms) > 100, label
    median = errors_ms[len(errors_ms) // 2]
    print(
        f"\n{label}: capture-stamp error vs truth: median {median:.3f} ms, "
        f"min {errors_ms[0]:.3f}, max {errors_ms[-1]:.3f} (n={len(errors_ms)})"
    )
    # stamps are late by about the simulated 2 ms minimum delay; generous for a loaded CI box
    assert errors_ms[0] > -1.0 and errors_ms[-1] < 25.0 and median < 10.0, label
    assert min(late_ms) >= 0.0, label  # never stamped after it arrived


@pytest.mark.timeout(90)
def test_bridge_end_to_end(ros_domain, tmp_path):
    with ProcGroup(ros_domain.env(), tmp_path) as group:
        sim = group.start(
            "piper-sim-quest",
            "--port",
            "0",
            "--script",
            "circle",
            "--delay-ms",
            "2",
            "--jitter-ms",
            "2",
            "--mono-offset",
            str(MONO_OFFSET),
            "--duration",
            "40",
        )
        port = _wait_port(sim)
        group.start(
            "piper-quest-bridge",
            "--ros-args",
            "-p",
            f"port:={port}",
            "-p",
            "diagnostics_period_s:=0.5",
            "-p",
            "reconnect_s:=0.2",
            "-p",
            "reconnect_max_s:=0.5",
        )

        ros_domain.apply()
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Joy
        from std_msgs.msg import String

        rclpy.init()
        node = rclpy.create_node("quest_bridge_test")
        try:
            keys = ("head", "left", "right", "ljoy", "rjoy", "raw", "hello", "diag")
            got: dict[str, list] = {k: [] for k in keys}
            for dev in ("head", "left", "right"):
                node.create_subscription(
                    PoseStamped, f"/quest/{dev}/pose", lambda m, d=dev: got[d].append((m, time.time_ns())), 50
                )
            node.create_subscription(Joy, "/quest/left/joy", lambda m: got["ljoy"].append(m), 50)
            node.create_subscription(Joy, "/quest/right/joy", lambda m: got["rjoy"].append(m), 50)
            node.create_subscription(String, "/quest/raw", lambda m: got["raw"].append(m.data), 200)
            node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: got["diag"].append(m), 10)
            haptic_pub = node.create_publisher(String, "/quest/haptic", 10)

            def spin_until(pred, timeout):
                end = time.monotonic() + timeout
                while time.monotonic() < end and not pred():
                    rclpy.spin_once(node, timeout_sec=0.05)
                return pred()

            # the circle script moves from 1.3 s after connect on; collect ~2 s of motion
            assert spin_until(lambda: len(got["right"]) > 300, 20), group.logs()

            # hello is latched: a late subscriber still gets it
            latched = QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
            )
            node.create_subscription(String, "/quest/hello", lambda m: got["hello"].append(m.data), latched)
            assert spin_until(lambda: got["hello"], 5), group.logs()
            hello = json.loads(got["hello"][0])
            assert hello["app"] == "piper-sim-quest" and hello["script"] == "circle"

            # haptic forwarding (retry until discovery has matched the bridge's subscription)
            def haptic_seen():
                haptic_pub.publish(String(data=json.dumps({"hand": "right", "amp": 0.5, "ms": 30})))
                rclpy.spin_once(node, timeout_sec=0.1)
                return '"cmd":"haptic","hand":"right","amp":0.5,"ms":30' in sim.output()

            assert spin_until(haptic_seen, 8), group.logs()

            def diag_ok():
                return any(s.level == DiagnosticStatus.OK for a in got["diag"] for s in a.status)

            assert spin_until(diag_ok, 5), group.logs()
            first = {k: list(v) for k, v in got.items()}

            # the headset restarts with an unrelated clock: the bridge reconnects and re-maps
            sim.stop()
            restart_ns = time.time_ns()
            for v in got.values():
                v.clear()
            sim2 = group.start(
                "piper-sim-quest",
                "--port",
                str(port),
                "--script",
                "circle",
                "--delay-ms",
                "2",
                "--jitter-ms",
                "2",
                "--mono-offset",
                str(MONO_OFFSET_2),
                "--duration",
                "40",
                name="piper-sim-quest-2",
            )
            _wait_port(sim2)
            assert spin_until(lambda: len(got["right"]) > 300, 20), group.logs()
        finally:
            node.destroy_node()
            rclpy.shutdown()

    # ---- values: finite, well-formed -------------------------------------------------------
    for dev in ("head", "left", "right"):
        assert first[dev], dev
        for m, _ in first[dev]:
            p, q = m.pose.position, m.pose.orientation
            vals = (p.x, p.y, p.z, q.x, q.y, q.z, q.w)
            assert all(math.isfinite(v) for v in vals)
            assert abs(math.sqrt(q.x**2 + q.y**2 + q.z**2 + q.w**2) - 1) < 1e-9
            assert m.header.frame_id == "quest_stage"
    for joy in first["ljoy"] + first["rjoy"]:
        assert len(joy.axes) == 4 and len(joy.buttons) == 4 and all(math.isfinite(a) for a in joy.axes)
    assert max(j.axes[1] for j in first["rjoy"]) == 1.0  # the circle script holds the grip
    assert all(json.loads(r) for r in first["raw"])

    # ---- stamps: capture time, before and after the headset restart --------------------------
    _check_stamps(*_stamp_errors(first["right"], first["raw"], MONO_OFFSET), "first connection")
    _check_stamps(*_stamp_errors(got["right"], got["raw"], MONO_OFFSET_2, restart_ns), "after restart")


def test_bridge_rejects_bad_parameter(ros_domain, tmp_path):
    with ProcGroup(ros_domain.env(), tmp_path) as group:
        bridge = group.start("piper-quest-bridge", "--ros-args", "-p", "silence_timeout_s:=-1.0")
        bridge.popen.wait(20)
        assert bridge.popen.returncode == 2
        assert "silence_timeout_s" in bridge.output()


class _GarbageHeadset:
    """A test-owned headset server interleaving valid frames with bad lines of known reasons."""

    BAD = (b'{"mono": NaN}', b"garbage", b"\xff\xfe", b'{"heartbeat": Infinity}', b"x" * 70_000)

    def __init__(self):
        import socket
        import threading

        from piper_recorder.quest.scripts import ScriptedHeadset

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.headset = ScriptedHeadset("circle")
        self.stop = threading.Event()
        self.sent_bad = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b'{"hello": {"app": "garbage-test"}}\n')
                t0 = time.monotonic()
                i = 0
                try:
                    while not self.stop.wait(0.01):
                        t = time.monotonic() - t0
                        frame = self.headset.sample(t, mono=time.monotonic(), frame=i)
                        bad = self.BAD[i % len(self.BAD)]
                        conn.sendall(json.dumps(frame).encode() + b"\n" + bad + b"\n")
                        self.sent_bad += 1
                        i += 1
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.mark.timeout(60)
def test_bridge_drops_bad_lines_and_reports_them(ros_domain, tmp_path):
    server = _GarbageHeadset()
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as group:
            group.start(
                "piper-quest-bridge", "--ros-args", "-p", f"port:={server.port}", "-p", "diagnostics_period_s:=0.3"
            )
            ros_domain.apply()
            import rclpy
            from diagnostic_msgs.msg import DiagnosticArray
            from geometry_msgs.msg import PoseStamped
            from std_msgs.msg import String

            rclpy.init()
            node = rclpy.create_node("quest_bridge_garbage_test")
            poses, raws, diags = [], [], []
            try:
                node.create_subscription(PoseStamped, "/quest/right/pose", poses.append, 50)
                node.create_subscription(String, "/quest/raw", lambda m: raws.append(m.data), 200)
                node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)

                def enough():
                    if len(poses) < 100 or not diags:
                        return False
                    values = {kv.key: kv.value for kv in diags[-1].status[0].values}
                    return all(
                        int(values.get(f"rejected.{r}", 0)) >= 5
                        for r in ("non_finite", "bad_json", "bad_utf8", "too_long")
                    )

                end = time.monotonic() + 20
                while time.monotonic() < end and not enough():
                    rclpy.spin_once(node, timeout_sec=0.05)
                assert enough(), group.logs()
            finally:
                node.destroy_node()
                rclpy.shutdown()
    finally:
        server.close()
    for m in poses:
        p, q = m.pose.position, m.pose.orientation
        assert all(math.isfinite(v) for v in (p.x, p.y, p.z, q.x, q.y, q.z, q.w))
    for r in raws:  # only accepted lines are republished
        obj = json.loads(r)
        assert "mono" in obj or "hello" in obj
    values = {kv.key: kv.value for kv in diags[-1].status[0].values}
    assert int(values["rejected_total"]) >= 20 and values["state"] == "connected"


@pytest.mark.timeout(90)
def test_bridge_forwards_panel_commands_and_replays_the_tint_on_reconnect(ros_domain, tmp_path):
    """/quest/command: checked, forwarded to the headset; the latest tint and panel placement are sent
    again when a restarted headset connects (it shows the recording tint without waiting for a change).
    """
    ros_domain.apply()
    import rclpy
    from std_msgs.msg import String

    report1, report2 = tmp_path / "h1.json", tmp_path / "h2.json"
    rclpy.init()
    node = rclpy.create_node("command_probe")
    pub = node.create_publisher(String, "/quest/command", 10)
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            sim = procs.start(
                "piper-sim-quest", "--port", "0", "--script", "idle", "--no-buttons", "--report", str(report1)
            )
            port = _wait_port(sim)
            procs.start("piper-quest-bridge", "--ros-args", "-p", f"port:={port}", "-p", "reconnect_s:=0.2")

            def commands(path):
                try:
                    return json.loads(path.read_text()).get("commands", {})
                except (OSError, ValueError):
                    return {}

            def colors(path):
                try:
                    return json.loads(path.read_text()).get("colors", [])
                except (OSError, ValueError):
                    return []

            red = {"cmd": "color", "r": 0.6, "g": 0.02, "b": 0.02, "a": 0.25}
            place = {"cmd": "panel", "cam": 1, "x": 0.3, "y": 1.2, "z": -0.9, "width": 0.5, "yaw": 10.0}
            end = time.monotonic() + 30
            while not colors(report1) and time.monotonic() < end:  # until the bridge is matched and connected
                for cmd in ({"cmd": "color", "r": 2.0, "g": 0, "b": 0, "a": 0}, {"cmd": "anchor_clear"}, red, place):
                    pub.publish(String(data=json.dumps(cmd)))  # the first two are refused, never forwarded
                time.sleep(0.5)
            got = colors(report1)
            assert got and all({k: c[k] for k in "rgba"} == {k: red[k] for k in "rgba"} for c in got), got
            assert set(commands(report1)) == {"color", "panel"}, commands(report1)

            sim.stop()  # the headset app restarts: a new connection, nobody publishes anything new
            sim2 = procs.start(
                "piper-sim-quest", "--port", str(port), "--script", "idle", "--no-buttons", "--report", str(report2)
            )
            end = time.monotonic() + 30
            while commands(report2).get("panel", 0) < 1 and time.monotonic() < end:
                time.sleep(0.2)
            assert sim2.alive()
            assert [{k: c[k] for k in "rgba"} for c in colors(report2)] == [{k: red[k] for k in "rgba"}]
            assert commands(report2) == {"color": 1, "panel": 1}, commands(report2)
    finally:
        node.destroy_node()
        rclpy.shutdown()

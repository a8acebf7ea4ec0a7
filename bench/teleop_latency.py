"""Teleop latency: from a headset frame leaving the simulated headset to the CAN command frame it causes.

Chain (each arrow crosses a process or a bus):
  piper-sim-quest (process, TCP) -> piper-quest-bridge (process, DDS) -> piper-teleop (process, DDS)
  -> piper_arm node (in this process) -> piper_sdk -> python-can virtual bus -> CAN-level emulator

How a headset frame is tied to the CAN frame it causes (no field is smuggled through the messages):
* The sim headset replays a generated stream (``--replay``): grip closed, right controller still, half a
  step to the left ``PRIME_S`` before the first step (a still hand sends nothing to measure from), then
  every ``--step-s`` a 1 cm step to the right or left (alternating). Steps before teleop's first target
  (the clutch engages once the freshly started processes have discovered each other) are counted apart.
  A step lives in one known headset frame n, written with ``mono = n / 90`` s. The sim sends each replayed frame at its
  capture time ``start + mono`` on the host CLOCK_MONOTONIC, and its hello carries ``start``
  (``mono`` in the hello), so step frame n is due to leave at ``hello.mono + n / 90``. The sim
  thread waking late only makes the measured latency larger (conservative).
* The arm node runs in this process with the emulator on a private virtual CAN channel, and a
  second python-can bus on that channel receives every frame the SDK sends, stamped by python-can
  at send time (``time.time()``, converted to the monotonic clock); they are read after the run. A step to robot
  -y/+y (XR +x/-x) shows up as the first pose command after the step frame that moved by more than
  ``THRESH`` in the step's direction: EndPoseCtrl 0x152 Y (position backend) or the joint-1
  reference of JointMitCtrl 0x15A (impedance). Steps alternate, so the filter's tail of the
  previous step moves the other way and cannot be mistaken for the response.
* The split at teleop's output uses the header stamp of the first ``/arm/target_pose`` that moved
  (teleop stamps it when it publishes), so this process's own scheduling does not bias it. This
  process subscribes to nothing else at a high rate, to keep the arm node's process as it runs alone.

Prints n, p50, p90, p99, max per stage. The machine is shared: note the load average printed.

``--panels N``: the same run twice, in one invocation, alternately without and with the
headset's camera panels: N sim cameras (640x480, 30 fps) run in both, and in the second run
``piper-quest-video`` streams them at ``--panel-fps`` (15) plus the HUD to the sim headset's video
channel. Prints the p99 ratio (target: within 10 %), the CPU the panel stream costs per camera
(quest_video's user+system time over the run, /proc) and the panel latency from capture (the image
stamp) to the frame's last byte handed to the socket, p50/p99 (quest_video's ``~/status``).
``--arms left,right``: the two-arm graph (teleop with ``arms``): both controllers gripped, each step moves both
hands the same way in the same frame (the tick's worst case: both arms' targets at once), and each arm node runs
in this process under its namespace on its own virtual channel with its own tap (python-can's virtual bus lives
in one process). Both arm nodes share this process's GIL, where the graph gives each arm a process of its own,
so the figures are an upper bound. Prints every stage per arm, and headset -> CAN p99 per arm.
``--client web``: the same run alternately through the native path (piper-sim-quest -> TCP ->
bridge) and the web path (a WebSocket client sending the page's frames -> piper-quest-web -> TCP -> bridge),
``--rounds`` pairs in one invocation, side by side: page -> CAN frame p50/p99 for both and the p99
difference (target: within 5 ms). The web client sends the same replayed stream over a WebSocket as
``quest/web/app.js`` does, one text message per frame, each at its capture time; the browser itself is
not in the loop: on the robot it runs on the headset, not on the host's cores, and a headless Chromium
here would only add its own CPU load to the measured host.
Usage: .venv/bin/python bench/teleop_latency.py [--backend position|impedance] [--steps 50] [--step-s 0.3]
       [--arm-executor events|single|multi] [--panels 2 [--panel-fps 15] [--rounds 2]] [--client web]
       [--arms left,right]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import can
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
from piper_recorder.graph.ports import free_port
from piper_recorder.graph.rosenv import lease_domain
from piper_recorder.names import TARGET_POSE, arm_topic, parse_arms
from piper_recorder.quest.scripts import LEFT_HOME, RIGHT_HOME, ScriptedHeadset

from support.proc import ProcGroup
from support.wsclient import WebSocketClient

RATE = 90.0
STEP_M = 0.01  # XR x step (m) -> robot y step of the same size
LEAD_S = 3.5  # still controller, grip closed, before the first step (teleop engages 0.3-3 s into the stream)
# Half a step (to the side the first step leaves from) this long before the first step: a still gripped hand
# sends no target and the arm no command, so without it the first step had nothing to be measured from
PRIME_S = 1.0
THRESH = {"position": 0.0002, "impedance": 0.0004}  # m in y / rad of joint 1: well above the tail, below
# the first filtered tick of a 1 cm step (~0.7 mm)


def make_replay(path: Path, steps: int, step_s: float, two_hands: bool = False) -> list[int]:
    """Write the replay stream; return the frame numbers at which the steps happen (both hands' with ``two_hands``)."""
    idle = ScriptedHeadset("idle", buttons=False)
    # (i % 9) extra frames: the 90 Hz frames then land at 9 different phases of teleop's 100 Hz tick
    # (and the arm's 200 Hz one) instead of always the same, so the quantization is sampled fairly.
    step_frames = [int(round((LEAD_S + i * step_s) * RATE)) + i % 9 for i in range(steps)]
    n_frames = step_frames[-1] + int(RATE * 1.0)
    prime_frame = int(round((LEAD_S - PRIME_S) * RATE))
    with open(path, "w") as fh:
        k = 0
        for n in range(n_frames):
            while k < len(step_frames) and step_frames[k] <= n:
                k += 1
            # still, then primed half a step to the left (-x), then each step to the other side
            offset = 0.0 if n < prime_frame else (STEP_M / 2 if k % 2 == 1 else -STEP_M / 2)
            f = idle.sample(n / RATE, frame=n, rate_hz=RATE)
            f["right"]["pos"] = [RIGHT_HOME[0] + offset, RIGHT_HOME[1], RIGHT_HOME[2]]
            f["right"]["squeeze"] = 1.0 if n >= int(0.3 * RATE) else 0.0
            if two_hands:  # the left hand steps with the right: each arm's base faces the same way
                f["left"]["pos"] = [LEFT_HOME[0] + offset, LEFT_HOME[1], LEFT_HOME[2]]
                f["left"]["squeeze"] = f["right"]["squeeze"]
            fh.write(json.dumps(f) + "\n")
    return step_frames


def stats(name: str, xs: list[float]) -> str:
    if not xs:
        return f"{name:<41} n=0"
    a = np.array(xs) * 1e3
    return (
        f"{name:<41} n={len(a):3d}  p50 {np.percentile(a, 50):6.2f} ms  p90 {np.percentile(a, 90):6.2f} ms  "
        f"p99 {np.percentile(a, 99):6.2f} ms  max {a.max():6.2f} ms"
    )


class CanTap:
    """A second bus on the arm's virtual channel. python-can stamps each frame when it is sent and
    queues a copy for every other bus on the channel, so the frames are read only after the run:
    no reader thread competes with the arm node for this process's GIL while it is measured.
    """

    def __init__(self, channel: str, backend: str):
        self.bus = can.Bus(interface="virtual", channel=channel, receive_own_messages=False)
        self.backend = backend
        self.frames: list[tuple[float, float]] = []  # (monotonic send time, y in m | joint-1 ref in rad)

    def drain(self) -> None:
        from piper_recorder.piper.emulator import decode_mit

        off = time.time() - time.monotonic()
        while (msg := self.bus.recv(0.0)) is not None:
            if self.backend == "position" and msg.arbitration_id == 0x152:
                _x, y = struct.unpack(">ii", bytes(msg.data[:8]))
                self.frames.append((msg.timestamp - off, y * 1e-6))  # 0.001 mm -> m
            elif self.backend == "impedance" and msg.arbitration_id == 0x15A:
                cmd = decode_mit(bytes(msg.data))
                if cmd is not None:
                    self.frames.append((msg.timestamp - off, cmd.pos))
        self.bus.shutdown()


def first_response(
    events: list[tuple[float, float]], t0: float, direction: float, thresh: float, horizon: float
) -> float | None:
    """Time of the first event after t0 that moved past ``thresh`` in ``direction`` from the value at t0."""
    before = [v for t, v in events if t < t0]
    if not before:
        return None
    base = before[-1]
    for t, v in events:
        if t0 <= t <= t0 + horizon and (v - base) * direction > thresh:
            return t
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    from piper_recorder.nodes.plumbing.executors import EXECUTORS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("position", "impedance"), default="position")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--step-s", type=float, default=0.3)
    ap.add_argument(
        "--arm-executor",
        choices=EXECUTORS,
        default="events",
        help="executor for the in-process arm node (events = piper-arm's, see nodes/plumbing/executors.py)",
    )
    ap.add_argument("--panels", type=int, default=0, help="compare without / with N camera panels streaming")
    ap.add_argument("--panel-fps", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2, help="with --panels / --client web: alternating pairs of runs")
    ap.add_argument(
        "--client",
        choices=("native", "web"),
        default="native",
        help="web: compare the native path with the WebXR page's path, side by side",
    )
    ap.add_argument("--arms", default="", help="left,right: the two-arm graph, each arm measured on its own")
    args = ap.parse_args()
    try:
        args.arms = parse_arms(args.arms)
    except ValueError as e:
        ap.error(str(e))
    if args.client == "web":
        return compare_clients(args)
    if not args.panels:
        res = run(args, cameras=0, panels=False)
        return 0 if res is not None else 1
    runs: dict[bool, list[dict]] = {False: [], True: []}
    failed = 0
    for _ in range(args.rounds):
        for panels in (False, True):
            res = run(args, cameras=args.panels, panels=panels)
            if res is None:
                failed += 1  # e.g. the emulated arm faulted on an overloaded machine: reported, not hidden
                continue
            runs[panels].append(res)
    if failed:
        print(f"\n{failed} run(s) failed (see above) and are left out")
    if not runs[False] or not runs[True]:
        print("not enough runs to compare")
        return 1
    base = np.concatenate([r["can_lat"] for r in runs[False]]) * 1e3
    with_p = np.concatenate([r["can_lat"] for r in runs[True]]) * 1e3
    print(f"\n== panels: {args.panels} cameras at {args.panel_fps:g} fps, {args.rounds} alternating rounds ==")
    for name, a in (("without panels", base), ("with panels", with_p)):
        print(
            f"{name:<16} headset -> CAN  n={a.size}  p50 {np.percentile(a, 50):.2f} ms  "
            f"p99 {np.percentile(a, 99):.2f} ms"
        )
    ratio = np.percentile(with_p, 99) / np.percentile(base, 99)
    print(f"p99 with / without: {ratio:.3f} (target <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'})")
    cpu = [r["video_cpu_s"] / r["video_wall_s"] / args.panels for r in runs[True]]
    frames = [r["video_status"]["cameras"] for r in runs[True]]
    sent = sum(c["sent"] for f in frames for c in f.values())
    cpu_total = sum(r["video_cpu_s"] for r in runs[True])
    print(
        f"panel stream CPU per camera: {np.mean(cpu) * 100:.1f} % of a core "
        f"({cpu_total / max(sent, 1) * 1e3:.1f} ms CPU per panel sent, incl. receiving the 30 fps images and the HUD)"
    )
    for cam in frames[-1]:
        lat = frames[-1][cam]["latency_ms"]
        enc = frames[-1][cam]["encode_ms"]
        print(
            f"panel latency {cam}: capture -> bytes on the socket p50 {lat.get('p50')} ms  p99 {lat.get('p99')} ms "
            f"(n={lat.get('n')}); encode p50 {enc.get('p50')} ms"
        )
    return 0


def compare_clients(args) -> int:
    runs: dict[str, list[dict]] = {"native": [], "web": []}
    failed = 0
    for _ in range(args.rounds):
        for client in ("native", "web"):
            print(f"\n-- {client} client --")
            res = run(args, cameras=0, panels=False, client=client)
            if res is None:
                failed += 1
                continue
            runs[client].append(res)
    if failed:
        print(f"\n{failed} run(s) failed (see above) and are left out")
    if not runs["native"] or not runs["web"]:
        print("not enough runs to compare")
        return 1
    lat = {c: np.concatenate([r["can_lat"] for r in rs]) * 1e3 for c, rs in runs.items()}
    load = os.getloadavg()
    print(
        f"\n== native vs web, {args.rounds} alternating rounds, {args.backend} backend; load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs =="
    )
    for c, a in lat.items():
        print(
            f"{c:<7} headset/page -> CAN  n={a.size}  p50 {np.percentile(a, 50):.2f} ms  "
            f"p99 {np.percentile(a, 99):.2f} ms"
        )
    diff = np.percentile(lat["web"], 99) - np.percentile(lat["native"], 99)
    print(f"p99 web - native: {diff:+.2f} ms (target <= 5 ms: {'met' if diff <= 5.0 else 'NOT met'})")
    return 0


def web_client(port: int, replay: Path, go: Path) -> int:
    """The page's side, as a process of its own (as the simulated headset is; in this process its sends
    would contend for the GIL with the arm node being measured): the replayed frames over a WebSocket to
    piper-quest-web, one text message each as app.js sends them, each at its capture time (host
    CLOCK_MONOTONIC = ``start`` + the frame's mono). A first hello (mono -1) lets the bridge connect; once
    ``go`` exists, a fresh hello carries the stream's t = 0 (``mono``) and the frames follow.
    """
    ws = WebSocketClient(port)
    if ws.status != 101:
        print(f"piper-quest-web refused the WebSocket ({ws.status})", flush=True)
        return 1
    frames = [json.loads(line) for line in replay.read_text().splitlines()]
    ws.send(json.dumps({"hello": {"app": "teleop_latency", "client": "web", "mono": -1.0}}).encode())
    beat = time.monotonic()
    while not go.exists():  # a heartbeat a second meanwhile, as the page sends (the relay drops a silent page)
        time.sleep(0.01)
        if time.monotonic() - beat >= 1.0:
            ws.send(b'{"heartbeat": 0, "state": "NO_SESSION"}')
            beat = time.monotonic()
    start = time.monotonic() + 0.2
    ws.send(json.dumps({"hello": {"app": "teleop_latency", "client": "web", "mono": start}}).encode())
    for f in frames:
        due = start + float(f["mono"])
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        f["mono"] = f["t"] = due
        ws.send(json.dumps(f, separators=(",", ":")).encode())
    time.sleep(0.5)
    ws.close()
    return 0


def run(args, cameras: int, panels: bool, client: str = "native") -> dict | None:
    from piper_recorder.nodes.plumbing.executors import executor_for, make_executor, spin_until

    with lease_domain() as lease, tempfile.TemporaryDirectory(prefix="teleop_latency_") as tmp:
        lease.apply()
        import rclpy
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        from piper_recorder.nodes.piper_arm import PiperArmNode

        replay = Path(tmp) / "steps.quest.jsonl"
        step_frames = make_replay(replay, args.steps, args.step_s, two_hands=bool(args.arms))
        rclpy.init(args=["bench", "--ros-args", "-p", "emulate:=true", "-p", f"backend:={args.backend}"])
        arm_names: tuple[str | None, ...] = args.arms or (None,)
        arms: dict[str | None, PiperArmNode] = {}
        taps: dict[str | None, CanTap] = {}
        for name in arm_names:  # each arm on its own virtual channel, under its namespace with several
            channel = f"lat_{uuid.uuid4().hex[:8]}"
            arms[name] = PiperArmNode(
                namespace=f"/{name}" if name else None, cli_args=["--ros-args", "-p", f"can_channel:={channel}"]
            )
            taps[name] = CanTap(channel, args.backend)  # after the node: only frames from the homing on are queued
        probe = rclpy.create_node("latency_probe")
        targets: dict[str | None, list[tuple[float, float]]] = {a: [] for a in arm_names}  # (publish time, robot y)
        hellos: list[dict] = []
        teleop_up = threading.Event()
        off = time.time() - time.monotonic()
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        probe.create_subscription(String, "/quest/hello", lambda m: hellos.append(json.loads(m.data)), latched)
        for name in arm_names:
            probe.create_subscription(
                PoseStamped,
                arm_topic(name, TARGET_POSE),
                lambda m, out=targets[name]: out.append(
                    (m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 - off, m.pose.position.y)
                ),
                200,
            )
        probe.create_subscription(String, "/teleop/status", lambda m: teleop_up.set(), 10)
        video_status: list[dict] = []
        probe.create_subscription(String, "/quest_video/status", lambda m: video_status.append(json.loads(m.data)), 10)
        video_cpu = [0.0, 0.0]  # CPU s, wall s of quest_video over the measured steps
        args.arm_executor = executor_for(arms[arm_names[0]], args.arm_executor)  # what piper-arm's run_node spins
        executor = make_executor(args.arm_executor)
        for arm in arms.values():
            executor.add_node(arm)
        executor.add_node(probe)
        stop_spin = threading.Event()
        spinner = threading.Thread(target=spin_until, args=(executor, stop_spin), daemon=True)
        spinner.start()
        try:
            for arm in arms.values():
                arm.ctl.go_home()
            while any(arm.ctl.homing() for arm in arms.values()):
                time.sleep(0.05)
            port, vport = free_port(), free_port()
            names = ["cam_front", "cam_wrist", "cam_side"][:cameras]
            with ProcGroup(lease.env(), Path(tmp) / "logs") as procs:
                if names:  # one process, bulk work at nice 5, as in the sim graph (piper_launch.bulk_nice)
                    procs.start(
                        "nice",
                        "-n",
                        "5",
                        str(Path(sys.executable).parent / "piper-sim-cameras"),
                        "--ros-args",
                        "-p",
                        f"cameras:=[{', '.join(names)}]",
                        *(["-p", f"arms:=[{', '.join(args.arms)}]"] if args.arms else []),
                        name="sim_cameras",
                    )
                procs.start(
                    "piper-teleop", *(["--ros-args", "-p", f"arms:=[{','.join(args.arms)}]"] if args.arms else [])
                )
                if not teleop_up.wait(30):
                    print(procs.logs())
                    return None
                video = ["--video-port", str(vport)] if cameras else []
                web = None
                if client == "web":
                    wport = free_port()
                    relay = procs.start(
                        "piper-quest-web",
                        "--port",
                        str(wport),
                        "--bridge-port",
                        str(port),
                        "--video-port",
                        str(vport) if cameras else "-1",
                    )
                    deadline = time.monotonic() + 10
                    while "page at" not in relay.output() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    go = Path(tmp) / "go"
                    web = procs.start(
                        sys.executable, __file__, "--web-client", str(wport), str(replay), str(go), name="web_client"
                    )
                else:
                    sim = procs.start("piper-sim-quest", "--port", str(port), "--replay", str(replay), *video)
                    deadline = time.monotonic() + 10
                    while "listening" not in sim.output() and time.monotonic() < deadline:
                        time.sleep(0.05)
                if panels:
                    qv = procs.start(
                        "nice",
                        "-n",
                        "5",
                        str(Path(sys.executable).parent / "piper-quest-video"),
                        "--ros-args",
                        "-p",
                        f"port:={vport}",
                        "-p",
                        f"fps:={args.panel_fps}",
                        "-p",
                        f"cameras:=[{','.join(names)}]",
                        name="quest_video",
                    )
                procs.start("piper-quest-bridge", "--ros-args", "-p", f"port:={port}")
                deadline = time.monotonic() + 20
                while not hellos and time.monotonic() < deadline:
                    time.sleep(0.05)
                if web is not None and hellos:  # the bridge is connected: now the stream, from its t = 0
                    relay_cpu0, relay_w0 = cpu_seconds(relay.popen.pid), time.monotonic()
                    go.touch()
                    deadline = time.monotonic() + 5
                    while hellos[-1].get("mono", -1.0) < 0 and time.monotonic() < deadline:
                        time.sleep(0.02)
                if panels:
                    pid = qv.popen.pid
                    c0, w0 = cpu_seconds(pid), time.monotonic()
                time.sleep(LEAD_S + args.steps * args.step_s + 0.5 if hellos else 0.0)
                if panels:
                    video_cpu[:] = [cpu_seconds(pid) - c0, time.monotonic() - w0]
                    deadline = time.monotonic() + 3
                    n = len(video_status)
                    while len(video_status) == n and time.monotonic() < deadline:
                        time.sleep(0.05)
                logs = procs.logs()
                if web is not None and hellos:
                    relay_cpu = (cpu_seconds(relay.popen.pid) - relay_cpu0) / (time.monotonic() - relay_w0)
                    print(f"piper-quest-web CPU while relaying {RATE:g} frames/s: {relay_cpu * 100:.1f} % of a core")
        finally:
            for arm in arms.values():
                arm.on_shutdown()
            for tap in taps.values():
                tap.drain()
            stop_spin.set()
            spinner.join(2)
            executor.shutdown(timeout_sec=2)
            for arm in arms.values():
                arm.destroy_node()
            probe.destroy_node()
            rclpy.shutdown()

    if not hellos:
        print("no headset hello\n" + logs)
        return None
    start = float(hellos[-1]["mono"])
    thresh = THRESH[args.backend]
    measured: dict[str | None, tuple[list[float], list[float], list[float], list[str]]] = {}
    early: dict[str | None, int] = {}
    for name in arm_names:
        can_lat, target_lat, arm_lat, missed = [], [], [], []
        # teleop engages once the hand, the joys and the arm's feedback have all reached it (DDS discovery
        # of the freshly started processes: 0.3-3 s here); a step before its first target is start-up
        engaged = targets[name][0][0] if targets[name] else math.inf
        for i, fn in enumerate(step_frames):
            t0 = start + fn / RATE  # when step frame fn was due to leave the sim headset
            if t0 < engaged:
                early[name] = early.get(name, 0) + 1
                continue
            xr_dir = 1.0 if i % 2 == 0 else -1.0  # +x (right) first, then alternating
            y_dir = -xr_dir  # robot y = -xr x (each arm's base faces forward); joint 1 turns the same way as y
            t_can = first_response(taps[name].frames, t0, y_dir, thresh, args.step_s)
            t_tgt = first_response(targets[name], t0, y_dir, 0.0002, args.step_s)
            if t_can is None:
                missed.append(str(i))
                continue
            can_lat.append(t_can - t0)
            if t_tgt is not None:
                target_lat.append(t_tgt - t0)
                arm_lat.append(t_can - t_tgt)
        measured[name] = (can_lat, target_lat, arm_lat, missed)
    load = os.getloadavg()
    if cameras:
        print(f"\n-- {cameras} sim cameras, panels {'streaming' if panels else 'off'} --")
    print(
        f"teleop latency ({args.backend} backend, {args.arm_executor} arm executor"
        f"{', arms ' + ','.join(args.arms) if args.arms else ''}), {len(step_frames)} steps of "
        f"{STEP_M * 100:.0f} cm every {args.step_s} s; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    for name, (can_lat, target_lat, arm_lat, missed) in measured.items():
        who = f"{name}: " if name else ""
        print(stats(f"{who}headset frame -> teleop target", target_lat))
        print(stats(f"{who}teleop target -> CAN frame", arm_lat))
        print(stats(f"{who}headset frame -> CAN frame", can_lat))
        if early.get(name):
            print(f"{who}steps before the clutch engaged (not measured): {early[name]}")
        if missed:
            print(f"{who}steps without a detected CAN response: {', '.join(missed)}")
        if len(can_lat) < len(step_frames) // 2:
            print(f"{who}too few responses measured\n" + logs)
            return None
    for name, (can_lat, *_rest) in measured.items():
        p99 = float(np.percentile(can_lat, 99)) * 1e3
        who = f" ({name} arm)" if name else ""
        print(f"target p99 < 20 ms{who}: {'met' if p99 < 20 else 'NOT met'} ({p99:.1f} ms)")
    if panels:
        if not video_status or not video_status[-1].get("cameras"):
            print("no quest_video status\n" + logs)
            return None
        st = video_status[-1]
        print(
            f"quest_video: sent {st['sent']} dropped {st['dropped']}; CPU {video_cpu[0]:.2f} s in {video_cpu[1]:.1f} s"
        )
    return {
        "can_lat": np.concatenate([np.array(m[0]) for m in measured.values()]),
        "video_cpu_s": video_cpu[0],
        "video_wall_s": video_cpu[1],
        "video_status": video_status[-1] if video_status else {},
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--web-client"]:
        sys.exit(web_client(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])))
    sys.exit(main())

"""The policy node in the simulated graph, as separate processes (#13 proof).

A /predict server written from the published schema (test/support/policy_http_server.py, its own process)
drives the emulated arm through the policy node while both recorders record; the rollout validates
(piper-validate) and its episodes.jsonl names the policy. In the same graph: the binding check
refuses a root recorded with other gains and lists them; the operator's grip takes over mid-chunk
and only ~/resume hands back; a camera that stops, the server killed mid-run and a server slower
than ``timeout_s`` each pause the policy with the reason in ~/status while the arm holds. Every target the arm
got is finite and inside teleop's envelope. Cameras run at 320x240 for speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.ports import free_port
from piper_recorder.teleop.limits import LimitsConfig

from support.lerobot_fixtures import small_root
from support.paths import ROOT, SUPPORT_DIR

SIM = ROOT / "config" / "sim.yaml"
W, H = 320, 240
pytestmark = pytest.mark.timeout(420)


def test_launch_argument_policy_starts_the_policy_node(tmp_path):
    plan = plan_graph("sim", SIM, [], tmp_path, policy="hold", policy_root="/data/train")
    assert "policy" in plan.node_names and plan.config["policy"] == {"policy": "hold", "root": "/data/train"}
    assert "policy" not in plan_graph("sim", SIM, [], tmp_path / "b").node_names


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_launch_files_start_the_policy_node_with_policy_argument(stub_launch, name):
    from support.launch_stub import Node, graph

    nodes = {
        a.kwargs["name"]: a
        for a in graph(name, policy="http://10.0.0.2:8000", policy_root="/data/train")
        if isinstance(a, Node)
    }
    assert nodes["policy"].kwargs["executable"] == "policy"
    assert nodes["policy"].kwargs["parameters"][1] == {"policy": "http://10.0.0.2:8000", "root": "/data/train"}
    assert nodes["lerobot_recorder"].kwargs["parameters"][1]["actor_topic"] == "/policy/actor"  # rows say who acted
    plain = {a.kwargs["name"]: a for a in graph(name) if isinstance(a, Node)}
    assert "policy" not in plain
    assert all("actor_topic" not in p for p in plain["lerobot_recorder"].kwargs["parameters"] if isinstance(p, dict))


def training_root(path: Path, session: dict | None) -> Path:
    """A small root whose meta says: cam_front + cam_wrist at WxH, 30 fps, this provenance."""
    root = small_root(path)
    info = json.loads((root / "meta" / "info.json").read_text())
    for cam in ("cam_front", "cam_wrist"):
        info["features"][f"observation.images.{cam}"]["shape"] = [H, W, 3]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    if session is not None:
        (root / "meta" / "collection_meta.json").write_text(json.dumps(session))
    return root


def session_from(arm: dict, fps: float = 30.0) -> dict:
    """A session record as the recorders write it (spec: Provenance), from an /arm/provenance JSON."""
    return {
        "control": {"backend": arm["backend"], "impedance": {k: arm[k] for k in ("kp", "kd", "t_ff", "gravity_ff")}},
        "arm": {"firmware": arm["firmware"]},
        "recording": {"fps": fps},
    }


class Watch:
    """Every /arm/target_pose, the policy's status and actor, the arm's provenance, on the session's node."""

    def __init__(self, node) -> None:
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.lock = threading.Condition()
        self.targets: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.status: dict = {}
        self.actor = ""
        self.arm: dict | None = None
        node.create_subscription(PoseStamped, "/arm/target_pose", self._target, QoSProfile(depth=200))
        node.create_subscription(String, "/policy/status", lambda m: self._set("status", json.loads(m.data)), 10)
        node.create_subscription(String, "/policy/actor", lambda m: self._set("actor", m.data), latched)
        self.recorder: dict = {}  # the LeRobot recorder's status
        node.create_subscription(
            String, "/lerobot_recorder/status", lambda m: self._set("recorder", json.loads(m.data)), 10
        )
        node.create_subscription(String, "/arm/provenance", lambda m: self._set("arm", json.loads(m.data)), latched)
        self.commanded = 0
        node.create_subscription(JointState, "/arm/commanded_gripper", self._commanded, QoSProfile(depth=50))

    def _commanded(self, _m) -> None:
        with self.lock:
            self.commanded += 1
            self.lock.notify_all()

    def _set(self, name: str, value) -> None:
        with self.lock:
            setattr(self, name, value)
            self.lock.notify_all()

    def _target(self, m) -> None:
        p, q = m.pose.position, m.pose.orientation
        with self.lock:
            stamp = m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec  # when the policy published it
            self.targets.append((stamp, np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])))

    def wait(self, pred, timeout: float, what: str):
        with self.lock:
            if not self.lock.wait_for(pred, timeout):
                raise AssertionError(f"timed out waiting for {what}; status {self.status}")

    def mark(self) -> int:
        with self.lock:
            return len(self.targets)


def call(s, srv: str, timeout: float = 20.0) -> tuple[bool, str]:
    from std_srvs.srv import Trigger

    cli = s._client("policy", srv)
    assert cli.wait_for_service(timeout_sec=timeout), f"/policy/{srv} not up"
    fut = cli.call_async(Trigger.Request())
    assert s._wait(fut, timeout), f"/policy/{srv}: no answer"
    return bool(fut.result().success), str(fut.result().message)


def start_server(port: int, delay: float = 0.0) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, str(SUPPORT_DIR / "policy_http_server.py"), str(port), "--delay", str(delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert "listening" in (p.stdout.readline() if p.stdout else "")
    return p


def stop_server(p: subprocess.Popen) -> None:
    p.kill()
    p.wait(10)


def grip_until_takeover(s, w: Watch) -> None:
    """The operator closes the right grip on the headset's joy topic until the policy's actor says
    ``operator`` (the takeover), as the bridge would publish it while the hand stays closed.
    """
    from sensor_msgs.msg import Joy

    pub = s._node.create_publisher(Joy, "/quest/right/joy", 10)
    grip = Joy(axes=[0.0, 1.0, 0.0, 0.0], buttons=[0, 0, 0, 0])
    deadline = time.monotonic() + 20
    while w.actor != "operator" and time.monotonic() < deadline:
        pub.publish(grip)
        time.sleep(0.05)
    w.wait(lambda: w.actor == "operator", 1, "takeover")


def check_envelope(targets: list, breaks: list[int], cfg: LimitsConfig, dt: float) -> None:
    """Every target finite, unit and in the box; consecutive policy targets within 2x the speed caps
    (the caps hold per control tick; DDS delivery jitter bunches ticks), except across the marks
    where another source (takeover) or a re-anchor (resume) starts a new run.
    """
    lo, hi = (np.array(c) for c in cfg.clamp_box)
    for _, p, q in targets:
        assert np.all(np.isfinite(p)) and np.all(np.isfinite(q)) and abs(np.linalg.norm(q) - 1) < 1e-6
        assert np.all(p >= lo - 1e-9) and np.all(p <= hi + 1e-9), p
    for i in range(1, len(targets)):
        if any(b - 2 <= i <= b + 2 for b in breaks):
            continue
        step = float(np.linalg.norm(targets[i][1] - targets[i - 1][1]))
        assert step <= cfg.max_linear_speed * dt * 1.0001 + 1e-9, (i, step)


@pytest.mark.ros
def test_policy_drives_the_sim_arm_safely_and_the_rollout_names_it(tmp_path):
    from piper_recorder.graph.sim_session import SimSession, size_overrides

    train = training_root(tmp_path / "train", None)
    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}"
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.sim_quest.script=idle",
        f"policy.policy={url}",
        f"policy.root={train}",
        "policy.timeout_s=3.0",
        "policy.camera_stale_s=2.0",
        # The shared test machine runs at load 30-45 on 2 cores: there the emulated arm's feedback lags
        # 1-3 s (up to 20 s seen) and a first query took 1.6 s, so the arm bound is off and the query
        # timeout loose here (both are covered on a fake clock in test_policy_core); the camera bound
        # is what this test trips on purpose, and the slow server answers in 6 s > timeout_s.
        "policy.arm_stale_s=60.0",
    ]
    out = tmp_path / "out"
    try:
        with SimSession(out, sets=sets) as s:
            w = Watch(s._node)
            w.wait(lambda: w.arm is not None, 30, "/arm/provenance")
            w.wait(lambda: w.status.get("state") == "idle", 30, "policy status")
            wait_inputs(w)
            # binding: a root recorded with other gains is refused, naming the key and both values
            wrong = {**w.arm, "kp": [v * 2 for v in w.arm["kp"]]}
            (train / "meta" / "collection_meta.json").write_text(json.dumps(session_from(wrong)))
            ok, msg = call(s, "start")
            assert not ok and "control.impedance.kp" in msg and json.dumps(wrong["kp"]) in msg, msg
            (train / "meta" / "collection_meta.json").write_text(json.dumps(session_from(w.arm)))
            ok, msg = call(s, "start")
            assert ok, msg
            w.wait(lambda: w.actor == "policy" and w.status.get("chunks", 0) > 3, 30, "chunks")
            w.wait(lambda: w.commanded > 10, 90, "the arm taking the policy's targets")
            # its inputs' delivery: frames received per camera against its input rate
            w.wait(
                lambda: all(
                    (v or {}).get("stamp_fps") for v in (w.status.get("images_received") or {"": None}).values()
                ),
                30,
                "images_received in the policy status",
            )
            assert w.status["images_required"]["min_fps"] > 0 and w.status["images_received"], w.status

            # a rollout recorded by both recorders
            s.start_episode()
            moved = s.wait_motion(0.004, timeout=40)
            time.sleep(2.0)
            rec = s.stop_episode()
            assert moved >= 0.004  # the measured EEF followed the policy (4 mm of a 2 cm circle: a loaded machine)
            st = w.status
            assert st["state"] == "running" and st["query_latency_ms"]["p50"] is not None, st

            breaks = []
            # takeover mid-chunk: the operator's grip; only ~/resume hands back
            breaks.append(w.mark())
            grip_until_takeover(s, w)
            w.wait(lambda: w.status.get("state") == "takeover" and w.status.get("takeovers") == 1, 5, "takeover status")
            time.sleep(1.0)
            assert w.status["state"] == "takeover"  # the grip opened long ago: still the operator's
            breaks.append(w.mark())
            ok, msg = call(s, "resume")
            assert ok, msg
            w.wait(lambda: w.status.get("state") == "running" and w.actor == "policy", 5, "resume")

            # a camera that stops: paused with the reason, the arm holds
            s.set_parameter("cam_wrist", "pause_s", 6.0)
            s.set_parameter("cam_wrist", "pause_at_s", 0.0)
            wait_pause(w, 0, "stale camera pause")
            assert "stale camera: cam_wrist" in w.status["reason"], w.status
            held = time.time_ns()  # the pause status is in: every target published from now is held
            time.sleep(1.0)
            assert_held(w, held)
            w.wait(lambda: (w.status.get("input_age_s") or {}).get("cam_wrist", 9) < 1.0, 15, "camera back")
            breaks.append(w.mark())
            ok, msg = call(s, "resume")
            assert ok, msg

            # the server killed mid-run
            w.wait(lambda: w.status.get("state") == "running", 5, "running again")
            stop_server(server)
            wait_pause(w, 1, "pause on server death")
            assert w.status["reason"].startswith(("server error", "query timeout")), w.status
            held = time.time_ns()  # the pause status is in: every target published from now is held
            time.sleep(1.0)
            assert_held(w, held)

            # a server slower than timeout_s
            server = start_server(port, delay=6.0)
            breaks.append(w.mark())
            ok, msg = call(s, "resume")
            assert ok, msg
            wait_pause(w, 2, "pause on a slow server")
            assert w.status["reason"].startswith("query timeout"), w.status
            held = time.time_ns()  # the pause status is in: every target published from now is held
            time.sleep(1.0)
            assert_held(w, held)
            ok, msg = call(s, "stop")
            assert ok and w.status.get("query_timeouts", 0) >= 1, (ok, msg, w.status)

            dt = 1.0 / 30.0
            check_envelope(w.targets, breaks, LimitsConfig(), dt)
    finally:
        stop_server(server)

    # the rollout is valid and names the policy
    lerobot = out / "lerobot"
    p = subprocess.run(
        [str(Path(sys.executable).parent / "piper-validate"), str(lerobot)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(
        [str(Path(sys.executable).parent / "piper-validate"), str(out / "rgbd.hdf5")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    episodes = [json.loads(x) for x in (lerobot / "meta" / "episodes.jsonl").read_text().splitlines() if x.strip()]
    pol = episodes[rec.index]["policy"]
    assert pol["backend"] == "http" and pol["url"] == url and pol["content_hash"] == "test-server-0001"
    assert pol["chunk"]["horizon"] == 30 and pol["training_root"] == str(train)
    import h5py  # the RGB-D episode carries the same record in its provenance attribute

    with h5py.File(out / "rgbd.hdf5", "r") as f:
        demo = f[f"episodes/demo_{rec.events['rgbd_recorder']['episode_index']}"]
        prov = json.loads(demo.attrs["provenance"])
    assert prov["policy"]["url"] == url and prov["policy"]["content_hash"] == "test-server-0001"


def wait_inputs(w: Watch) -> None:
    """The policy node has arm feedback and a frame of every trained camera (else ~/start refuses
    for that, before any binding check: a race on a loaded machine).
    """
    w.wait(
        lambda: bool(w.status.get("input_age_s")) and None not in w.status["input_age_s"].values(),
        60,
        "the policy node's first arm and camera samples",
    )


def wait_pause(w: Watch, before: int, what: str) -> None:
    """The policy's ``before + 1``-th pause (a fresh status, not the previous pause's)."""
    w.wait(lambda: w.status.get("state") == "paused" and w.status.get("pauses") == before + 1, 20, what)


def assert_held(w: Watch, since_ns: int) -> None:
    """Targets keep coming at control rate and all equal: the arm holds. Only targets the policy
    published after ``since_ns`` (a time after the pause status arrived) count: one published before
    the pause may reach this node after that status on a loaded machine (another topic, no order).
    """
    with w.lock:
        got = [t for t in w.targets if t[0] > since_ns]
    assert len(got) >= 15, f"only {len(got)} targets in 1 s while paused"
    assert all(np.allclose(p, got[0][1], atol=1e-9) for _, p, _ in got), "the held target moved"


@pytest.mark.ros
def test_rollout_rows_say_who_acted(tmp_path):
    """A hold policy drives the sim arm while the recorders record one episode; the operator's grip
    takes over in the middle. The launcher switched the LeRobot recorder's ``actor_topic`` on with the
    policy node, so each row's complementary_info.actor (read with pyarrow) is the policy's code (1)
    before the takeover and the operator's (2) after it, changing once.
    """
    import pyarrow.parquet as pq

    from piper_recorder.graph.sim_session import SimSession, size_overrides

    train = training_root(tmp_path / "train", None)
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.sim_quest.script=idle",
        "policy.policy=hold",
        f"policy.root={train}",
        "policy.camera_stale_s=5.0",
        "policy.arm_stale_s=60.0",
    ]  # loose bounds: a loaded 2-core machine
    out = tmp_path / "out"
    with SimSession(out, sets=sets) as s:
        assert s.plan.config["lerobot_recorder"]["actor_topic"] == "/policy/actor"
        w = Watch(s._node)
        w.wait(lambda: w.arm is not None, 30, "/arm/provenance")
        (train / "meta" / "collection_meta.json").write_text(json.dumps(session_from(w.arm)))
        w.wait(lambda: w.status.get("state") == "idle", 30, "policy status")
        wait_inputs(w)
        ok, msg = call(s, "start")
        assert ok, msg
        w.wait(lambda: w.actor == "policy", 30, "the policy acting")
        # the recorder hears the actor on its own subscription, which may come later than the test's
        w.wait(lambda: w.recorder.get("actor") == "policy", 30, "the recorder hearing the policy act")
        s.start_episode()
        time.sleep(2.0)
        grip_until_takeover(s, w)
        time.sleep(2.0)
        rec = s.stop_episode()
        call(s, "stop")

    lerobot = out / "lerobot"
    p = subprocess.run(
        [str(Path(sys.executable).parent / "piper-validate"), str(lerobot)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stdout + p.stderr
    t = pq.read_table(lerobot / "data" / "chunk-000" / f"episode_{rec.index:06d}.parquet")
    codes = t.column("complementary_info.actor").to_numpy().tolist()
    change = [i for i in range(1, len(codes)) if codes[i] != codes[i - 1]]
    assert codes[0] == 1.0 and codes[-1] == 2.0 and len(change) == 1, codes
    assert change[0] >= 15 and len(codes) - change[0] >= 15, (change, len(codes))  # ~2 s either side
    episodes = [json.loads(x) for x in (lerobot / "meta" / "episodes.jsonl").read_text().splitlines() if x.strip()]
    assert episodes[rec.index]["policy"]["backend"] == "hold"


@pytest.mark.ros
def test_start_is_refused_while_the_headset_grip_is_held(tmp_path):
    """The simulated headset holds the right grip closed (script ``circle``, engaged from 1.3 s on, as
    quest_bridge publishes it every frame). ~/start is refused naming the operator (the grip, once the node
    has heard it) and the policy never publishes a target (its tick counter stays 0). The old node accepted
    it and published until the next joy message took over.
    """
    from std_msgs.msg import String

    from piper_recorder.graph.sim_session import SimSession, size_overrides

    train = training_root(tmp_path / "train", None)
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.sim_quest.script=circle",
        "policy.policy=hold",
        f"policy.root={train}",
        "policy.camera_stale_s=5.0",
        "policy.arm_stale_s=60.0",
    ]  # loose bounds: a loaded 2-core machine
    with SimSession(tmp_path / "out", sets=sets) as s:
        w = Watch(s._node)
        teleop: dict = {}
        s._node.create_subscription(String, "/teleop/status", lambda m: teleop.update(json.loads(m.data)), 10)
        w.wait(lambda: w.arm is not None, 30, "/arm/provenance")
        (train / "meta" / "collection_meta.json").write_text(json.dumps(session_from(w.arm)))
        w.wait(lambda: w.status.get("state") == "idle", 30, "policy status")
        wait_inputs(w)
        deadline = time.monotonic() + 30
        while not teleop.get("engaged") and time.monotonic() < deadline:  # the grip is closed by now
            time.sleep(0.1)
        assert teleop.get("engaged"), teleop
        # Teleop's engaged status and the grip's joy reach the policy node on two topics with no order between
        # them: right after teleop engaged, a start may be refused on teleop's word before the node has taken the
        # joy that closed the grip (a suite saw it). Either names the operator; half a second later (45 joy
        # messages) the node has heard the grip itself, and says so.
        grip = "start refused: the operator's grip is held on /quest/right/joy"
        said = []
        for _ in range(3):
            ok, msg = call(s, "start")
            assert not ok and (grip in msg or "start refused: teleop reports its clutch engaged" in msg), msg
            said.append(msg)
            time.sleep(0.5)
        assert grip in said[-1], said
        time.sleep(0.5)
        assert w.status["state"] == "idle" and w.status["ticks"] == 0 and w.status["operator_refusals"] == 3, w.status
        assert w.actor in ("", "none")


@pytest.mark.ros
def test_a_policy_started_mid_episode_is_named_with_when_it_acted(tmp_path):
    """#21 item 10 in the graph: the episode starts before /policy/start; the operator takes over and
    ~/resume hands back. episodes.jsonl names the policy (the old recorder named none: no policy was
    active at the episode's start) with both stretches it drove the arm, on the rows' time axis. With
    the headset idle nothing commands the arm before the policy, so the episode's rows (which need
    /arm/commanded_gripper) begin with the policy's first targets: its first stretch starts at row 0.
    """
    from piper_recorder.graph.sim_session import SimSession, size_overrides

    train = training_root(tmp_path / "train", None)
    sets = size_overrides(SIM, f"{W}x{H}") + [
        "piper_launch.sim_quest.script=idle",
        "policy.policy=hold",
        f"policy.root={train}",
        "policy.camera_stale_s=5.0",
        "policy.arm_stale_s=60.0",
    ]  # loose bounds: a loaded 2-core machine
    out = tmp_path / "out"
    with SimSession(out, sets=sets) as s:
        w = Watch(s._node)
        w.wait(lambda: w.arm is not None, 30, "/arm/provenance")
        (train / "meta" / "collection_meta.json").write_text(json.dumps(session_from(w.arm)))
        w.wait(lambda: w.status.get("state") == "idle", 30, "policy status")
        wait_inputs(w)
        s.start_episode()
        time.sleep(1.5)  # the episode waits for /arm/commanded_gripper: its rows start with the policy's
        ok, msg = call(s, "start")
        assert ok, msg
        w.wait(lambda: w.actor == "policy", 30, "the policy acting")
        time.sleep(1.5)
        grip_until_takeover(s, w)
        time.sleep(1.0)  # the headset's own frames say the grip is open again
        ok, msg = call(s, "resume")
        assert ok, msg
        w.wait(lambda: w.actor == "policy", 10, "resumed")
        time.sleep(1.5)
        rec = s.stop_episode()
        call(s, "stop")

    episodes = [
        json.loads(x) for x in (out / "lerobot" / "meta" / "episodes.jsonl").read_text().splitlines() if x.strip()
    ]
    ep = episodes[rec.index]
    assert ep["policy"]["backend"] == "hold" and ep["policy"]["training_root"] == str(train), ep.get("policy")
    (pol,) = ep["policies"]
    assert pol["backend"] == "hold" and len(pol["acted_s"]) == 2, pol
    (a0, a1), (b0, b1) = pol["acted_s"]
    assert 0.0 <= a0 < a1 - 0.5 < b0 - 0.5 < b1 - 1.0 <= ep["length"] / 30, (pol["acted_s"], ep["length"])
    assert pol["first_s"] == a0 and pol["last_s"] == b1

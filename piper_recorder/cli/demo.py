"""piper-demo --out DIR [--episodes 3] [--seconds 10]: record through the simulated ROS 2 graph, validate.

Starts the simulated graph from config/sim.yaml as separate processes (piper_recorder.launcher):
simulated headset (its built-in ``continuous`` script: clutch engaged throughout, figure-eight with a
yaw swing, moving trigger, no buttons), quest_bridge, teleop, piper_arm (CAN emulator), the sim
cameras and both recorders, in a private ROS domain on loopback. When arm feedback, every camera and
both recorders are up, it records N episodes through the recorders' services (start both, wait S
seconds, stop both, wait for both "saved" events), stops the graph, validates DIR/lerobot
(piper-validate rules; lerobot-doctor --fail-on warn when installed: any warning fails the demo) and
DIR/rgbd.hdf5, and prints a summary. Exit status 0 only if every step and every check passed.

``SimSession`` is the reusable part (end-to-end tests and bench/graph_capacity.py use it).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piper_recorder.launcher import RECORDERS, Graph, LaunchError, config_path, find_script, plan_graph
from piper_recorder.lerobot.fsutil import read_jsonl
from piper_recorder.rosenv import lease_domain


SETTLE_S = 3.0  # after start-up (imports, discovery, encoder set-up) before the first episode
CONTINUOUS = "continuous"  # the sim headset's never-pausing script (piper_recorder.quest.scripts)


class DemoError(RuntimeError):
    pass


@dataclass
class EpisodeResult:
    index: int
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # recorder -> "saved" event
    stop_to_saved_s: dict[str, float] = field(default_factory=dict)


class SimSession:
    """The simulated graph plus an rclpy client node that drives and watches the recorders."""

    def __init__(self, out: Path, config: str | Path | None = None, sets: Iterable[str] = (),
                 log_dir: Path | None = None, cameras: str = "", echo: bool = False):
        self.out = Path(out)
        self.log_dir = Path(log_dir) if log_dir else self.out / "logs"
        sets = [f"lerobot_recorder.root={self.out / 'lerobot'}", f"rgbd_recorder.path={self.out / 'rgbd.hdf5'}",
                "piper_launch.sim_quest.port=0", f"piper_launch.sim_quest.script={CONTINUOUS}", *sets]
        self.plan = plan_graph("sim", config or config_path("sim"), sets, self.log_dir, cameras=cameras)
        self.lease = lease_domain()
        self.graph = Graph(self.plan, self.lease.env(), self.log_dir, echo=echo)
        self.events: list[dict[str, Any]] = []
        self.status: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._ctx = self._node = self._executor = self._spinner = None
        self._clients: dict[str, Any] = {}

    @property
    def cameras(self) -> list[str]:
        return self.plan.cameras

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> "SimSession":
        self.out.mkdir(parents=True, exist_ok=True)
        self.lease.apply()
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        self.graph.start()
        self._ctx = rclpy.Context()
        rclpy.init(context=self._ctx)
        self._node = rclpy.create_node("piper_demo", context=self._ctx)
        self._node.create_subscription(String, "/episode_events", self._on_event,
                                       QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                                  durability=DurabilityPolicy.VOLATILE))
        for rec in RECORDERS:
            self._node.create_subscription(String, f"/{rec}/status", lambda m, r=rec: self._on_status(r, m), 10)
        self._executor = MultiThreadedExecutor(num_threads=2, context=self._ctx)
        self._executor.add_node(self._node)
        self._spinner = threading.Thread(target=self._spin, name="demo-executor", daemon=True)
        self._spinner.start()
        try:
            self.graph.wait_nodes(self._node, timeout)
            self._wait_inputs(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def _on_event(self, msg) -> None:
        with self._cond:
            self.events.append(json.loads(msg.data))
            self._cond.notify_all()

    def _on_status(self, rec: str, msg) -> None:
        with self._cond:
            self.status[rec] = json.loads(msg.data)
            self._cond.notify_all()

    def _first_message(self, msg_type, topic: str, timeout: float) -> Any:
        """The next message on ``topic`` (best-effort QoS: matches reliable and best-effort publishers)."""
        from rclpy.qos import qos_profile_sensor_data

        got: list[Any] = []
        ev = threading.Event()

        def cb(m):
            if not got:
                got.append(m)
                ev.set()

        sub = self._node.create_subscription(msg_type, topic, cb, qos_profile_sensor_data)
        try:
            if not ev.wait(timeout):
                raise DemoError(f"no message on {topic} within {timeout:.0f}s\n{self.graph.logs()}")
        finally:
            self._node.destroy_subscription(sub)  # images are large: stop receiving at once
        return got[0]

    def _wait_inputs(self, timeout: float) -> None:
        """Arm feedback, a frame from every camera, both recorders' services and status."""
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import Image

        deadline = time.monotonic() + timeout
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        self._first_message(PoseStamped, "/arm/eef_pose", left())
        for cam in self.cameras:
            self._first_message(Image, f"/{cam}/color/image_raw", left())
        for rec in RECORDERS:
            for srv in ("start_episode", "stop_episode"):
                self._client(rec, srv).wait_for_service(timeout_sec=left()) or self._fail(f"/{rec}/{srv} not up")
        with self._cond:
            if not self._cond.wait_for(lambda: all(r in self.status for r in RECORDERS), left()):
                self._fail(f"no status from {[r for r in RECORDERS if r not in self.status]}")

    def wait_motion(self, min_m: float = 0.005, timeout: float = 30.0) -> float:
        """Wait until the EEF has moved ``min_m`` (teleop engaged, the arm follows); returns the motion seen."""
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import qos_profile_sensor_data

        points: list[tuple[float, float, float]] = []

        def cb(m) -> None:
            p = m.pose.position
            with self._cond:
                points.append((p.x, p.y, p.z))
                self._cond.notify_all()

        def moved() -> float:
            if not points:
                return 0.0
            a = points[0]
            return max(sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 for b in points[-50:])

        sub = self._node.create_subscription(PoseStamped, "/arm/eef_pose", cb, qos_profile_sensor_data)
        try:
            with self._cond:
                self._cond.wait_for(lambda: moved() >= min_m, timeout)
                return moved()
        finally:
            self._node.destroy_subscription(sub)

    def _fail(self, what: str) -> None:
        raise DemoError(f"{what}\n{self.graph.logs()}")

    def stop(self) -> dict[str, int | None]:
        if self._node is not None:
            self._executor.shutdown(timeout_sec=2.0)
            self._node.destroy_node()
            import rclpy

            rclpy.shutdown(context=self._ctx)
            self._node = None
        codes = self.graph.stop()
        self.lease.release()
        return codes

    def __enter__(self) -> "SimSession":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- services -----------------------------------------------------------------------------
    def _client(self, rec: str, srv: str):
        from std_srvs.srv import Trigger

        key = f"/{rec}/{srv}"
        if key not in self._clients:
            self._clients[key] = self._node.create_client(Trigger, key)
        return self._clients[key]

    @staticmethod
    def _wait(fut, timeout: float) -> bool:
        done = threading.Event()
        fut.add_done_callback(lambda _f: done.set())
        return done.wait(timeout)

    def call_all(self, srv: str, timeout: float = 30.0) -> dict[str, tuple[bool, str]]:
        """Call ``srv`` on every recorder at once (one after the other, the second recorder's episode
        would start or end a whole save later than the first's) and wait for every answer."""
        from std_srvs.srv import Trigger

        futs = {rec: self._client(rec, srv).call_async(Trigger.Request()) for rec in RECORDERS}
        out = {}
        for rec, fut in futs.items():
            if not self._wait(fut, timeout):
                raise DemoError(f"/{rec}/{srv}: no answer within {timeout:.0f}s\n{self.graph.logs()}")
            res = fut.result()
            out[rec] = (bool(res.success), str(res.message))
        return out

    def set_parameter(self, node: str, name: str, value: Any, timeout: float = 10.0) -> None:
        """Set one parameter on a running node (e.g. a camera's fault injection)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        cli = self._node.create_client(SetParameters, f"/{node}/set_parameters")
        if not cli.wait_for_service(timeout_sec=timeout):
            raise DemoError(f"/{node}/set_parameters not available")
        req = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        try:
            fut = cli.call_async(req)
            if not self._wait(fut, timeout) or not fut.result().results[0].successful:
                raise DemoError(f"setting {node}.{name}={value!r} failed")
        finally:
            self._node.destroy_client(cli)

    def start_episode(self) -> None:
        for rec, (ok, msg) in self.call_all("start_episode").items():
            if not ok:
                self._fail(f"{rec} start_episode refused: {msg}")

    def stop_episode(self, timeout: float = 120.0) -> EpisodeResult:
        """Stop both recorders and wait for their "saved" events; returns the events and latencies."""
        with self._cond:
            seen = len(self.events)
        t_stop = dict.fromkeys(RECORDERS, time.monotonic())
        for rec, (ok, msg) in self.call_all("stop_episode", timeout=timeout).items():
            if not ok:
                self._fail(f"{rec} stop_episode refused: {msg}")
        result = EpisodeResult(index=-1)

        def saved() -> bool:
            for ev in self.events[seen:]:
                rec = ev.get("recorder")
                if rec in RECORDERS and rec not in result.events:
                    if ev.get("event") == "saved":
                        result.events[rec] = ev
                        result.stop_to_saved_s[rec] = time.monotonic() - t_stop[rec]
                    elif ev.get("event") == "discarded":
                        raise DemoError(f"{rec} discarded the episode: {ev.get('reason')}")
            return all(r in result.events for r in RECORDERS)

        with self._cond:
            if not self._cond.wait_for(saved, timeout):
                self._fail(f"no saved event from {[r for r in RECORDERS if r not in result.events]}")
        result.index = int(result.events[RECORDERS[0]]["episode_index"])
        return result

    def record(self, seconds: float) -> EpisodeResult:
        self.start_episode()
        time.sleep(seconds)
        return self.stop_episode()


# ---- checks and summary ---------------------------------------------------------------------------
def lerobot_doctor(root: Path) -> tuple[bool | None, list[str]]:
    """``lerobot-doctor check ROOT --ci --fail-on warn`` (issue 7: a warning fails the demo) ->
    (passed, its WARN/FAIL messages as "check: message"); (None, [why]) if it is not installed."""
    try:
        exe = find_script("lerobot-doctor")
    except LaunchError:
        return None, ["lerobot-doctor not installed"]
    p = subprocess.run([exe, "check", str(root), "--ci", "--fail-on", "warn"], capture_output=True, text=True,
                       timeout=600)
    text = (p.stdout + p.stderr).strip()
    try:
        report = json.loads(text[text.index("{"):text.rindex("}") + 1])
        found = [f"{c['name']}: {m['severity']} {m['message']}" for c in report["checks"]
                 for m in c.get("messages", []) if m.get("severity") != "PASS"]
    except (ValueError, KeyError, TypeError):
        found = [text[-4000:]]
    return p.returncode == 0, (found or [text[-4000:]]) if p.returncode else []


def validate_outputs(out: Path) -> dict[str, list[str]]:
    """Problems per dataset ([] = valid): our validators plus lerobot-doctor when installed."""
    from piper_recorder.lerobot.validate import validate_root
    from rgbd_writer.validate import validate_file

    problems = {"lerobot": validate_root(out / "lerobot"), "rgbd": validate_file(str(out / "rgbd.hdf5"))}
    ok, found = lerobot_doctor(out / "lerobot")
    if ok is not None:
        problems["lerobot-doctor"] = found
    return problems


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def summarize(out: Path) -> dict[str, Any]:
    """Episodes, rows, video frames per camera, drops and sizes, read back from the files."""
    import av
    import h5py

    from piper_recorder.lerobot.layout import video_file

    root = out / "lerobot"
    episodes = read_jsonl(root / "meta" / "episodes.jsonl")
    info = json.loads((root / "meta" / "info.json").read_text())
    video_frames: dict[str, list[int]] = {}
    for ep in episodes:
        idx = ep["episode_index"]
        for key, feat in info["features"].items():
            if feat.get("dtype") != "video":
                continue
            with av.open(str(video_file(root, info, idx, key))) as c:
                video_frames.setdefault(key.split(".")[-1], []).append(sum(1 for p in c.demux(video=0) if p.size))
    drops = {k: sum(sum(ep.get(k, {}).values()) for ep in episodes)
             for k in ("frames_dropped", "frames_late", "frames_stale", "frames_repeated")}
    with h5py.File(out / "rgbd.hdf5", "r") as f:
        rgbd = {"episodes": int(f.attrs["total_episodes"]), "transitions": int(f.attrs["total_transitions"])}
    return {"episodes": len(episodes), "rows": [ep["length"] for ep in episodes], "video_frames": video_frames,
            "drops": drops, "lerobot_bytes": _du(root), "rgbd": rgbd, "rgbd_bytes": _du(out / "rgbd.hdf5")}


def size_overrides(config: str | Path, size: str) -> list[str]:
    """``WxH`` -> --set items giving every camera and both recorders that image size."""
    from piper_recorder.launcher import LAUNCH_SECTION
    from piper_recorder.params_file import read_params_file

    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size expects WxH, got {size!r}") from None
    cams = read_params_file(config).get(LAUNCH_SECTION, {}).get("cameras", [])
    sets = [f"{cam}.{k}={v}" for cam in cams for k, v in (("width", w), ("height", h))]
    return sets + [f"{rec}.camera_{k}={v}" for rec in RECORDERS for k, v in (("width", w), ("height", h))]


def _clear(out: Path) -> None:
    """The demo owns DIR/lerobot, DIR/rgbd.hdf5 and DIR/logs: start each run from scratch."""
    for p in (out / "lerobot", out / "logs"):
        if p.exists():
            shutil.rmtree(p)
    for p in out.glob("rgbd.hdf5*"):
        p.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="piper-demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory (DIR/lerobot, DIR/rgbd.hdf5)")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each episode")
    ap.add_argument("--config", help="parameter file (default: config/sim.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE", help="parameter override")
    ap.add_argument("--cameras", default="", help="comma-separated subset of the configured cameras")
    ap.add_argument("--size", metavar="WxH", help="camera size for every camera and both recorders (default: config)")
    ap.add_argument("--verbose", action="store_true", help="echo every node's output")
    args = ap.parse_args(argv)
    if args.episodes < 1 or args.seconds <= 0:
        ap.error("--episodes must be >= 1 and --seconds > 0")
    out = args.out.resolve()
    if args.size:
        try:
            args.set = size_overrides(args.config or config_path("sim"), args.size) + args.set
        except ValueError as exc:
            ap.error(str(exc))
    _clear(out)
    t0 = time.monotonic()
    results: list[EpisodeResult] = []
    try:
        session = SimSession(out, args.config, args.set, cameras=args.cameras, echo=args.verbose)
        print(f"piper-demo: starting the simulated graph ({', '.join(session.plan.node_names)}); "
              f"logs in {session.log_dir}", flush=True)
        with session:
            moved = session.wait_motion()
            print(f"piper-demo: graph ready after {time.monotonic() - t0:.1f}s; arm moved {moved * 1000:.0f} mm "
                  "under teleop", flush=True)
            time.sleep(SETTLE_S)
            for i in range(args.episodes):
                r = session.record(args.seconds)
                results.append(r)
                rows = {rec: ev.get("rows") for rec, ev in r.events.items()}
                lat = ", ".join(f"{k} {v:.2f}s" for k, v in r.stop_to_saved_s.items())
                print(f"piper-demo: episode {i + 1}/{args.episodes} saved: rows {rows}; stop->saved {lat}",
                      flush=True)
        codes = session.graph.exit_codes
    except (DemoError, LaunchError) as exc:
        print(f"piper-demo: FAILED: {exc}", file=sys.stderr)
        return 1
    bad_exit = {k: v for k, v in codes.items() if v != 0}
    problems = validate_outputs(out)
    summary = summarize(out)
    print("\n== piper-demo summary")
    print(f"episodes: {summary['episodes']} (rgbd: {summary['rgbd']['episodes']}), rows per episode: "
          f"{summary['rows']}, rgbd transitions: {summary['rgbd']['transitions']}")
    for cam, frames in summary["video_frames"].items():
        print(f"video frames {cam}: {frames}")
    print(f"drops: {summary['drops']}")
    print(f"sizes: lerobot {summary['lerobot_bytes'] / 1e6:.1f} MB, rgbd.hdf5 {summary['rgbd_bytes'] / 1e6:.1f} MB")
    for name, probs in problems.items():
        print(f"validation {name}: {'OK' if not probs else 'FAILED'}")
        for p in probs[:20]:
            print(f"  - {p}")
    if "lerobot-doctor" not in problems:
        print("validation lerobot-doctor: not installed (skipped)")
    if bad_exit:
        print(f"processes exited abnormally: {bad_exit} (logs in {out / 'logs'})")
    print(f"outputs: {out / 'lerobot'}  {out / 'rgbd.hdf5'}  ({time.monotonic() - t0:.0f}s)")
    failed = bad_exit or any(problems.values()) or summary["episodes"] != args.episodes \
        or summary["rgbd"]["episodes"] != args.episodes
    print("piper-demo: FAILED" if failed else "piper-demo: OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Graph capacity: the whole simulated graph with 1, 2 and 3 cameras at 640x480, 30 fps, both recorders.

For each camera count it records one episode of ``--seconds`` (default 60) through the services and
prints, per camera: frames the camera published around the episode (from its 1 Hz ``~/status``, so
within about a second of the episode window), frames the LeRobot recorder received and wrote, frames repeated/dropped in rows
(nominal mode: a missing frame shows as a repeat); the recorders' tick delay p50/p99 (how late the
tick thread assembled rows past their due time); CPU per process (from /proc/<pid>/stat over the
episode); and the stop-to-saved latency. Last line: the largest camera count with zero drops.

  .venv/bin/python bench/graph_capacity.py [--seconds 60] [--quick] [--cameras 1,2,3] [--size 640x480] [--jitter-ms J]

``--jitter-ms J`` sets every sim camera's ``jitter_ms`` fault (each capture delayed by a uniform 0..J ms,
so ±J/2 around its mean phase): the case where frames used to alias between rows.

``--quick`` = 10 s episodes with 1 and 2 cameras. The figures depend on what else the machine runs, and
on the host's speed at the time (a shared host's moves by up to ±30 % between minutes). Each run prints
a fixed single-threaded workload's CPU time just before the graph starts (``host_reference_ms``: the
scalar kinematics and frame encoding the arm process runs; lower is a faster host). It shows a host
whose compute is slower; it did not show the slow phases seen on 2026-12-05, when every process of the
graph cost 20-25 % more while the reference stayed at 162-172 ms (docs/performance.md). Compare trees
in alternating rounds, not across minutes. On a VM the graph costs the most on an otherwise idle machine: each
message that wakes an idle vCPU costs more than one to a busy vCPU, and beside a busy loop at nice 19 the same
graph took up to 0.2 cores less (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from piper_recorder.graph.sim_session import SimSession, size_overrides  # noqa: E402
from piper_recorder.names import CAMERA_STATUS_TOPIC_PATTERN, SIM_CAMERAS_NODE, camera_topic  # noqa: E402
from piper_recorder.params.derived import LAUNCH_SECTION  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
# the whole graph's CPU budget (cores): one arm with 2 cameras, two arms with 3; and one piper_arm's
BUDGET = {False: (2, 1.2), True: (3, 1.3)}
ARM_BUDGET = 0.15
THIRD_CAMERA = {
    "cam_side": {
        "ros__parameters": {
            "width": 640,
            "height": 480,
            "fps": 30.0,
            "serial": "sim-side-0003",
            "position": [0.30, 0.55, 0.50],
            "look_at": [0.20, 0.0, 0.38],
        }
    }
}


def cpu_seconds(pid: int) -> float:
    """Utime + stime of a process (all its threads) from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_reference_ms(repeats: int = 5) -> float:
    """CPU milliseconds of a fixed workload (2,000 forward kinematics, 2,000 IK solves from a near seed,
    4,000 serialized PoseStamped), the fastest of ``repeats``: a measure of this host's speed right now,
    taken on a quiet graph-free moment. Only ``piper_recorder``'s own pure-Python code runs in it.
    """
    import numpy as np

    from piper_recorder.cdr import encode as cdr_encode
    from piper_recorder.piper import kinematics as kin

    rng = np.random.default_rng(0)
    qs = [rng.uniform(-0.5, 0.5, 6) + np.array([0.0, 1.0, -1.0, 0.0, 0.5, 0.0]) for _ in range(2000)]
    lo, hi = kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for q in qs:
            t = kin.fk(q)
            kin.solve_ik(t, q + 0.01, lo, hi)
            xyz, quat = t[:3, 3].tolist(), kin.matrix_to_quat(t[:3, :3]).tolist()
            cdr_encode.pose_stamped(1, "arm_base", xyz, quat)
            cdr_encode.pose_stamped(2, "arm_base", xyz, quat)
        best = min(best, time.thread_time() - t0)
    return best * 1e3


def config_with_cameras(n: int, tmp: Path, jitter_ms: float = 0.0) -> Path:
    raw = yaml.safe_load((ROOT / "config" / "sim.yaml").read_text())
    raw.update(THIRD_CAMERA)
    cams = ["cam_front", "cam_wrist", "cam_side"][:n]
    if jitter_ms > 0:
        for c in cams:
            raw[c]["ros__parameters"]["jitter_ms"] = float(jitter_ms)
    raw[LAUNCH_SECTION]["ros__parameters"]["cameras"] = cams  # the recorders follow (params.derived)
    path = tmp / f"sim_{n}cam.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def camera_status(session: SimSession, cam: str) -> dict:
    from std_msgs.msg import String

    return json.loads(session._first_message(String, camera_topic(CAMERA_STATUS_TOPIC_PATTERN, cam), 10.0).data)


def camera_skips(log: Path, cam: str) -> int:
    """Frames ``cam`` skipped over the whole run, from its exit line in the sim cameras' log (-1: none found)."""
    m = re.search(
        rf"\[{re.escape(cam)}\]: published \d+ frames, skipped (\d+) \(faults\) and (\d+) \(stalls\)", log.read_text()
    )
    return int(m.group(1)) + int(m.group(2)) if m else -1


def run(n: int, seconds: float, size: str, tmp: Path, jitter_ms: float = 0.0, arms: str = "") -> dict:
    config = config_with_cameras(n, tmp, jitter_ms)
    out = tmp / f"{n}cam"
    session = SimSession(out, config, size_overrides(config, size), arms=arms)
    with session:
        session.wait_motion()
        procs = {r.spec.name: r.popen.pid for r in session.graph.running}
        published0 = {cam: camera_status(session, cam) for cam in session.cameras}
        cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        t0 = time.monotonic()
        seen = len(session.events)
        session.start_episode()
        at = session._stop_times(seen, seconds)
        time.sleep(max(0.0, max(at.values()) - 0.5 - time.monotonic()))
        status = {rec: dict(st) for rec, st in session.status.items()}
        result = session.stop_episode(at=at)
        published = {
            cam: camera_status(session, cam)["published"] - published0[cam]["published"] for cam in session.cameras
        }
        wall = time.monotonic() - t0
        cpu = {name: (cpu_seconds(pid) - cpu0[name]) / wall for name, pid in procs.items()}
    ep = json.loads((out / "lerobot" / "meta" / "episodes.jsonl").read_text().splitlines()[-1])
    cams = {}
    for cam in session.cameras:
        cams[cam] = {
            "grid": round(ep["length"]),
            "published": published[cam],
            "received": ep["frames_received"].get(cam, 0),
            "written": ep.get("frames_written", {}).get(cam, ep["frames_sent"].get(cam, 0)),
            "repeated": ep["frames_repeated"].get(cam, 0),
            "dropped": ep["frames_dropped"].get(cam, 0),
            "ahead_max_ms": ep.get("frame_ahead_max_ms", {}).get(cam, "n/a"),
            "behind_max_ms": ep.get("frame_behind_max_ms", {}).get(cam, "n/a"),
            "camera_skips_whole_run": camera_skips(out / "logs" / f"{SIM_CAMERAS_NODE}.log", cam),
        }
    delays = {
        "lerobot_recorder": ep.get("tick_delay_ms", {}),
        "rgbd_recorder": status.get("rgbd_recorder", {}).get("tick_delay_ms", {}),
    }
    return {"cameras": n, "cams": cams, "tick_delay_ms": delays, "cpu": cpu, "stop_to_saved_s": result.stop_to_saved_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cameras", default="1,2,3")
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--quick", action="store_true", help="10 s episodes, 1 and 2 cameras")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="sim cameras' jitter_ms fault (0: off)")
    ap.add_argument("--arms", default="", help="several arms, e.g. left,right (default: one arm)")
    args = ap.parse_args(argv)
    seconds, counts = args.seconds, [int(c) for c in args.cameras.split(",")]
    if args.quick:
        seconds, counts = 10.0, [1, 2]
    best = 0
    with tempfile.TemporaryDirectory(prefix="graph_capacity-") as tmp:
        for n in counts:
            before = os.getloadavg()[0]
            reference = host_reference_ms()
            r = run(n, seconds, args.size, Path(tmp), args.jitter_ms, args.arms)
            print(
                f"\n== {n} camera(s), {args.size} @ 30 fps, {seconds:g} s episode"
                + (f", arms {args.arms}" if args.arms else "")
                + (f", capture jitter 0..{args.jitter_ms:g} ms" if args.jitter_ms else "")
                + f" (load average {before:.1f} before the graph started, {os.getloadavg()[0]:.1f} at its end)"
            )
            zero = True
            for cam, c in r["cams"].items():
                lost = c["repeated"] + c["dropped"] + max(0, c["grid"] - c["written"])
                zero &= lost == 0
                print(
                    f"  {cam}: rows {c['grid']}, published ~{c['published']} (+-1 s of status), "
                    f"received {c['received']}, written {c['written']}, "
                    f"repeated {c['repeated']}, dropped {c['dropped']}, "
                    f"frame after its row up to {c['ahead_max_ms']} ms, before it up to {c['behind_max_ms']} ms, "
                    f"camera skips (whole run) {c['camera_skips_whole_run']}"
                )
            for rec, d in r["tick_delay_ms"].items():
                print(
                    f"  {rec} tick delay ms: p50 {d.get('p50', 'n/a')}, p99 {d.get('p99', 'n/a')}, "
                    f"max {d.get('max', 'n/a')}"
                )
            print(
                "  CPU (cores): "
                + ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["cpu"].items()))
                + f"; host reference workload {reference:.0f} ms (lower: a faster host)"
            )
            total = sum(r["cpu"].values())
            cams, budget = BUDGET[bool(args.arms)]
            print(
                f"  total CPU {total:.2f} cores ({100 * total / (os.cpu_count() or 1):.0f} % of this machine's "
                f"{os.cpu_count()} cores; budget {budget} cores with {cams} cameras"
                f"{' and two arms' if args.arms else ''}, each piper_arm {ARM_BUDGET}); stop->saved "
                + ", ".join(f"{k} {v:.2f}s" for k, v in r["stop_to_saved_s"].items())
            )
            if zero:
                best = max(best, n)
    print(f"\nlargest camera count with zero dropped/repeated frames: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""piper-demo --out DIR [--episodes 3] [--seconds 10]: record through the simulated ROS 2 graph, validate.

Starts config/sim.yaml's graph as separate processes in a private loopback ROS domain (the simulated headset
runs its ``continuous`` script: clutch engaged throughout), records N episodes through both recorders'
services, stops the graph, validates DIR/lerobot (lerobot-doctor too when installed: any warning fails) and
DIR/rgbd.hdf5. Exit status 0 only if every step and check passed. The graph and its client are
``graph.sim_session.SimSession``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.install import config_path, find_script
from piper_recorder.graph.sim_session import DemoError, EpisodeResult, SimSession, size_overrides
from piper_recorder.lerobot.format.fsutil import read_jsonl
from piper_recorder.lerobot.format.layout import EPISODES, INFO
from piper_recorder.process.supervision import interrupt_on_stop_signals
from piper_recorder.storage.outpaths import dir_problem

SETTLE_S = 3.0  # after start-up (imports, discovery, encoder set-up) before the first episode


# ---- checks and summary ---------------------------------------------------------------------------
def lerobot_doctor(root: Path) -> tuple[bool | None, list[str]]:
    """Run ``lerobot-doctor check ROOT --ci --fail-on warn`` (a warning fails the demo).

    Returns (passed, its WARN/FAIL messages as "check: message"), or (None, [why]) if it is not installed.
    """
    try:
        exe = find_script("lerobot-doctor")
    except LaunchError:
        return None, ["lerobot-doctor not installed"]
    p = subprocess.run(
        [exe, "check", str(root), "--ci", "--fail-on", "warn"], capture_output=True, text=True, timeout=600
    )
    text = (p.stdout + p.stderr).strip()
    try:
        report = json.loads(text[text.index("{") : text.rindex("}") + 1])
        found = [
            f"{c['name']}: {m['severity']} {m['message']}"
            for c in report["checks"]
            for m in c.get("messages", [])
            if m.get("severity") != "PASS"
        ]
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

    from piper_recorder.lerobot.format.layout import video_file

    root = out / "lerobot"
    episodes = read_jsonl(root / EPISODES)
    info = json.loads((root / INFO).read_text())
    video_frames: dict[str, list[int]] = {}
    for ep in episodes:
        idx = ep["episode_index"]
        for key, feat in info["features"].items():
            if feat.get("dtype") != "video":
                continue
            with av.open(str(video_file(root, info, idx, key))) as c:
                video_frames.setdefault(key.split(".")[-1], []).append(sum(1 for p in c.demux(video=0) if p.size))
    drops = {
        k: sum(sum(ep.get(k, {}).values()) for ep in episodes)
        for k in ("frames_dropped", "frames_late", "frames_stale", "frames_repeated")
    }
    with h5py.File(out / "rgbd.hdf5", "r") as f:
        rgbd = {"episodes": int(f.attrs["total_episodes"]), "transitions": int(f.attrs["total_transitions"])}
    return {
        "episodes": len(episodes),
        "rows": [ep["length"] for ep in episodes],
        "video_frames": video_frames,
        "drops": drops,
        "lerobot_bytes": _du(root),
        "rgbd": rgbd,
        "rgbd_bytes": _du(out / "rgbd.hdf5"),
    }


def _clear(out: Path) -> None:
    """The demo owns DIR/lerobot, DIR/rgbd.hdf5 and DIR/logs: start each run from scratch."""
    for p in (out / "lerobot", out / "logs"):
        if p.exists():
            shutil.rmtree(p)
    for p in out.glob("rgbd.hdf5*"):
        p.unlink()


def main(argv: list[str] | None = None) -> int:
    """Run ``piper-demo`` on ``argv`` (default: the command line); returns the exit status."""
    ap = argparse.ArgumentParser(prog="piper-demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory (DIR/lerobot, DIR/rgbd.hdf5)")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each episode")
    ap.add_argument("--config", help="parameter file (default: config/sim.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE", help="parameter override")
    ap.add_argument("--cameras", default="", help="comma-separated subset of the configured cameras")
    ap.add_argument("--arms", default="", help="several arms, e.g. left,right (default: one arm)")
    ap.add_argument("--size", metavar="WxH", help="camera size for every camera and both recorders (default: config)")
    ap.add_argument("--verbose", action="store_true", help="echo every node's output")
    args = ap.parse_args(argv)
    if args.episodes < 1 or args.seconds <= 0:
        ap.error("--episodes must be >= 1 and --seconds > 0")
    out = args.out.resolve()
    problem = dir_problem(out)
    if problem:
        ap.error(f"--out: {problem}")
    if args.size:
        try:
            args.set = size_overrides(args.config or config_path("sim"), args.size) + args.set
        except ValueError as exc:
            ap.error(str(exc))
    _clear(out)
    interrupt_on_stop_signals()  # SIGTERM/SIGHUP stop the graph like Ctrl-C
    t0 = time.monotonic()
    results: list[EpisodeResult] = []
    try:
        session = SimSession(out, args.config, args.set, cameras=args.cameras, echo=args.verbose, arms=args.arms)
        print(
            f"piper-demo: starting the simulated graph ({', '.join(session.plan.node_names)}); "
            f"logs in {session.log_dir}",
            flush=True,
        )
        with session:
            moved = session.wait_motion()
            print(
                f"piper-demo: graph ready after {time.monotonic() - t0:.1f}s; arm moved {moved * 1000:.0f} mm "
                "under teleop",
                flush=True,
            )
            time.sleep(SETTLE_S)
            for i in range(args.episodes):
                r = session.record(args.seconds)
                results.append(r)
                rows = {rec: ev.get("rows") for rec, ev in r.events.items()}
                lat = ", ".join(f"{k} {v:.2f}s" for k, v in r.stop_to_saved_s.items())
                print(f"piper-demo: episode {i + 1}/{args.episodes} saved: rows {rows}; stop->saved {lat}", flush=True)
        codes = session.graph.exit_codes
    except (DemoError, LaunchError) as exc:
        print(f"piper-demo: FAILED: {exc}", file=sys.stderr)
        return 1
    bad_exit = {k: v for k, v in codes.items() if v != 0}
    problems = validate_outputs(out)
    summary = summarize(out)
    print("\n== piper-demo summary")
    print(
        f"episodes: {summary['episodes']} (rgbd: {summary['rgbd']['episodes']}), rows per episode: "
        f"{summary['rows']}, rgbd transitions: {summary['rgbd']['transitions']}"
    )
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
    failed = (
        bad_exit
        or any(problems.values())
        or summary["episodes"] != args.episodes
        or summary["rgbd"]["episodes"] != args.episodes
    )
    print("piper-demo: FAILED" if failed else "piper-demo: OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

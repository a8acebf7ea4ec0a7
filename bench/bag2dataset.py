"""Benchmark piper-bag2dataset: speed as a multiple of real time and peak memory.

Synthetic bags of the robot graph (two 640x480 cameras at 30 fps, RGB + aligned 16-bit depth, arm at
200 Hz, commands at 100 Hz, raw headset lines, /episode_events with one episode covering the bag)
are written once with rosbags (sqlite3) into --dir and reused. Each conversion runs the real console
script as a child process; wall time includes interpreter start-up, and peak memory is the child
tree's ru_maxrss (os.wait4).

Figures printed:
- LeRobot, --jobs 1, one 60 s bag: x real time.
- LeRobot, --jobs 2, two 30 s bags (60 s of recording): x real time. Target: >= 4x.
- peak RSS converting a 30 s and a 60 s bag (--jobs 1): should not grow with bag length.
- CPU seconds per recorded second (user + sys of the process tree): the load-independent cost, and
  the speed ceiling it implies on this many idle CPUs.
The machine is shared: the load average before/after each run is printed next to the figure, and a
busy box lowers the speed figures (nothing here is asserted).

    .venv/bin/python bench/bag2dataset.py [--quick] [--dir /tmp/piper_bag_bench] [--keep]
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

from piper_recorder.bag.source import bag_size
from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_up, machine_line, parser, run_child, tool

W, H = 640, 480
CAMS = ("cam_front", "cam_wrist")


def make_bag(d: Path, seconds: float, seed: int) -> Path:
    path = d / f"bag_{int(seconds)}s_{seed}"
    if (path / "metadata.yaml").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    sc = SynthScenario(
        duration_s=seconds,
        cameras=CAMS,
        width=W,
        height=H,
        seed=seed,
        t0_ns=1_700_000_000_000_000_000 + seed * 10**12,
        episodes=[(0.2, seconds - 0.3)],
        task="bench task",
    )
    write_bag(path, scenario_messages(sc), "sqlite3")
    print(f"  wrote {path.name}: {bag_size(path) / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


def convert(bags: list[Path], out: Path, jobs: int, fmt: str = "lerobot") -> dict:
    shutil.rmtree(out, ignore_errors=True)
    if out.suffix == ".hdf5":
        out.unlink(missing_ok=True)
    r = run_child(
        [
            tool("piper-bag2dataset"),
            *map(str, bags),
            "--format",
            fmt,
            "--out",
            str(out),
            "--jobs",
            str(jobs),
            "--no-progress",
        ]
    )
    return {"wall": r.wall, "cpu": r.cpu, "rss_mb": r.rss_mb, "per_bag": per_bag_seconds(r.out), "load": r.load}


def per_bag_seconds(out: str) -> list[float]:
    """Each bag's conversion time from the converter's report lines."""
    return [float(x) for x in re.findall(r"s of bag in ([0-9.]+) s", out)]


def main() -> int:
    ap = parser(
        __doc__,
        "10 s / 5 s bags instead of 60 s / 30 s",
        "/tmp/piper_bag_bench",
        "keep the bags for the next run (default: delete)",
    )
    a = ap.parse_args()
    long_s, short_s = (10.0, 5.0) if a.quick else (60.0, 30.0)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    print(machine_line(), flush=True)
    print("bags:", flush=True)
    long_bag = make_bag(d, long_s, 0)
    short_bags = [make_bag(d, short_s, 1), make_bag(d, short_s, 2)]
    try:
        r1 = convert([long_bag], d / "out_jobs1", 1)
        r2 = convert(short_bags, d / "out_jobs2", 2)
        m_short = convert(short_bags[:1], d / "out_mem_short", 1)
        rows = [
            ("LeRobot --jobs 1", f"1 x {long_s:g} s", long_s, r1),
            ("LeRobot --jobs 2", f"2 x {short_s:g} s", 2 * short_s, r2),
        ]
        print("\nspeed (wall time of the whole command, incl. start-up; x real time = recorded s / wall s):")
        for name, bags, rec_s, r in rows:
            inner = ", ".join(f"{x:.1f}" for x in r["per_bag"])
            print(
                f"  {name:18s} {bags:10s} {r['wall']:6.1f} s  -> {rec_s / r['wall']:5.2f}x real time"
                f"   (per-bag conversion {inner} s; load {r['load']})"
            )
            print(
                f"  {'':18s} CPU {r['cpu']:.1f} s = {r['cpu'] / rec_s:.2f} CPU-s per recorded s"
                f" -> ceiling on {os.cpu_count()} idle CPUs ~{os.cpu_count() * rec_s / r['cpu']:.1f}x"
            )
        print("\npeak memory (ru_maxrss of the converter process tree, --jobs 1):")
        print(f"  {short_s:g} s bag: {m_short['rss_mb']:7.0f} MB   (load {m_short['load']})")
        print(f"  {long_s:g} s bag: {r1['rss_mb']:7.0f} MB")
        print(f"  --jobs 2 (parent + workers, max of the tree): {r2['rss_mb']:.0f} MB")
        target = 2 * short_s / r2["wall"]
        print(
            f"\ntarget >= 4x real time with --jobs 2: {'met' if target >= 4 else 'NOT met'} ({target:.2f}x)"
            f"; memory growth {short_s:g}->{long_s:g} s: {r1['rss_mb'] - m_short['rss_mb']:+.0f} MB"
        )
    finally:
        clean_up(d, ("out_jobs1", "out_jobs2", "out_mem_short"), a.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

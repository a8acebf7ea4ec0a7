"""Benchmark piper-bag2dataset --engine ray against the local engine on the same bags, and the writer's share.

The bags are bench/bag2dataset.py's (robot graph: two 640x480 cameras at 30 fps with aligned depth,
arm at 200 Hz, one episode per bag), written once into --dir. Each run is the real console script in
a child process (wall time includes interpreter start-up):
- local:        --jobs 2 (two worker processes), first and again last    <- the baseline (mean)
- ray (own):    --engine ray --jobs 2: the CLI starts and stops a local 2-CPU Ray cluster
- ray (joined): --engine ray --address ADDR: a 2-CPU cluster this script started beforehand, as on a
                real cluster where Ray is already up
Figures: wall time and x real time of each; Ray's overhead against the baseline (start-up and per
bag); the writer's serial share (the CLI's "writer: A s of the run's W s" line: the one process
appending staged bags in bag order) and, from it, the speed-up to expect on N machines.

    .venv/bin/python bench/bag2dataset_ray.py [--quick] [--bags 4] [--seconds 30] [--dir /tmp/piper_bag_ray_bench] [--keep]
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_up, machine_line, parser, run_child, tool
from bag2dataset import make_bag, per_bag_seconds

from piper_recorder.bag.ray_engine import import_ray, init_local


@dataclass
class Run:
    wall: float  # the whole command, incl. start-up
    append: float  # the writer's share of the run (serial)
    run: float  # convert_many's wall time
    per_bag: list[float]
    load: str


def convert(bags: list[Path], out: Path, *extra: str) -> Run:
    shutil.rmtree(out, ignore_errors=True)
    r = run_child(
        [tool("piper-bag2dataset"), *map(str, bags), "--format", "lerobot", "--out", str(out), "--no-progress", *extra],
        env={"RAY_USAGE_STATS_ENABLED": "0"},
    )
    m = re.search(r"writer: ([0-9.]+) s of the run's ([0-9.]+) s", r.out)
    assert m, r.out
    return Run(r.wall, float(m.group(1)), float(m.group(2)), per_bag_seconds(r.out), r.load)


def main() -> int:
    ap = parser(
        __doc__,
        "5 s bags instead of 30 s",
        "/tmp/piper_bag_ray_bench",
        "keep the bags for the next run (default: delete)",
    )
    ap.add_argument("--bags", type=int, default=4)
    ap.add_argument("--seconds", type=float, help="bag length (default 30 s, --quick 5 s)")
    a = ap.parse_args()
    seconds = a.seconds or (5.0 if a.quick else 30.0)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    print(machine_line(), flush=True)
    print("bags:", flush=True)
    bags = [make_bag(d, seconds, 10 + i) for i in range(a.bags)]
    rec_s = seconds * len(bags)
    for f in sorted(p for b in bags for p in b.iterdir()):  # page cache: no run pays the first read
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    ray = import_ray()
    try:
        local = convert(bags, d / "out_local", "--jobs", "2")
        own = convert(bags, d / "out_ray_own", "--engine", "ray", "--jobs", "2")
        t_init = time.perf_counter()
        init_local(ray, 2)
        t_init = time.perf_counter() - t_init
        address = ray.get_runtime_context().gcs_address
        try:
            joined = convert(bags, d / "out_ray_joined", "--engine", "ray", "--address", address)
        finally:
            ray.shutdown()
        again = convert(bags, d / "out_local", "--jobs", "2")  # the load drifts on a shared machine: bracket
        rows = [
            ("local --jobs 2", local),
            ("ray, own cluster", own),
            ("ray, joined cluster", joined),
            ("local --jobs 2 again", again),
        ]
        print(f"\n{len(bags)} bags x {seconds:g} s ({rec_s:g} s recorded), LeRobot, 2 cameras 640x480 + depth:")
        for name, r in rows:
            inner = ", ".join(f"{x:.1f}" for x in r.per_bag)
            print(
                f"  {name:20s} {r.wall:6.1f} s -> {rec_s / r.wall:5.2f}x real time   (per-bag conversion "
                f"{inner} s; writer {r.append:.1f} s of the run's {r.run:.1f} s; load {r.load})"
            )
        lw, ow, jw = (local.wall + again.wall) / 2, own.wall, joined.wall
        print(
            f"\nRay overhead vs local --jobs 2 (mean of the two bracketing runs): own cluster {ow / lw:.2f}x wall ({ow - lw:+.1f} s; starting a local "
            f"cluster from this script took {t_init:.1f} s), joined cluster {jw / lw:.2f}x ({jw - lw:+.1f} s, "
            f"{(jw - lw) / len(bags):+.2f} s per bag)"
        )
        # the serial part: the one writer appends every bag; conversion spreads over the cluster
        append = joined.append
        conv = sum(joined.per_bag) / len(bags)
        per_bag_append = append / len(bags)
        print(
            f"\nwriter (serial): {per_bag_append:.2f} s per bag = {per_bag_append / seconds * 100:.1f} % of the "
            f"recorded time; conversion (parallel): {conv:.1f} s per bag on one CPU of this machine"
        )
        print(
            "expected wall time for 1,000 such bags on N machines of 2 CPUs (model: conversion spreads over 2N "
            "workers,\n  the writer overlaps it but appends one bag at a time; the run takes the slower of the two):"
        )
        n_bags = 1000
        for n in (1, 2, 4, 8, 16, 32, 64):
            conv_wall = n_bags * conv / (2 * n)
            wall = max(conv_wall, n_bags * per_bag_append)
            print(
                f"  N={n:3d}: {wall / 3600:6.2f} h  ({n_bags * seconds / wall:6.1f}x real time; "
                f"{'writer-bound' if n_bags * per_bag_append >= conv_wall else 'conversion-bound'})"
            )
        print(
            f"  the writer caps the speed-up at {conv / per_bag_append:.0f} workers' worth "
            f"(conversion s per bag / append s per bag)"
        )
    finally:
        clean_up(d, ("out_local", "out_ray_own", "out_ray_joined"), a.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `piper-dataset merge` of two 1-hour LeRobot roots: wall time, CPU, peak memory.

How the roots are made (cheaply, honestly): bench/export.py's recipe. One 60 s episode with three
640x480 cameras at 30 fps is recorded through the real writer (textured moving scene with noise,
crf 23, GOP 15: ~7-8 MB/min per camera), then replicated 60 times into each root through the
writer's own import path (``import_episode``) with the mp4s as hard links of the recorded ones and
the recorded episode's camera sample histograms, so each root has the per-episode stats records and
stats.json a recorder writes. Each root is 60 episodes, 108,000 rows, 180 mp4s (about 1.4 GB).

The merge runs the real console script as a child process (wall time incl. interpreter start-up;
CPU and peak RSS of the child from os.wait4). Baseline in the same run: hard-linking every file of
both roots into a new tree (what any merge that does not re-encode must at least do), and the dry
run (planning only). The machine is shared: load averages are printed next to the figures.

    .venv/bin/python bench/dataset_merge.py [--quick] [--dir /tmp/piper_merge_bench] [--keep] [--size 640x480]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_up, machine_line, parser, run_child, tool
from export import CAMS, ensure_root, ensure_template


def link_tree_time(roots: list[Path], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    for n, r in enumerate(roots):
        for p in r.rglob("*"):
            if p.is_file():
                dst = out / str(n) / p.relative_to(r)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.link(p, dst)
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return wall


def main() -> int:
    ap = parser(__doc__, "two 6-minute roots of 20 s episodes", "/tmp/piper_merge_bench", "keep the generated roots")
    ap.add_argument("--size", default="640x480", help="camera WxH (default 640x480)")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.split("x"))
    ep_s, minutes = (20.0, 6) if a.quick else (60.0, 60)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    merge = tool("piper-dataset")
    print(machine_line(), flush=True)
    out = d / "merged"
    try:
        template = ensure_template(d, ep_s, w, h)
        n = int(minutes * 60 / ep_s)
        roots = [ensure_root(template, d / f"root_{name}_{minutes}min", n) for name in ("a", "b")]
        gb = sum(f.stat().st_size for r in roots for f in r.rglob("*") if f.is_file()) / 1e9
        rows = sum(json.loads(x)["length"] for r in roots for x in (r / "meta/episodes.jsonl").read_text().splitlines())
        shutil.rmtree(out, ignore_errors=True)
        dry = run_child([merge, "merge", *map(str, roots), "--out", str(out), "--dry-run"])
        res = run_child([merge, "merge", *map(str, roots), "--out", str(out), "-q"])
        info = json.loads((out / "meta/info.json").read_text())
        assert info["total_episodes"] == 2 * n and info["total_frames"] == rows, info
        floor = link_tree_time(roots, d / "links")
        rec_s = 2 * minutes * 60
        print(
            f"\nmerge of two {minutes}-minute roots ({2 * n} episodes, {rows} rows, {len(CAMS)} cameras {w}x{h}, "
            f"{gb:.2f} GB; wall time of the whole command incl. start-up):"
        )
        print(
            f"  piper-dataset merge: {res.wall:.1f} s = {rec_s / res.wall:.0f}x real time; CPU {res.cpu:.1f} s "
            f"({res.cpu / rec_s * 1000:.1f} ms per recorded s, {res.cpu / (2 * n) * 1000:.0f} ms per episode); "
            f"peak RSS {res.rss_mb:.0f} MB (load {res.load})"
        )
        print(f"  dry run (open, check and plan only): {dry.wall:.1f} s")
        print(
            f"  baseline, hard-linking every file of both roots: {floor:.2f} s -> merge / link-only = "
            f"{res.wall / floor:.0f}x"
        )
    finally:
        clean_up(d, [out.name], a.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

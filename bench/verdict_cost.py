"""Cost of the save-time integrity verdict (``recording.verdict.judge``) on the writer thread.

Writes one episode with the project's LeRobot writer (2 cameras 640x480 at 30 fps, nominal mode, a
shifting noise image so packets have realistic sizes), and inside the save's ``annotate`` hook times
``judge`` on the record, the finished mp4s (packet PTS demuxed with PyAV, not decoded) and the rows'
timestamps: wall and CPU milliseconds, and one camera's PTS read alone. This is what the verdict adds
to stop-to-saved; nothing of it runs while the episode records. The machine is shared: the load
average is printed.

    .venv/bin/python bench/verdict_cost.py [--seconds 10 60]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from piper_recorder.lerobot.writer import LeRobotWriter
from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config
from piper_recorder.recording.verdict import VerdictConfig, judge, read_pts
from piper_recorder.timebase import grid_timestamp


def run(seconds: float, base: Path) -> dict[str, Any]:
    root = base / f"root_{seconds:g}"
    cfg = LeRobotRecorderConfig(root=str(root), cameras=["a", "b"], lateness_s=0.0)
    w = LeRobotWriter(root, lerobot_writer_config(cfg))
    w.begin_session({})
    w.start_episode("bench")
    img = np.random.default_rng(0).integers(0, 255, (480, 640, 3), np.uint8)
    feats = {f.key: np.zeros(f.dim, np.float32) for f in w.cfg.features}
    for k in range(int(seconds * 30)):
        t = float(grid_timestamp(k, 30))
        w.add_row(t, feats)
        for cam in ("a", "b"):
            w.add_frame(cam, np.roll(img, 7 * k, 1), t)
    out: dict[str, Any] = {}

    def annotate(rec: Any, videos: Any, times: Any) -> dict[str, Any]:
        t0, c0 = time.perf_counter(), time.process_time()
        v = judge(rec, VerdictConfig(), 30, ["a", "b"], videos, times)
        out.update(
            wall_ms=round((time.perf_counter() - t0) * 1000, 1), cpu_ms=round((time.process_time() - c0) * 1000, 1)
        )
        t0 = time.perf_counter()
        read_pts(videos["a"])
        out["one_camera_pts_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        out["verdict"] = v.verdict
        return v.fields()

    w.save_episode({"timestamp_mode": "nominal"}, annotate=annotate)
    w.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for s in args.seconds:
            print(f"{s:g} s episode, 2 cameras 640x480: {run(s, Path(tmp))}")


if __name__ == "__main__":
    main()

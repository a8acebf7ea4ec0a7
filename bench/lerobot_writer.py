"""LeRobot writer throughput, save latency, memory and stats-update time.

Prints:
* write speed as a multiple of real time for an episode of 3 cameras at 640x480, 30 fps, with 30 Hz
  rows, fed as fast as the writer accepts them (queue back-pressure blocks: ``max_block_s=None``,
  so nothing is dropped), i.e. episode seconds / (feed time + save time);
* encode cost per frame per camera (process CPU ms and wall ms);
* stop-to-saved latency (``save_episode`` duration) for 10 s and 60 s episodes, fed flat out
  (queues full at stop: worst case) and paced in real time (what a live recorder sees);
* peak RSS of each run (each in its own subprocess; includes a 60-frame pool of source images);
* the time to update stats.json when the root already holds 1,000 episodes (rows only, 600 rows
  each, synthesised by copying one written parquet with perturbed values), plus the cold open;
* image statistics: the cost of folding one sampled 640x480 frame into the histograms (paid on the
  encoder threads for every 5th frame), and rebuilding them from a saved mp4 (decode) when an
  episode's stats record is lost. ``--lerobot-version v2.1`` also writes episodes_stats.jsonl.

Frames are realistic for the encoder: the panning textured scene with sensor noise from
``bench/video_gop.py``. The machine is shared: note the load average printed at the start.

Usage: .venv/bin/python bench/lerobot_writer.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

FPS = 30
CAMS = ("cam_front", "cam_wrist", "cam_back")


def _rows(t: float, seed: int) -> dict[str, np.ndarray]:
    ph = 0.7 * seed + np.arange(7)
    q = np.sin(t + ph[:6])
    quat = np.array([1.0, 0.1 * np.sin(t), 0.1 * np.cos(t), 0.05 * np.sin(2 * t)])
    quat /= np.linalg.norm(quat)
    pose = np.r_[0.3 + 0.1 * np.sin(t + ph[:3]), quat]
    g = np.array([0.04 + 0.03 * np.sin(1.7 * t)])
    return {
        "observation.arm_joint": q,
        "observation.arm_eef": pose,
        "observation.gripper": g,
        "action.arm_eef": pose + 0.001,
        "action.gripper": g,
    }


def run_episode(seconds: float, root: str, paced: bool, version: str = "v2.0") -> dict:
    """One episode in this process; returns the figures (called via the subprocess entry).

    ``paced`` feeds in real time as a live recorder does (encoder queues near empty at stop);
    otherwise flat out, so the queues are full at stop (worst-case save latency).
    """
    import logging

    from video_gop import make_scene

    from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig

    phases: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            phases.append(record.getMessage().split(": ", 1)[-1])

    wlog = logging.getLogger("piper_recorder.lerobot.writer.dataset_writer")
    wlog.setLevel(logging.DEBUG)
    wlog.addHandler(Keep())
    pool = list(make_scene(60))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = WriterConfig(
        fps=FPS,
        cameras={c: CameraSpec(480, 640) for c in CAMS},
        video=VideoConfig(max_block_s=None),
        lerobot_version=version,
    )
    n = int(seconds * FPS)
    with LeRobotWriter(root, cfg) as w:
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        w.start_episode("bench")
        for k in range(n):
            t = k / FPS
            if paced and t0 + t > time.perf_counter():
                time.sleep(t0 + t - time.perf_counter())
            w.add_row(t, _rows(t, 0))
            for j, cam in enumerate(CAMS):
                w.add_frame(cam, pool[(k + 20 * j) % len(pool)], t)
        t1 = time.perf_counter()
        rec = w.save_episode()
        t2 = time.perf_counter()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return {
        "seconds": seconds,
        "feed_s": t1 - t0,
        "save_s": t2 - t1,
        "realtime_x": seconds / (t2 - t0),
        "cpu_ms_per_frame_cam": cpu / (n * len(CAMS)) * 1000,
        "wall_ms_per_frame_cam": (t2 - t0) / (n * len(CAMS)) * 1000,
        "frames": rec["video_frame_lengths"],
        "save_phases": phases[-1] if phases else "",
        "dropped": rec["video_dropped_frames"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss0 / 1024,
    }


def episode_in_subprocess(seconds: float, paced: bool, version: str = "v2.0") -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [sys.executable, __file__, "--episode", str(seconds), d, str(int(paced)), version],
            capture_output=True,
            text=True,
        )
    if out.returncode:
        raise SystemExit(f"{seconds} s episode run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def stats_at(n_episodes: int, rows: int, version: str = "v2.0") -> dict:
    """Synthesise a rows-only root with n_episodes and time the stats update of one more save."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from piper_recorder.lerobot.writer import LeRobotWriter, WriterConfig, stats_sketch

    cfg = WriterConfig(fps=FPS, cameras={}, save_raw_quest=False, lerobot_version=version)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        with LeRobotWriter(root, cfg) as w:
            w.start_episode("bench")
            for k in range(rows):
                w.add_row(k / FPS, _rows(k / FPS, 0))
            w.save_episode()
        src = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
        rng = np.random.default_rng(0)
        lines = [json.loads((root / "meta/episodes.jsonl").read_text())]
        for e in range(1, n_episodes):
            cols = {}
            for name in src.column_names:
                col = src.column(name).combine_chunks()
                if name in ("episode_index",):
                    col = pa.array(np.full(rows, e, np.int64))
                elif name == "index":
                    col = pa.array(np.arange(e * rows, (e + 1) * rows, dtype=np.int64))
                elif pa.types.is_fixed_size_list(col.type):
                    flat = col.flatten().to_numpy() + rng.normal(0, 0.01, len(col) * col.type.list_size)
                    col = pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(np.float32)), col.type.list_size)
                elif name != "timestamp" and pa.types.is_float32(col.type):
                    col = pa.array((col.to_numpy() + rng.normal(0, 0.001, rows)).astype(np.float32))
                cols[name] = col
            chunk = e // cfg.chunks_size
            p = root / f"data/chunk-{chunk:03d}/episode_{e:06d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(cols, schema=src.schema), p)
            lines.append({**lines[0], "episode_index": e})
        (root / "meta/episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        t0 = time.perf_counter()
        w = LeRobotWriter(root, cfg)  # cold: rebuilds every stats sketch from parquet
        cold = time.perf_counter() - t0
        w.close()
        t0 = time.perf_counter()
        w = LeRobotWriter(root, cfg)  # warm: sketches from the cache
        warm = time.perf_counter() - t0
        w.start_episode("bench")
        for k in range(rows):
            w.add_row(k / FPS, _rows(k / FPS, 1))
        t0 = time.perf_counter()
        w.save_episode()
        save = time.perf_counter() - t0
        sk = np.stack(w._sketches)  # the stats update alone: merge + serialise (as save does)
        layout = w._layout
        combined = {k: tuple(p.key for p in parts) for k, parts in w._combined.items()}
        t0, c0 = time.perf_counter(), time.process_time()
        json.dumps(stats_sketch.to_json(stats_sketch.merge(sk), layout, combined))
        update, update_cpu = time.perf_counter() - t0, time.process_time() - c0
        w.close()
    return {
        "episodes": n_episodes + 1,
        "rows_each": rows,
        "cold_open_s": cold,
        "warm_open_s": warm,
        "save_s": save,
        "stats_update_s": update,
        "stats_update_cpu_s": update_cpu,
    }


def image_stats_cost() -> dict:
    """Ms per sampled frame for the histograms; decode-rebuild speed of one 10 s 640x480 mp4."""
    from video_gop import make_scene

    from piper_recorder.lerobot.format import episode_stats
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig, VideoEncoder

    pool = list(make_scene(60))
    sampler = episode_stats.ImageSampler(stride=1)
    t0 = time.perf_counter()
    for k in range(300):
        sampler.offer(pool[k % len(pool)])
    per_frame = (time.perf_counter() - t0) / 300 * 1000
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "v.mp4"
        enc = VideoEncoder(path, "bench", 480, 640, FPS, VideoConfig(max_block_s=None))
        for k in range(10 * FPS):
            enc.add(pool[k % len(pool)], k / FPS)
        enc.finish()
        t0 = time.perf_counter()
        episode_stats.decode_sample(path)
        decode = time.perf_counter() - t0
    return {"sample_ms": per_frame, "decode_x": 10.0 / decode}


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--episode":
        print(json.dumps(run_episode(float(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5])))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 s / 15 s episodes, 200-episode stats root")
    ap.add_argument("--no-paced", action="store_true", help="skip the real-time paced runs")
    ap.add_argument("--lerobot-version", default="v2.0", choices=("v2.0", "v2.1"))
    a = ap.parse_args()
    v = a.lerobot_version
    short, long_, n_eps = (5.0, 15.0, 200) if a.quick else (10.0, 60.0, 1000)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (shared machine)")
    print(f"LeRobot {v}: 3 cameras 640x480 @ {FPS} fps + {FPS} Hz rows, libx264 crf 23 veryfast, fed flat out")
    print("flat out (queues full at stop: worst-case stop-to-saved):")
    for sec in (short, long_):
        r = episode_in_subprocess(sec, paced=False, version=v)
        print(
            f"{sec:>5.0f} s episode: {r['realtime_x']:.2f}x real time (feed {r['feed_s']:.2f} s + "
            f"save {r['save_s']:.3f} s); whole run (feed, encode, parquet, stats, fsync) per camera-frame: "
            f"{r['cpu_ms_per_frame_cam']:.1f} CPU ms / {r['wall_ms_per_frame_cam']:.1f} wall ms; stop-to-saved "
            f"{r['save_s'] * 1000:.0f} ms ({r['save_phases']}); peak RSS {r['peak_rss_mb']:.0f} MB (before episode "
            f"{r['rss_before_mb']:.0f} MB); frames {r['frames']}; drops {r['dropped']}",
            flush=True,
        )
    print("paced in real time, as live recording (stop-to-saved as the operator sees it):")
    for sec in () if a.no_paced else (short, long_):
        r = episode_in_subprocess(sec, paced=True, version=v)
        print(
            f"{sec:>5.0f} s episode: stop-to-saved {r['save_s'] * 1000:.0f} ms ({r['save_phases']}); encode "
            f"{r['cpu_ms_per_frame_cam']:.1f} CPU ms per frame per camera; peak RSS "
            f"{r['peak_rss_mb']:.0f} MB; drops {r['dropped']}",
            flush=True,
        )
    c = image_stats_cost()
    print(
        f"image stats: {c['sample_ms']:.2f} ms per sampled 640x480 frame (every "
        f"5th frame: {c['sample_ms'] / 5:.3f} ms per camera-frame, on the encoder thread); rebuild "
        f"from a saved mp4 (decode every frame, convert every 5th) {c['decode_x']:.1f}x real time per camera",
        flush=True,
    )
    s = stats_at(n_eps, 600, v)
    print(
        f"stats at {s['episodes']} episodes x {s['rows_each']} rows: update (merge+serialise) "
        f"{s['stats_update_s'] * 1000:.0f} ms wall / {s['stats_update_cpu_s'] * 1000:.0f} ms CPU; whole save_episode {s['save_s'] * 1000:.0f} ms; "
        f"open warm {s['warm_open_s']:.2f} s, cold (rebuild cache from parquet) {s['cold_open_s']:.1f} s"
    )


if __name__ == "__main__":
    main()

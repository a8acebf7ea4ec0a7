"""Benchmark piper-export to LeRobot v3.0: speed as a multiple of real time and peak memory.

The source roots are built quickly and honestly: one 60 s episode with three 640x480 cameras at
30 fps is recorded once through the real writer (a panning blob texture with a moving square and
sensor noise, crf 23, GOP 15: ~7-8 MB/min per camera, about the README's textured-scene figure),
then replicated into a 10-minute and a 60-minute root through the writer's own import path
(``import_episode``, the path the parallel bag converter uses), the mp4s as hard links of the
recorded ones, and the recorded episode's camera sample histograms, so the writer's per-episode
stats records and stats.json camera entries are those a recorder writes; the export then only
remuxes and copies. The cost of an old root without those records (stats from decoding every
video) is measured apart and printed.

Each export runs the real console script as a child process; wall time includes interpreter
start-up, peak memory is the child's ru_maxrss (os.wait4). The machine is shared: load averages are
printed next to the figures. Target: >= 20x real time for the 60-minute root, flat memory.

    .venv/bin/python bench/export.py [--quick] [--dir /tmp/piper_export_bench] [--keep] [--size 640x480]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from piper_recorder.lerobot.format import episode_stats, layout
from piper_recorder.lerobot.format.features import piper_features
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
from piper_recorder.lerobot.writer.video_encoder import VideoConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_up, machine_line, parser, run_child, tool

FPS = 30
CAMS = ("cam_front", "cam_wrist", "cam_side")


def _rows(t: float) -> dict[str, np.ndarray]:
    q = 0.8 * np.sin(t + np.arange(6))
    quat = np.array([1.0, 0.1 * np.sin(t), 0.1 * np.cos(t), 0.0])
    quat /= np.linalg.norm(quat)
    pos = 0.3 + 0.1 * np.sin(0.5 * t + np.arange(3))
    return {
        "observation.arm_joint": q,
        "observation.arm_eef": np.r_[pos, quat],
        "observation.gripper": np.array([0.04 + 0.03 * np.sin(1.7 * t)]),
        "action.arm_eef": np.r_[pos + 0.01, quat],
        "action.gripper": np.array([0.04 + 0.03 * np.sin(1.7 * t + 0.2)]),
    }


def record_template(root: Path, seconds: float, w: int, h: int) -> None:
    """One episode through the real writer (encoded while it is fed, as live)."""
    rng = np.random.default_rng(0)
    sc = 8  # blobs of ~8 px: ~7-8 MB/min at crf 23, about what the README measures for a real scene
    small = rng.integers(0, 256, size=(max(1, h // sc), max(1, 2 * w // sc), 3)).astype(np.float32)
    texture = np.repeat(np.repeat(small, sc, 0), sc, 1)[:h, : 2 * w]
    for _ in range(2):
        texture = (texture + np.roll(texture, sc // 2, 0) + np.roll(texture, sc // 2, 1)) / 3
    texture = np.ascontiguousarray(np.broadcast_to(texture.astype(np.uint8), (h, 2 * w, 3)))
    cfg = WriterConfig(
        fps=FPS,
        cameras={c: CameraSpec(h, w) for c in CAMS},
        features=piper_features(),
        video=VideoConfig(max_block_s=None),
    )
    n = int(seconds * FPS)
    with LeRobotWriter(root, cfg) as wr:
        wr.start_episode("bench task")
        for k in range(n):
            t = k / FPS
            wr.add_row(t, _rows(t))
            for c, cam in enumerate(CAMS):
                x = (k * 4 + c * 50) % w
                img = texture[:, x : x + w].copy()
                y0 = int((h - 60) * (0.5 + 0.5 * np.sin(0.05 * k + c)))
                img[y0 : y0 + 60, (k * 3) % (w - 60) : (k * 3) % (w - 60) + 60] = (200, 40, 40)
                img = np.clip(
                    img.astype(np.int16) + rng.integers(-3, 4, size=img.shape, dtype=np.int16), 0, 255
                ).astype(np.uint8)
                wr.add_frame(cam, img, t)
        wr.save_episode({})


def replicate(template: Path, root: Path, episodes: int) -> None:
    """``episodes`` copies of the template episode through ``import_episode`` (mp4s hard-linked),
    with the recorded episode's camera sample histograms (what a converter's staging record holds).
    """
    info = json.loads((template / "meta/info.json").read_text())
    line = json.loads((template / "meta/episodes.jsonl").read_text().splitlines()[0])
    table = pq.read_table(template / "data/chunk-000/episode_000000.parquet")
    feats = piper_features()
    cols = {f.key: np.asarray(table.column(f.key).to_pylist(), np.float32).reshape(len(table), -1) for f in feats}
    ts = table.column("timestamp").to_numpy()
    rec0 = episode_stats.load_record(template / layout.record_relpath(0))
    images = {
        c: (
            np.asarray(rec0["images"][f"observation.images.{c}"]["hist"], np.int64),
            int(rec0["images"][f"observation.images.{c}"]["frames"]),
        )
        for c in CAMS
    }
    shape = {c: info["features"][f"observation.images.{c}"]["shape"] for c in CAMS}
    cfg = WriterConfig(fps=FPS, cameras={c: CameraSpec(shape[c][0], shape[c][1]) for c in CAMS}, features=feats)
    tmp = root.parent / f".{root.name}.links"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with LeRobotWriter(root, cfg) as wr:
        for i in range(episodes):
            videos = {}
            for cam in CAMS:
                videos[cam] = tmp / f"{i}_{cam}.mp4"
                os.link(template / f"videos/chunk-000/observation.images.{cam}/episode_000000.mp4", videos[cam])
            wr.import_episode("bench task", ts, cols, videos, None, line, images=images)
    shutil.rmtree(tmp, ignore_errors=True)


def ensure_template(d: Path, seconds: float, w: int, h: int) -> Path:
    """The recorded template episode below ``d`` (recorded once, reused while kept)."""
    template = d / f"template_{int(seconds)}s_{w}x{h}"
    if not (template / "meta/episodes.jsonl").exists():
        shutil.rmtree(template, ignore_errors=True)
        t0 = time.perf_counter()
        record_template(template, seconds, w, h)
        print(
            f"recorded the {seconds:g} s template episode ({len(CAMS)} cameras {w}x{h}) in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    return template


def ensure_root(template: Path, root: Path, episodes: int) -> Path:
    """``root`` holding ``episodes`` replicas of the template (built unless a kept one has as many)."""
    done = root / "meta/episodes.jsonl"
    if not done.exists() or len(done.read_text().splitlines()) != episodes:
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        replicate(template, root, episodes)
        print(f"built {root.name}: {episodes} episodes in {time.perf_counter() - t0:.1f} s", flush=True)
    return root


def run_export(root: Path, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    r = run_child([tool("piper-export"), str(root), "--to", "v3.0", "--out", str(out), "-q"])
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    files = len(list((out / "videos").rglob("*.mp4")))
    return {"wall": r.wall, "cpu": r.cpu, "rss_mb": r.rss_mb, "gb": size / 1e9, "mp4s": files, "load": r.load}


def main() -> int:
    ap = parser(
        __doc__, "2- and 6-minute roots of 20 s episodes", "/tmp/piper_export_bench", "keep the generated roots"
    )
    ap.add_argument("--size", default="640x480", help="camera WxH (default 640x480)")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.split("x"))
    ep_s = 20.0 if a.quick else 60.0
    short_min, long_min = (2, 6) if a.quick else (10, 60)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    print(machine_line(), flush=True)
    try:
        template = ensure_template(d, ep_s, w, h)
        mb = sum(f.stat().st_size for f in (template / "videos").rglob("*.mp4")) / 1e6
        print(f"  video: {mb / len(CAMS) / (ep_s / 60):.1f} MB/min per camera", flush=True)
        roots = {m: ensure_root(template, d / f"root_{m}min", int(m * 60 / ep_s)) for m in (short_min, long_min)}
        res = {m: run_export(r, d / f"out_{m}min") for m, r in roots.items()}
        info = json.loads((template / "meta/info.json").read_text())
        t0 = time.perf_counter()
        episode_stats.root_episode_stats(template, info, 0, cached=False)
        cold = time.perf_counter() - t0
        print("\nexport to v3.0 (wall time of the whole command incl. start-up; x real time = recorded s / wall s):")
        for m, r in res.items():
            print(
                f"  {m:3d} min root, {len(CAMS)} cameras: {r['wall']:7.1f} s -> {m * 60 / r['wall']:6.1f}x real time; "
                f"CPU {r['cpu']:.1f} s ({r['cpu'] / (m * 60) * 1000:.1f} ms per recorded s: ~{m * 60 / r['cpu']:.0f}x on one idle CPU); output {r['gb']:.2f} GB "
                f"in {r['mp4s']} mp4s; peak RSS {r['rss_mb']:.0f} MB (load {r['load']})"
            )
        grow = res[long_min]["rss_mb"] - res[short_min]["rss_mb"]
        speed = long_min * 60 / res[long_min]["wall"]
        print(
            f"\ntarget >= 20x real time ({long_min} min root): {'met' if speed >= 20 else 'NOT met'} ({speed:.1f}x); "
            f"peak RSS {short_min} -> {long_min} min: {grow:+.0f} MB"
        )
        print(
            f"a root without the recorder's per-episode stats records: +{cold:.1f} s per {ep_s:g} s episode "
            f"(decoding {len(CAMS)} videos for the camera stats) -> at most {ep_s / cold:.1f}x real time"
        )
    finally:
        clean_up(d, (f"out_{m}min" for m in (short_min, long_min)), a.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

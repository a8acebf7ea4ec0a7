"""Keyframe interval (GOP) trade-off: random-access decode time and file size vs GOP.

Content: 640x480 at 30 fps, a large textured background (multi-scale noise + edges) panning a few
pixels per frame, a moving textured object, and per-frame Gaussian sensor noise (sigma 3) - close to
what a RealSense colour stream of a tabletop looks like to the encoder (flat colour would make every
GOP look free). Encoded with the writer's own ``VideoEncoder`` (libx264, yuv420p, crf 23, veryfast,
bf=0). Random access = open the file, seek to a random frame's PTS (FFmpeg lands on the previous
keyframe) and decode forward to it, as PyAV/torchcodec-based loaders do per sample.

Usage: .venv/bin/python bench/video_gop.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from piper_recorder.lerobot.writer.video_encoder import VideoConfig, VideoEncoder, pts_ticks

H, W, FPS = 480, 640, 30


def make_scene(n: int, seed: int = 0):
    """Yield n frames of a panning textured scene with a moving object and sensor noise."""
    rng = np.random.default_rng(seed)
    bh, bw = H + 64, W + 4 * n + 64
    base = np.zeros((bh, bw, 3), np.float32)
    for scale, amp in ((64, 60.0), (16, 35.0), (4, 20.0)):
        small = rng.random(((bh // scale) + 2, (bw // scale) + 2, 3)).astype(np.float32)
        big = np.repeat(np.repeat(small, scale, 0), scale, 1)[:bh, :bw]
        base += amp * big
    base[:, ::97] += 60.0  # edges (table/shelf lines)
    base = np.clip(base + 40.0, 0, 255)
    obj = np.clip(rng.random((120, 120, 3)) * 255, 0, 255).astype(np.float32)
    for i in range(n):
        x0 = 3 * i
        f = base[16 : 16 + H, x0 : x0 + W].copy()
        oy = int(180 + 120 * np.sin(i / 20.0))
        ox = int(260 + 200 * np.cos(i / 27.0))
        f[oy : oy + 120, ox : ox + 120] = obj
        f += rng.normal(0, 3.0, f.shape).astype(np.float32)
        yield np.clip(f, 0, 255).astype(np.uint8)


def encode(path: Path, frames: list[np.ndarray], gop: int) -> float:
    enc = VideoEncoder(path, "bench", H, W, FPS, VideoConfig(gop=gop, max_block_s=None))
    t0 = time.perf_counter()
    for i, f in enumerate(frames):
        enc.add(f, i / FPS)
    enc.finish()
    return (time.perf_counter() - t0) / len(frames) * 1000


def random_access_ms(path: Path, n_frames: int, trials: int, seed: int = 1) -> float:
    rng = random.Random(seed)
    times = []
    for _ in range(trials):
        k = rng.randrange(n_frames)
        target = pts_ticks(k / FPS)  # in the stream's time base, as the encoder stamped frame k
        t0 = time.perf_counter()
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            c.seek(target, stream=s, backward=True)
            for fr in c.decode(s):
                if fr.pts >= target:
                    fr.to_ndarray(format="rgb24")
                    break
        times.append(time.perf_counter() - t0)
    return float(np.mean(times) * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer frames, GOPs and trials")
    a = ap.parse_args()
    n = 150 if a.quick else 300
    gops = (2, 15, 30, 120) if a.quick else (2, 5, 10, 15, 30, 60, 120, 250)
    trials = 15 if a.quick else 40
    frames = list(make_scene(n))
    print(f"{n} frames 640x480 @ {FPS} fps, libx264 crf 23 veryfast bf=0; {trials} random accesses")
    print(f"{'gop':>5} {'MB/min':>8} {'enc ms/frame':>13} {'random access ms':>17}")
    with tempfile.TemporaryDirectory() as d:
        for g in gops:
            p = Path(d) / f"g{g}.mp4"
            enc_ms = encode(p, frames, g)
            mb_min = p.stat().st_size / 1e6 * (60 * FPS / n)
            ra = random_access_ms(p, n, trials)
            print(f"{g:>5} {mb_min:>8.1f} {enc_ms:>13.1f} {ra:>17.1f}", flush=True)


if __name__ == "__main__":
    main()

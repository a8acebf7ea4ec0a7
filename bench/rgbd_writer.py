"""RGB-D HDF5 writer/loader figures on realistic 640x480 content (textured RGB, noisy depth with holes).

Prints: encode ms/frame (RGB JPEG, depth JPEG 2000, depth HTJ2K); the writer's sustained fps with its
workers and its backlog when fed at 30 fps; file size against a naive layout of the same data with a
physical next_obs (gzip); loader samples/s on the jpeg2000 and htj2k files for random transitions,
transitions with 4-frame stacks and sequences of 16, against a baseline that reopens the file and
decodes obs and next_obs separately for every sample (Pillow, as the reference loader does).
``--quick`` shortens every phase. Figures depend on machine load (printed at start and end).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import h5py
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rgbd_writer import (
    RgbdConfig,
    RgbdWriter,
    codecs,
)
from rgbd_writer.reader import SequenceDataset, TransitionDataset

H, W = 480, 640


class Scene:
    """A slowly moving camera over a textured table with boxes; depth noise grows with distance."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.rng = rng
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        self.yy, self.xx = yy, xx
        self.texture = (rng.random((H // 8 + 2, W // 8 + 2, 3)) * 255).astype(np.float32)

    def frame(self, t: int):
        rng, yy, xx = self.rng, self.yy, self.xx
        s = int(t * 3) % 8
        tex = np.kron(self.texture, np.ones((8, 8, 1), np.float32))[s : s + H, s : s + W]
        shade = 0.6 + 0.4 * np.sin(xx / 40.0 + t * 0.1)[..., None]
        rgb = tex * shade + 25 * np.sin(yy / 5.0 + xx / 9.0)[..., None] + rng.normal(0, 6, (H, W, 3))
        depth = 0.8 + 1.6 * yy / H + 0.05 * np.sin(xx / 30.0 + t * 0.05)
        for cx, cy, r, h in ((200, 260, 60, 0.25), (420, 300, 80, 0.35), (320 + 40 * np.sin(t / 20), 180, 40, 0.15)):
            m = (np.abs(xx - cx) < r) & (np.abs(yy - cy) < r * 0.7)
            depth = np.where(m, depth - h, depth)
            rgb[m] = rgb[m] * 0.5 + 90
        depth = depth + rng.normal(0, 1, (H, W)) * (0.0015 * depth**2)
        holes = rng.random((H // 16, W // 16)) < 0.06
        depth[np.kron(holes, np.ones((16, 16), bool))] = 0.0  # sensor shadows
        depth[rng.random((H, W)) < 0.01] = np.nan
        depth[:, :12] = 9.0  # beyond range at the image edge
        return rgb.clip(0, 255).astype(np.uint8), depth.astype(np.float32)


def ms_per(fn, n):
    """(wall ms, process CPU ms) per call. CPU time is what contention does not inflate much; it
    includes OpenJPEG's own worker thread, which runs the encode while the calling thread waits.
    """
    fn()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        out = fn()
    return (time.perf_counter() - t0) / n * 1000, (time.process_time() - c0) / n * 1000, out


def bench_encode(frames, n):
    rgb, depth = frames[0]
    mm = codecs.quantize_depth(depth, 0.1, 6.0)
    print("== encode, one thread, per 640x480 frame: wall ms / CPU ms (bytes)")
    for name, fn in (
        ("rgb jpeg q88 (libjpeg-turbo)", lambda: codecs.encode_rgb_jpeg(rgb, 88)),
        ("depth quantise (numpy)", lambda: codecs.quantize_depth(depth, 0.1, 6.0).tobytes()),
        ("depth jpeg2000 default (bypass, glymur)", lambda: codecs.encode_depth(mm, "jpeg2000")),
        ("depth jpeg2000_strict (glymur)", lambda: codecs.encode_depth(mm, "jpeg2000_strict")),
        ("depth jpeg2000_strict (Pillow)", lambda: _pillow_jp2(mm)),
        ("depth htj2k (OpenJPH)", lambda: codecs.encode_depth(mm, "htj2k")),
    ):
        ms, cpu, out = ms_per(fn, n)
        print(f"  {name:42s} {ms:7.1f} / {cpu:6.1f} ms  {len(out):8d} B")
    raw = mm.nbytes
    for prof in codecs.DEPTH_PROFILES:
        print(f"  depth {prof} ratio vs raw uint16: {raw / len(codecs.encode_depth(mm, prof)):.2f}x")


def _pillow_jp2(mm):
    buf = io.BytesIO()
    Image.fromarray(mm).save(buf, format="JPEG2000", irreversible=False)
    return buf.getvalue()


def write_file(path, frames, n_frames, codec, episode_len, pace_hz=None):
    """Write n_frames observations in episodes; returns (elapsed s, stats, backlog samples)."""
    if os.path.exists(path):
        os.unlink(path)
    cfg = RgbdConfig(width=W, height=H, depth_codec=codec, rgb_source="bench/rgb", depth_source="bench/depth")
    w = RgbdWriter(path, cfg)
    backlog = []
    t0, c0 = time.perf_counter(), time.process_time()
    k = 0
    while k < n_frames:
        w.start_episode()
        steps = min(episode_len, n_frames - k - 1)
        for t in range(steps + 1):
            if pace_hz:
                delay = t0 + k / pace_hz - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            rgb, depth = frames[k % len(frames)]
            w.add_observation(rgb, depth, {"joint": np.full(6, k, np.float32)})
            if t < steps:
                w.add_transition(np.full(7, 0.1, np.float32), 0.0)
            backlog.append(w.backlog)
            k += 1
        if steps >= 1:
            w.end_episode()
        else:
            w.discard_episode()
    elapsed = time.perf_counter() - t0
    stats = w.stats
    stats.cpu_s = time.process_time() - c0  # all threads of this process: caller, encoders, sink
    w.close()
    return elapsed, stats, backlog


def bench_writer(frames, n_fast, seconds_paced, tmp):
    print(f"== writer, {RgbdConfig().workers} encoder threads, 640x480 RGB-D")
    for codec in codecs.DEPTH_PROFILES:
        el, st, _ = write_file(os.path.join(tmp, "w.hdf5"), frames, n_fast, codec, 60)
        print(
            f"  {codec:15s} flat out: {n_fast / el:6.1f} fps sustained ({n_fast} frames incl. commits), "
            f"back-pressure waits {st.backpressure_waits} ({st.backpressure_wait_s:.2f} s), "
            f"encode {st.encode_s / max(1, st.frames_written) * 1000:.1f} ms/frame of worker wall time; "
            f"process CPU {st.cpu_s / n_fast * 1000:.1f} ms/frame -> capacity on 2 free cores "
            f"~{2000 / (st.cpu_s / n_fast * 1000):.0f} fps"
        )
        n = int(seconds_paced * 30)
        el, st, bl = write_file(os.path.join(tmp, "w.hdf5"), frames, n, codec, 150, pace_hz=30)
        q = len(bl) // 4
        print(
            f"  {codec:15s} fed at 30 fps for {n} frames: took {el:.1f} s ({n / el:.1f} fps), backlog mean "
            f"{np.mean(bl[:q]):.1f} (first quarter) -> {np.mean(bl[-q:]):.1f} (last quarter), max {max(bl)}, "
            f"back-pressure waits {st.backpressure_waits}"
        )


def naive_file(path, frames, T):
    """The same episode with a physical next_obs, raw arrays, gzip - what the optimized layout avoids."""
    with h5py.File(path, "w") as f:
        for grp, off in (("obs", 0), ("next_obs", 1)):
            g = f.create_group(grp)
            rgb = g.create_dataset("rgb", (T, H, W, 3), np.uint8, chunks=(1, H, W, 3), compression="gzip")
            dep = g.create_dataset("depth", (T, H, W), np.uint16, chunks=(1, H, W), compression="gzip")
            for t in range(T):
                r, d = frames[(t + off) % len(frames)]
                rgb[t] = r
                dep[t] = codecs.quantize_depth(d, 0.1, 6.0)
        f.create_dataset("actions", data=np.full((T, 7), 0.1, np.float32))
    return os.path.getsize(path)


def bench_size(frames, T, tmp):
    print(f"== file size, one episode of {T} transitions")
    sizes = {}
    for codec in ("htj2k", "jpeg2000"):  # both files are kept for the loader
        ours = os.path.join(tmp, f"ours_{codec}.hdf5")
        write_file(ours, frames, T + 1, codec, T)
        sizes[codec] = os.path.getsize(ours)
        print(f"  optimized ({codec}): {sizes[codec] / 1e6:7.1f} MB")
    naive = naive_file(os.path.join(tmp, "naive.hdf5"), frames, T)
    print(
        f"  naive obs+next_obs raw arrays, gzip: {naive / 1e6:7.1f} MB -> naive/optimized = "
        f"{naive / sizes['jpeg2000']:.2f}x (jpeg2000), {naive / sizes['htj2k']:.2f}x (htj2k)"
    )
    return {codec: os.path.join(tmp, f"ours_{codec}.hdf5") for codec in sizes}


def baseline_transition(path, i, stack=1):
    """Reference-loader style: reopen, decode obs and next_obs (each a stack of ``stack`` frames) apart."""
    with h5py.File(path, "r") as f:
        o, n = int(f["index/obs_index"][i]), int(f["index/next_obs_index"][i])
        first = int(f["index/obs_offsets"][int(f["index/episode_id"][i])])
        out = []
        for r in (o, n):
            frames = []
            for q in range(r - stack + 1, r + 1):
                q = max(q, first)
                rgb = np.asarray(Image.open(io.BytesIO(bytes(f["observations/rgb_jpeg"][q]))).convert("RGB"))
                dep = np.asarray(Image.open(io.BytesIO(bytes(f["observations/depth_jp2"][q]))))
                frames.append((rgb.astype(np.float32) / 255, dep.astype(np.float32) * 0.001))
            out.append(frames)
        return out, f["transitions/actions"][i]


def rate(fn, n):
    """(samples/s wall, CPU ms/sample over all threads)."""
    fn(0)
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(1, n + 1):
        fn(k)
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1000


def two_thread_ceiling(path, n):
    """Throughput of two threads decoding independent depth frames over one thread: the most any
    two-thread loader can gain over a one-thread baseline that does the same decode work.
    """
    with h5py.File(path, "r") as f:
        data = [bytes(f["observations/depth_jp2"][i]) for i in range(min(n, len(f["observations/depth_jp2"])))]

    def run(items):
        for d in items:
            codecs.decode_depth_fast(d)

    run(data[:2])
    t0 = time.perf_counter()
    run(data)
    one = len(data) / (time.perf_counter() - t0)
    threads = [threading.Thread(target=run, args=(data,)) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2 * len(data) / (time.perf_counter() - t0) / one


def bench_loader(path, profile, n_tr, n_seq):
    print(f"== loader on the {profile} file vs a reopen-and-decode-apart baseline (samples/s wall; CPU ms/sample)")
    rng = np.random.default_rng(0)
    ds = TransitionDataset(path)
    ds1 = TransitionDataset(path, threads=1)
    picks = rng.integers(0, len(ds), 10_000)
    runs = {
        "base": lambda k: baseline_transition(path, int(picks[k])),
        "ours": lambda k: ds[int(picks[k])],
        "one": lambda k: ds1[int(picks[k])],
    }
    best: dict = {}
    for _ in range(2):  # alternate, keep each one's best round: whoever runs first is not penalised
        for name, fn in runs.items():
            r = rate(fn, n_tr)
            best[name] = max(best.get(name, r), r)
    (base, base_cpu), (ours, ours_cpu), (one, _) = best["base"], best["ours"], best["one"]
    print(
        f"  random transitions:   baseline {base:6.2f}/s ({base_cpu:3.0f} ms), loader {ours:6.2f}/s ({ours_cpu:3.0f} ms) "
        f"= {ours / base:.2f}x; with 1 decode thread {one:6.2f}/s = {one / base:.2f}x"
    )
    scale = two_thread_ceiling(path, 24)
    print(
        f"    both decode the same 2 frames per sample, so the bound here is the 1-thread ratio x the "
        f"machine's two-thread decode scaling = {one / base:.2f} x {scale:.2f} = {one / base * scale:.2f}x"
    )
    st = TransitionDataset(path, frame_stack=4)
    b, b_cpu = rate(lambda k: baseline_transition(path, int(picks[k]), stack=4), max(4, n_tr // 4))
    o, o_cpu = rate(lambda k: st[int(picks[k])], max(4, n_tr // 4))
    print(
        f"  transitions, stack 4: baseline {b:6.2f}/s ({b_cpu:3.0f} ms), loader {o:6.2f}/s ({o_cpu:3.0f} ms) "
        f"= {o / b:.2f}x  [5 decodes per sample instead of 8]"
    )
    sq = SequenceDataset(path, seq_len=16)
    spicks = rng.integers(0, len(sq), 10_000)

    def baseline_seq(k):
        e, s = sq.windows[int(spicks[k])]
        t0 = int(sq.file.transition_offsets[e]) + int(s)
        return [baseline_transition(path, t0 + j) for j in range(16)]

    b, b_cpu = rate(baseline_seq, n_seq)
    o, o_cpu = rate(lambda k: sq[int(spicks[k])], n_seq)
    print(
        f"  sequences of 16:      baseline {b:6.3f}/s ({b_cpu:3.0f} ms), loader {o:6.3f}/s ({o_cpu:3.0f} ms) "
        f"= {o / b:.2f}x  [17 decodes per sequence instead of 32]"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    q = args.quick
    print(f"load average at start: {os.getloadavg()}, cpus: {os.cpu_count()}")
    scene = Scene()
    frames = [scene.frame(t) for t in range(8 if q else 24)]
    with tempfile.TemporaryDirectory(prefix="rgbd_bench_") as tmp:
        bench_encode(frames, 4 if q else 10)
        bench_writer(frames, 60 if q else 180, 4 if q else 12, tmp)
        paths = bench_size(frames, 30 if q else 90, tmp)
        for profile in ("jpeg2000", "htj2k"):
            bench_loader(paths[profile], profile, 12 if q else 40, 4 if q else 8)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()

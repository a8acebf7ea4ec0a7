"""piper-repair throughput: retiming a multi-minute whole-ms root, as a multiple of real time.

Builds a root with the project's writer (2 cameras 640x480 at 30 fps, nominal mode, the panning
textured scene with sensor noise of ``bench/video_gop.py``, so packet sizes are realistic: ~8 MB/min
per camera; one episode encoded, the others committed as copies of it) with rows at k/fps rounded to
the nearest float32 (what recorders wrote before the up-rounding), remuxes its videos to whole-ms PTS
(time base 1/1000, what earlier recorders wrote), then runs ``repair_root`` on it (videos
remuxed and every episode's parquet timestamps moved onto the grid) and prints:
* repair wall time and recorded seconds / wall seconds (x real time; target >= 50x), per camera-hour;
* the dry run (plan only) time;
* baselines measured in the same run on the same files: copying every video (read + write + fsync,
  the I/O floor) and a plain remux without planning or verification (the old -> whole-ms step);
* that the repaired root validates (``validate_root``, packet PTS only) and how long that takes.

The machine is shared: note the load average printed at the start.

Usage: .venv/bin/python bench/repair.py [--minutes 3] [--episode-s 60] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import av

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fractions import Fraction  # noqa: E402

from piper_recorder.lerobot.format import fsutil  # noqa: E402
from piper_recorder.lerobot.maintenance.retime import repair_root  # noqa: E402
from piper_recorder.lerobot.validate import validate_root  # noqa: E402

FPS, H, W = 30, 480, 640
CAMS = ("cam_front", "cam_wrist")
MS = Fraction(1, 1000)


def build_root(root: Path, episodes: int, seconds: float) -> None:
    """Record one episode with the writer (real encoding), then commit copies of it as the other
    episodes through the writer's ``import_episode`` (the converter's path): realistic files, and
    the build costs one episode of encoding whatever the root's length.
    """
    import pyarrow.parquet as pq
    from lerobot_writer import _rows
    from video_gop import make_scene

    from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig

    pool = list(make_scene(120))
    cfg = WriterConfig(fps=FPS, cameras={c: CameraSpec(H, W) for c in CAMS}, video=VideoConfig(max_block_s=None))
    with LeRobotWriter(root, cfg) as w:
        w.start_episode("bench")
        for k in range(int(seconds * FPS)):
            t = k / FPS  # float32-nearest row times, as older recorders wrote
            w.add_row(t, _rows(t, 0))
            for c, cam in enumerate(CAMS):
                w.add_frame(cam, pool[(k + 37 * c) % len(pool)], t)
        rec = w.save_episode({"timestamp_mode": "nominal"})
        table = pq.read_table(root / "data/chunk-000/episode_000000.parquet").to_pydict()
        cols = {k: v for k, v in table.items() if k.startswith(("observation.", "action."))}
        for _e in range(1, episodes):
            vids = {}
            for cam in CAMS:
                vids[cam] = root.parent / f"import_{cam}.mp4"
                shutil.copyfile(root / f"videos/chunk-000/observation.images.{cam}/episode_000000.mp4", vids[cam])
            w.import_episode("bench", table["timestamp"], cols, vids, None, rec)


def to_whole_ms(path: Path) -> None:
    """Remux as pre-issue-11 recorders wrote: PTS floor(t * 1000) in 1/1000 (no checks, no fsync)."""
    tmp = path.with_name(path.name + ".ms")
    with (
        av.open(str(path)) as inp,
        av.open(str(tmp), "w", format="mp4", options={"video_track_timescale": "1000"}) as out,
    ):
        s_in = inp.streams.video[0]
        s_out = out.add_stream_from_template(s_in)
        s_out.time_base = MS
        for p in inp.demux(s_in):
            if p.size:
                ms = int(p.pts * p.time_base * 1000)
                p.stream, p.time_base, p.pts, p.dts, p.duration = s_out, MS, ms, ms, 33
                out.mux(p)
    tmp.replace(path)


def copy_all(paths: list[Path], dst: Path) -> None:
    for i, p in enumerate(paths):
        q = dst / f"{i}.mp4"
        shutil.copyfile(p, q)
        fsutil.fsync_file(q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="recorded minutes in the root (default 3)")
    ap.add_argument("--episode-s", type=float, default=60.0, help="episode length (default 60 s)")
    ap.add_argument("--quick", action="store_true", help="1 minute in 20 s episodes")
    a = ap.parse_args()
    if a.quick:
        a.minutes, a.episode_s = 1.0, 20.0
    episodes = max(1, round(a.minutes * 60 / a.episode_s))
    recorded = episodes * a.episode_s
    print(
        f"load average {os.getloadavg()[0]:.2f} (2-core shared machine); {episodes} episodes x {a.episode_s:.0f} s, "
        f"{len(CAMS)} cameras {W}x{H} @ {FPS} fps = {recorded:.0f} s recorded, {recorded * len(CAMS):.0f} "
        f"camera-seconds"
    )
    with tempfile.TemporaryDirectory(prefix="bench_repair_") as tmp:
        root = Path(tmp) / "root"
        t0 = time.perf_counter()
        build_root(root, episodes, a.episode_s)
        vids = sorted((root / "videos").rglob("*.mp4"))
        size = sum(v.stat().st_size for v in vids)
        print(
            f"built the root with the writer in {time.perf_counter() - t0:.1f} s: {len(vids)} videos, "
            f"{size / 1e6:.1f} MB ({size / 1e6 / (recorded / 60) / len(CAMS):.1f} MB/min per camera)"
        )

        t0 = time.perf_counter()
        for v in vids:
            to_whole_ms(v)
        remux_s = time.perf_counter() - t0
        assert any("rows have no frame" in p for p in validate_root(root)), "whole-ms root should fail"

        copies = Path(tmp) / "copies"
        copies.mkdir()
        t0 = time.perf_counter()
        copy_all(vids, copies)
        copy_s = time.perf_counter() - t0
        shutil.rmtree(copies)

        t0 = time.perf_counter()
        dry = repair_root(root, dry_run=True)
        dry_s = time.perf_counter() - t0
        assert sum(p.action == "rewrite" for p in dry.plans) == len(vids)
        assert sum(d.action == "rewrite" for d in dry.data) == episodes

        t0 = time.perf_counter()
        rep = repair_root(root)
        repair_s = time.perf_counter() - t0
        assert rep.rewritten == len(vids) and rep.data_rewritten == episodes

        t0 = time.perf_counter()
        problems = validate_root(root)
        validate_s = time.perf_counter() - t0

    print(
        f"repair:   {repair_s:6.2f} s wall = {recorded / repair_s:6.1f}x real time "
        f"({repair_s / (recorded * len(CAMS) / 3600):.1f} s per camera-hour; {rep.rewritten} videos remuxed, "
        f"{rep.data_rewritten} parquets' timestamps moved onto the grid); target >= 50x"
    )
    print(f"dry run:  {dry_s:6.2f} s = {recorded / dry_s:6.1f}x real time (plan only: reads packets and rows)")
    print(
        f"baseline: copy + fsync of every video {copy_s:6.2f} s = {recorded / copy_s:6.1f}x real time; "
        f"repair / copy = {repair_s / copy_s:.2f}"
    )
    print(
        f"baseline: plain remux to whole ms (no plan, no verify, no fsync) {remux_s:6.2f} s = "
        f"{recorded / remux_s:6.1f}x real time; repair / plain remux = {repair_s / remux_s:.2f}"
    )
    print(f"validate: {validate_s:6.2f} s after the repair, {'valid' if not problems else problems[:3]}")


if __name__ == "__main__":
    main()

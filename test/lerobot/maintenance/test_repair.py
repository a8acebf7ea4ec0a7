"""piper-repair on roots with whole-ms video PTS (as older recorders wrote them, before the 1/90000 s clock).

The roots come from the spec-built fixtures (PyAV directly, not the writer); the results are read
back with PyAV and pyarrow and checked in exact arithmetic, and by the validator.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from piper_recorder.lerobot.format import fsutil
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.maintenance.retime import repair_root
from piper_recorder.lerobot.validate import validate_root

from support.lerobot_fixtures import FINE, MS, small_root, write_video

pytestmark = pytest.mark.integration

EXE = str(Path(sys.executable).parent / "piper-repair")
CAMS = ("cam_front", "cam_wrist")
CAPTURE_MS = [0, 29, 64, 101, 130, 168, 199]  # episode 2 (7 rows): frames at capture times


def video(root: Path, ep: int, cam: str) -> Path:
    return root / f"videos/chunk-000/observation.images.{cam}/episode_{ep:06d}.mp4"


def videos(root: Path) -> list[Path]:
    return sorted((root / "videos").rglob("*.mp4"))


def packets(path: Path) -> tuple[Fraction, list[int], list[bytes], bytes, list[int]]:
    """(time base, pts, packet bytes, codec extradata, dts) with PyAV."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        out = [(p.pts, bytes(p), p.dts) for p in c.demux(s) if p.size]
        return (
            Fraction(s.time_base),
            [o[0] for o in out],
            [o[1] for o in out],
            s.codec_context.extradata,
            [o[2] for o in out],
        )


def frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def timestamps(root: Path, ep: int) -> list[float]:
    col = pq.read_table(root / f"data/chunk-000/episode_{ep:06d}.parquet").column("timestamp")
    return [float(x) for x in col.to_numpy()]  # float32 values, exact as float64


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_capture(root: Path, ep: int) -> None:
    p = root / "meta/episodes.jsonl"
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    lines[ep]["timestamp_mode"] = "capture"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))


def old_root(path: Path, lengths=(12, 9, 7)) -> Path:
    """Whole-ms root: nominal episodes (frame k at floor(float32(k/30) * 1000) ms) and, as the last
    episode, a capture-mode one with frames off the rows.
    """
    root = small_root(path, lengths=lengths, time_base=MS)
    last = len(lengths) - 1
    for c, cam in enumerate(CAMS):
        write_video(video(root, last, cam), lengths[-1], time_base=MS, pts=CAPTURE_MS, seed=c)
    set_capture(root, last)
    return root


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=120)


def assert_both_rules(root: Path, ep: int, cam: str) -> None:
    tb, pts, _, _, dts = packets(video(root, ep, cam))
    ts = timestamps(root, ep)
    assert tb == FINE and dts == pts and len(pts) == len(ts)
    for p, t in zip(pts, ts):
        exact = Fraction(t)
        assert p * tb <= exact and exact - p * tb < Fraction(1, 10_000), (ep, cam, p, t)


def test_repair_remuxes_bit_identical_packets_onto_the_fine_grid(tmp_path):
    root = old_root(tmp_path / "r")
    before = {v: packets(v) for v in videos(root)}
    decoded = {v: frames(v) for v in videos(root)}
    problems = validate_root(root)
    assert sum("rows have no frame at or before their timestamp" in p for p in problems) == 4  # nominal videos
    assert sum("capture mode: frames cannot be placed within" in p for p in problems) == 2

    hashes = {v: sha(v) for v in videos(root)}
    dry = run(root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("would rewrite videos/") == 6 and "nothing changed (dry run)" in dry.stdout
    assert "episode_000002.mp4: 7 frames, time base 1/1000 -> 1/90000 (capture" in dry.stdout
    assert "episode_000000.mp4: 12 frames, time base 1/1000 -> 1/90000 (nominal" in dry.stdout
    assert {v: sha(v) for v in videos(root)} == hashes and not list(root.rglob("*.tmp"))

    res = run(root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("rewrote videos/") == 6 and "6 videos: 6 rewritten" in res.stdout
    assert validate_root(root) == [] and validate_root(root, full=True) == []
    for v, (tb, _pts, data, extradata, _) in before.items():
        tb2, _pts2, data2, extradata2, _ = packets(v)
        assert tb == MS and tb2 == FINE
        assert data2 == data and extradata2 == extradata  # no re-encoding: same bytes
        assert all(np.array_equal(a, b) for a, b in zip(frames(v), decoded[v])) and len(frames(v)) == len(data)
    for ep in (0, 1):
        for cam in CAMS:
            assert_both_rules(root, ep, cam)
    for cam in CAMS:  # capture: the recorded millisecond, exactly, in the fine time base
        assert packets(video(root, 2, cam))[1] == [m * 90 for m in CAPTURE_MS]

    hashes = {v: sha(v) for v in videos(root)}
    again = run(root)
    assert again.returncode == 0 and "6 videos: 0 rewritten, 6 already 1/90000" in again.stdout
    assert {v: sha(v) for v in videos(root)} == hashes


def test_a_failed_rewrite_keeps_the_original_and_leaves_no_temp(tmp_path, monkeypatch):
    root = old_root(tmp_path / "r", lengths=(5, 4))
    hashes = {v: sha(v) for v in videos(root)}

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil, "replace", boom)
    with pytest.raises(OSError):
        repair_root(root)
    assert {v: sha(v) for v in videos(root)} == hashes and not list(root.rglob("*.tmp"))


def test_killed_mid_run_every_file_old_or_new_and_rerun_finishes(tmp_path):
    lengths = (9,) * 30 + (7,)
    root = old_root(tmp_path / "r", lengths=lengths)
    before = {v: (sha(v), packets(v)) for v in videos(root)}
    proc = subprocess.Popen([EXE, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("rewrote "), line
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        proc.stdout.close()
    new = 0
    for v, (digest, (_tb, _pts, data, extradata, _)) in before.items():
        now = packets(v)
        if now[0] == MS:
            assert sha(v) == digest  # untouched, byte for byte
        else:
            assert now[0] == FINE and now[2] == data and now[3] == extradata
            new += 1
    assert 1 <= new < len(before), "the kill should land mid-run"
    res = run(root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(before) - new} rewritten, {new} already 1/90000" in res.stdout
    assert not list(root.rglob("*.tmp")) and validate_root(root) == []
    for v, (_, (_, _, data, _, _)) in before.items():
        assert packets(v)[2] == data


def test_leftover_temp_is_removed_and_a_writer_lock_refuses(tmp_path):
    root = old_root(tmp_path / "r", lengths=(5, 4))
    stray = video(root, 0, "cam_front").with_name("episode_000000.mp4.tmp")
    stray.write_bytes(b"half a file")
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a recorder holding the root does
        res = run(root)
        assert res.returncode == 1 and "is open in a writer" in res.stderr
        assert packets(video(root, 0, "cam_front"))[0] == MS and stray.exists()
        assert run(root, "--dry-run").returncode == 0  # reading is fine
    finally:
        os.close(fd)
    res = run(root)
    assert res.returncode == 0 and "removed interrupted write" in res.stdout and not stray.exists()
    assert validate_root(root) == []


def test_frames_that_match_no_row_are_left_alone(tmp_path):
    root = old_root(tmp_path / "r", lengths=(6, 5))
    p = root / "meta/episodes.jsonl"
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    lines[0]["timestamp_mode"] = "nominal"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    odd = video(root, 0, "cam_wrist")
    write_video(odd, 6, time_base=MS, pts=[0, 30, 61, 95, 130, 160])  # not the rows' floor-ms
    digest = sha(odd)
    res = run(root)
    assert res.returncode == 1
    assert (
        "skipped videos/chunk-000/observation.images.cam_wrist/episode_000000.mp4: NOT repaired: nominal "
        "episode, but some frame's PTS matches no row timestamp" in res.stdout
    )
    assert sha(odd) == digest and "3 rewritten" in res.stdout
    timing = [p for p in validate_root(root) if "rows have no frame" in p]
    assert len(timing) == 1 and timing[0].startswith(str(odd.relative_to(root)))


def to_whole_ms(path: Path) -> None:
    """Remux a fine-PTS mp4 as the old recorders wrote it: PTS floor(t * 1000) in time base 1/1000."""
    tmp = path.with_name("ms.mp4")
    with (
        av.open(str(path)) as inp,
        av.open(str(tmp), "w", format="mp4", options={"video_track_timescale": "1000"}) as out,
    ):
        s_in = inp.streams.video[0]
        s_out = out.add_stream_from_template(s_in)
        s_out.time_base = MS
        for p in inp.demux(s_in):
            if not p.size:
                continue
            ms = int(p.pts * p.time_base * 1000)  # floor: non-negative Fraction -> int
            p.stream, p.time_base, p.pts, p.dts, p.duration = s_out, MS, ms, ms, 33
            out.mux(p)
    tmp.replace(path)


@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_repairing_an_old_recording_gives_what_the_writer_writes_now(tmp_path, version):
    """A root from the project's writer fed row times k/30 (what recorders did before rows sat on the rounded-up grid:
    timestamps rounded to the nearest float32, frames floored from them), downgraded to whole-ms PTS
    (what it wrote before that), repaired: parquet tables equal, and PTS and packets equal, those of
    the same recording written now (rows at grid_timestamp, k/30 rounded up); lerobot-doctor accepts it.
    """
    from piper_recorder.assembly.assembler import grid_timestamp
    from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, VideoConfig, WriterConfig

    from support.lerobot_data import H, W, index_frame, row_values

    def record(root: Path, time_of, lengths=(110, 104)) -> None:
        cfg = WriterConfig(
            fps=30,
            cameras={c: CameraSpec(H, W) for c in CAMS},
            video=VideoConfig(max_block_s=None),
            lerobot_version=version,
        )
        with LeRobotWriter(root, cfg) as w:
            for e, n in enumerate(lengths):  # >= 100 rows: lerobot-doctor warns below ACT chunk size
                w.start_episode("pick the cube")
                for k in range(n):
                    w.add_row(time_of(k), row_values(k / 30, e))
                    for cam in CAMS:
                        assert w.add_frame(cam, index_frame(k), time_of(k))
                w.save_episode({"timestamp_mode": "nominal"})

    root, ref = tmp_path / "ds", tmp_path / "now"
    record(root, lambda k: k / 30)
    record(ref, lambda k: grid_timestamp(k, 30))
    old = {v: packets(v) for v in videos(root)}
    for v in videos(root):
        to_whole_ms(v)
        assert packets(v)[0] == MS and packets(v)[2] == old[v][2]
    assert any("rows have no frame" in p for p in validate_root(root))
    res = run(root)
    assert (
        res.returncode == 0 and "4 rewritten" in res.stdout and "2 nominal episode parquets: 2 rewritten" in res.stdout
    ), res.stdout + res.stderr
    for v in videos(root):
        tb, pts, _data, _extradata, _ = packets(ref / v.relative_to(root))
        assert packets(v)[:4] == (tb, pts, old[v][2], old[v][3])
    for p in sorted(root.rglob("*.parquet")):
        assert pq.read_table(p).equals(pq.read_table(ref / p.relative_to(root)), check_metadata=True)
    doctor = Path(sys.executable).parent / "lerobot-doctor"
    r = subprocess.run(
        [str(doctor), "check", str(root), "--ci", "--fail-on", "warn"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    # stats.json (and v2.1's episodes_stats.jsonl) keep the old timestamp entries: they move by at
    # most one float32 step, well inside the validator's and lerobot-doctor's tolerance (checked above)
    ref_stats = json.loads((ref / "meta/stats.json").read_text())["timestamp"]
    kept_stats = json.loads((root / "meta/stats.json").read_text())["timestamp"]
    assert kept_stats != ref_stats  # the nearest-rounded rows' stats, kept ...
    assert all(np.allclose(ref_stats[k], kept_stats[k], rtol=1e-6, atol=0) for k in ref_stats)  # ... but close
    assert validate_root(root, full=True) == []
    # a writer resuming the root rebuilds its cached per-episode stats from the rewritten parquets
    # (newer than the cache): with one more episode, the stats files equal the reference's exactly
    grid = lambda k: grid_timestamp(k, 30)  # noqa: E731
    record(root, grid, lengths=(100,))
    record(ref, grid, lengths=(100,))
    names = ["stats.json"] + (["episodes_stats.jsonl"] if version == "v2.1" else [])
    for name in names:
        assert (root / "meta" / name).read_bytes() == (ref / "meta" / name).read_bytes(), name
    assert validate_root(root) == []


def nearest_root(path: Path, time_base: Fraction, lengths=(41, 9)) -> Path:
    """A root as recorders wrote it before the up-rounding: timestamps k/30 rounded to the NEAREST
    float32 (below k/30 for rows 17, 19, ...), frame PTS floored from them (in ``time_base``).
    """
    return small_root(path, lengths=lengths, time_base=time_base, round_up=False)


def data_path(root: Path, ep: int) -> Path:
    return root / f"data/chunk-000/episode_{ep:06d}.parquet"


@pytest.mark.parametrize("time_base", [MS, FINE], ids=["whole_ms", "fine"])
def test_nearest_rounded_timestamps_are_moved_onto_the_grid(tmp_path, time_base):
    """Nominal episodes: the parquet's timestamp column becomes k/30 rounded up to float32, every other
    column, the schema and its metadata unchanged; the videos' packets stay bit-identical at PTS
    floor(t * 90000) = 3000 k; LeRobot's lookup then gets every row's frame.
    """
    root = nearest_root(tmp_path / "r", time_base)
    below = [k for k, t in enumerate(timestamps(root, 0)) if Fraction(t) < Fraction(k, 30)]
    assert below and not [k for k, t in enumerate(timestamps(root, 1)) if Fraction(t) < Fraction(k, 30)]
    assert any("get another frame from LeRobot's lookup" in p for p in validate_root(root))
    before_tables = {e: pq.read_table(data_path(root, e)) for e in (0, 1)}
    before_meta = {e: pq.ParquetFile(data_path(root, e)).metadata for e in (0, 1)}
    before = {v: packets(v) for v in videos(root)}
    hashes = {p: sha(p) for p in [*videos(root), data_path(root, 0), data_path(root, 1)]}

    dry = run(root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would rewrite data/chunk-000/episode_000000.parquet: {len(below)} row timestamps moved up" in dry.stdout
    assert "2 nominal episode parquets: 1 to rewrite, 1 on the grid" in dry.stdout
    assert {p: sha(p) for p in hashes} == hashes and not list(root.rglob("*.tmp"))

    res = run(root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"rewrote data/chunk-000/episode_000000.parquet: {len(below)} row timestamps" in res.stdout
    want = lambda k: Fraction(k, 30)  # noqa: E731
    for e in (0, 1):
        after = pq.read_table(data_path(root, e))
        meta = pq.ParquetFile(data_path(root, e)).metadata
        assert after.schema.equals(before_tables[e].schema, check_metadata=True)
        assert after.schema.metadata == before_tables[e].schema.metadata
        assert meta.num_row_groups == before_meta[e].num_row_groups and meta.num_rows == before_meta[e].num_rows
        assert [meta.row_group(0).column(i).compression for i in range(meta.num_columns)] == [
            before_meta[e].row_group(0).column(i).compression for i in range(meta.num_columns)
        ]
        for name in after.column_names:
            if name != "timestamp":
                assert after.column(name).equals(before_tables[e].column(name)), name
        ts = after.column("timestamp").to_numpy()
        assert ts.dtype == np.float32
        for k, t in enumerate(ts):  # the smallest float32 >= k/30, independently
            assert Fraction(float(t)) >= want(k) and Fraction(float(np.nextafter(t, np.float32(-1)))) < want(k)
    for v, (_, _, data, extradata, _) in before.items():
        tb, pts, data2, extradata2, dts = packets(v)
        assert tb == FINE and data2 == data and extradata2 == extradata and dts == pts
        assert pts == [3000 * k for k in range(len(pts))]
    for e in (0, 1):
        for cam in CAMS:
            assert_both_rules(root, e, cam)
    assert validate_root(root) == [] and validate_root(root, full=True) == []

    hashes = {p: sha(p) for p in hashes}
    again = run(root)
    assert again.returncode == 0 and "4 videos: 0 rewritten, 4 already 1/90000" in again.stdout
    assert "2 nominal episode parquets: 0 rewritten, 2 on the grid" in again.stdout
    assert {p: sha(p) for p in hashes} == hashes


def test_killed_between_videos_and_parquet_rerun_finishes(tmp_path, monkeypatch):
    """Videos go first, then their episode's parquet: a failure (or kill) at the parquet's rename
    leaves the parquet byte for byte as it was and no temp file; the videos, already on the grid, are
    skipped by the re-run, which rewrites the parquet.
    """
    root = nearest_root(tmp_path / "r", MS)
    parquet = data_path(root, 0)
    digest = sha(parquet)
    real = fsutil.replace

    def kill_at_parquet(src, dst):
        if str(dst).endswith(".parquet"):
            raise KeyboardInterrupt("killed")
        real(src, dst)

    monkeypatch.setattr(fsutil, "replace", kill_at_parquet)
    with pytest.raises(KeyboardInterrupt):
        repair_root(root)
    assert sha(parquet) == digest and not list(root.rglob("*.tmp"))
    assert all(packets(video(root, 0, cam))[0] == FINE for cam in CAMS)
    assert all(packets(video(root, 1, cam))[0] == MS for cam in CAMS)  # episode 1 not reached
    assert any("rows have no frame at or before" in p for p in validate_root(root))  # frames now past rows
    monkeypatch.setattr(fsutil, "replace", real)
    res = run(root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 videos: 2 rewritten, 2 already 1/90000" in res.stdout
    assert "2 nominal episode parquets: 1 rewritten, 1 on the grid" in res.stdout
    assert validate_root(root, full=True) == []
    for cam in CAMS:
        assert_both_rules(root, 0, cam)


def test_not_a_root(tmp_path):
    with pytest.raises(DatasetError, match="not a LeRobot root"):
        repair_root(tmp_path)
    res = run(tmp_path)  # a directory that is no root: unusable (1)
    assert res.returncode == 1 and "not a LeRobot root" in res.stderr
    res = run(tmp_path / "nope")  # no directory at all: a bad argument (2, one line)
    assert res.returncode == 2 and res.stderr.strip() == f"piper-repair: {tmp_path / 'nope'}: does not exist"

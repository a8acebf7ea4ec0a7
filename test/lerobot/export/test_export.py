"""piper-export: v2.1 and v3.0 outputs read back with independent readers (pyarrow, PyAV, json,
lerobot-doctor), appends, kills (an exception mid-export and a SIGKILL), and the refusals (exit 2).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from piper_recorder.lerobot.export import video_concat
from piper_recorder.lerobot.export.operation import export
from piper_recorder.lerobot.export.source import ExportError
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
from piper_recorder.lerobot.writer.video_encoder import VideoConfig

from support.lerobot_data import H, W, frame_index_of, index_frame, row_values, tree_hashes
from support.lerobot_fixtures import small_root
from support.paths import ROOT

FPS = 30
CAMS = ("cam_front", "cam_wrist")
BIN = ROOT / ".venv" / "bin"


def record(root: Path, lengths: list[int], seed0: int = 0, cams=CAMS) -> None:
    """Episodes recorded by the real writer; camera frame k shows k in its pixels."""
    cfg = WriterConfig(
        fps=FPS, cameras={c: CameraSpec(H, W) for c in cams}, video=VideoConfig(max_block_s=None)
    )  # never drop a frame on a loaded machine
    with LeRobotWriter(root, cfg) as w:
        for j, n in enumerate(lengths):
            w.start_episode(("pick", "place")[(seed0 + j) % 2])
            for k in range(n):
                t = k / FPS
                w.add_row(t, row_values(t, seed0 + j))
                for cam in cams:
                    assert w.add_frame(cam, index_frame(k), t)
            w.save_episode({"late_rows": 0})


# ---- independent reading of a v3.0 export ---------------------------------------------------
def packets(path: Path) -> tuple[list[int], list[int], list[bytes], object]:
    """(pts, duration, payload bytes) of every packet, and the time base, with PyAV."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        out = [(p.pts, p.duration, bytes(p)) for p in c.demux(s) if p.pts is not None]
        return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out], s.time_base


def decoded(path: Path) -> tuple[list[int], list[int], object]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        frames = [(f.pts, frame_index_of(f.to_ndarray(format="rgb24"))) for f in c.decode(s)]
        return [f[0] for f in frames], [f[1] for f in frames], s.time_base


def check_v30(out: Path, src: Path) -> dict:
    """Everything a v3.0 reader relies on, checked against the v2.x source; returns a summary."""
    info = json.loads((out / "meta/info.json").read_text())
    src_info = json.loads((src / "meta/info.json").read_text())
    src_eps = [json.loads(x) for x in (src / "meta/episodes.jsonl").read_text().splitlines()]
    src_tasks = [json.loads(x) for x in (src / "meta/tasks.jsonl").read_text().splitlines()]
    assert info["codebase_version"] == "v3.0"
    assert "total_chunks" not in info and "total_videos" not in info
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["total_episodes"] == len(src_eps)
    assert info["total_frames"] == sum(e["length"] for e in src_eps)
    assert info["total_tasks"] == len(src_tasks) and info["splits"] == {"train": f"0:{len(src_eps)}"}
    assert info["fps"] == FPS and info["chunks_size"] == 1000
    for key, feat in info["features"].items():
        want = dict(src_info["features"][key])
        if feat["dtype"] != "video":
            want["fps"] = FPS
        assert feat == want, key
    vkeys = [k for k, f in info["features"].items() if f["dtype"] == "video"]

    tasks = pq.read_table(out / "meta/tasks.parquet")
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["__index_level_0__"]
    assert tasks.to_pylist() == [{"task_index": t["task_index"], "__index_level_0__": t["task"]} for t in src_tasks]

    meta_files = sorted((out / "meta/episodes").glob("*/*.parquet"))
    rows = pa.concat_tables([pq.read_table(f) for f in meta_files]).to_pylist()
    assert [r["episode_index"] for r in rows] == list(range(len(src_eps)))
    for f in meta_files:  # each file's rows name the file they are in
        chunk, file = int(f.parent.name[6:]), int(f.stem[5:])
        assert {
            (r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) for r in pq.read_table(f).to_pylist()
        } == {(chunk, file)}

    # data: rows identical to the source, ranges contiguous, each episode in the file it names
    start = 0
    for r, e in zip(rows, src_eps):
        assert r["tasks"] == e["tasks"] and r["length"] == e["length"]
        assert (r["dataset_from_index"], r["dataset_to_index"]) == (start, start + e["length"])
        start += e["length"]
        data = pq.read_table(
            out / info["data_path"].format(chunk_index=r["data/chunk_index"], file_index=r["data/file_index"])
        )
        mine = data.filter(pc.equal(data["episode_index"], r["episode_index"]))
        theirs = pq.read_table(src / f"data/chunk-000/episode_{r['episode_index']:06d}.parquet")
        assert mine.num_rows == e["length"]
        assert mine.select(theirs.column_names).to_pylist() == theirs.to_pylist()
        assert mine["index"].to_pylist() == list(range(r["dataset_from_index"], r["dataset_to_index"]))
        for key, feat in info["features"].items():
            assert r[f"stats/{key}/count"] == [e["length"] if feat["dtype"] != "video" else r[f"stats/{key}/count"][0]]
    data_files = sorted((out / "data").glob("*/*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in data_files) == info["total_frames"]

    # videos: the v3.0 lookup (frame at from_timestamp + timestamp) on every row of every camera
    n_video_files = 0
    for key in vkeys:
        files = {}
        for r in rows:
            files.setdefault((r[f"videos/{key}/chunk_index"], r[f"videos/{key}/file_index"]), []).append(r)
        n_video_files += len(files)
        for (chunk, fi), eps in files.items():
            path = out / info["video_path"].format(video_key=key, chunk_index=chunk, file_index=fi)
            pts, dur, payload, tb = packets(path)
            dec_pts, dec_idx, _ = decoded(path)
            assert dec_pts == pts
            sec = [p * tb.numerator / tb.denominator for p in pts]  # float64, correctly rounded
            avg_fps = len(pts) / ((pts[-1] + dur[-1]) * tb.numerator / tb.denominator)
            assert eps[0][f"videos/{key}/from_timestamp"] == 0.0
            position = 0
            for r in eps:
                ep = r["episode_index"]
                lo, hi = r[f"videos/{key}/from_timestamp"], r[f"videos/{key}/to_timestamp"]
                inside = [j for j, t in enumerate(sec) if lo <= t < hi]
                assert inside == list(range(position, position + r["length"]))
                assert sec[inside[0]] == lo  # from_timestamp is the first frame's time exactly
                ts = pq.read_table(src / f"data/chunk-000/episode_{ep:06d}.parquet")["timestamp"].to_numpy()
                for k, t in enumerate(ts):
                    query = lo + float(t)  # LeRobot: from_timestamp + timestamp (float64)
                    q32 = np.float32(query)
                    dist = np.abs(q32 - np.asarray(sec, np.float32))
                    j = int(np.argmin(dist))  # nearest frame, compared in float32 as LeRobot does
                    assert j == position + k and dist[j] < 1e-4
                    assert pts[j] == j * 90000 // FPS  # the frame grid, as LeRobot's own files
                    assert abs(query - sec[j]) < 1e-4
                    assert round(query * avg_fps) == j  # torchcodec's index rule
                    assert dec_idx[j] == k  # the decoded picture is the row's frame
                src_path = src / f"videos/chunk-000/{key}/episode_{ep:06d}.mp4"
                assert payload[position : position + r["length"]] == packets(src_path)[2]  # bit-identical
                position += r["length"]
            assert position == len(pts)
            if len(eps) > 1:
                for a, b in itertools.pairwise(eps):
                    assert a[f"videos/{key}/to_timestamp"] == b[f"videos/{key}/from_timestamp"]

    stats = json.loads((out / "meta/stats.json").read_text())
    assert set(stats) == set(info["features"])
    assert stats["observation.state"]["count"] == [info["total_frames"]]
    all_state = pa.concat_tables([pq.read_table(f, columns=["observation.state"]) for f in data_files])
    s = np.asarray(all_state["observation.state"].to_pylist(), np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], s.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["min"], s.min(0), rtol=1e-6)
    for key in vkeys:
        assert set(stats[key]) == {"min", "max", "mean", "std", "count", "q01", "q99"}
        assert all(np.asarray(stats[key][s]).shape == (3, 1, 1) for s in ("min", "max", "mean", "std", "q01", "q99"))
    for name in ("modality.json",):
        assert (out / "meta" / name).read_bytes() == (src / "meta" / name).read_bytes()
    return {
        "episodes": len(rows),
        "data_files": len(data_files),
        "meta_files": len(meta_files),
        "video_files": n_video_files,
    }


# ---- v3.0 -----------------------------------------------------------------------------------
@pytest.mark.integration
def test_v30_export_reads_back_with_pyarrow_and_pyav(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [110, 117, 124])
    res = export(src, "v3.0", out)
    assert (res.episodes, res.added, res.frames) == (3, 3, 351)
    summary = check_v30(out, src)
    assert summary == {"episodes": 3, "data_files": 1, "meta_files": 1, "video_files": 2}
    assert not any(p.name.startswith(".v30.export") and p.is_dir() for p in tmp_path.iterdir())
    # lerobot-doctor reads v3.0 too
    r = subprocess.run(
        [str(BIN / "lerobot-doctor"), "check", str(out), "--ci", "--fail-on", "warn"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_v30_file_size_limits_split_files(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [31, 32, 33, 34])
    export(src, "v3.0", out, data_files_size_in_mb=0.002, video_files_size_in_mb=0.006)
    summary = check_v30(out, src)
    assert summary["data_files"] > 1 and summary["video_files"] == 4  # 2 episodes per mp4
    info = json.loads((out / "meta/info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (0.002, 0.006)


def test_v30_file_duration_cap_and_old_millisecond_pts(tmp_path, monkeypatch):
    """The fixture root has 1/1000 PTS (floor ms): the export restamps them onto the rows."""
    src, out = tmp_path / "src", tmp_path / "v30"
    small_root(src, lengths=(40, 33, 31))
    monkeypatch.setattr("piper_recorder.lerobot.export.v30.MAX_FILE_S", 2.5)  # two episodes per file
    export(src, "v3.0", out)
    info = json.loads((out / "meta/info.json").read_text())
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    key = "observation.images.cam_front"
    assert [r[f"videos/{key}/file_index"] for r in rows] == [0, 0, 1]
    assert info["total_frames"] == 104
    for fi in (0, 1):
        _pts, _, _, tb = packets(out / f"videos/{key}/chunk-000/file-{fi:03d}.mp4")
        assert tb == video_concat.TIME_BASE


def test_grid_rows_meet_lerobot_rules_across_a_whole_file():
    """Rows float32(k/30) of 10 s episodes back to back up to the file cap, frames on the grid:
    LeRobot's float32 tolerance, the float64 distance and torchcodec's index rule hold everywhere.
    """
    step = video_concat.frame_step(30)
    ts = (np.arange(300) / 30).astype(np.float32)
    n_eps = int(video_concat.MAX_FILE_S * 30) // 300
    worst = 0.0
    for e in range(n_eps):
        first = 300 * e
        sec = (first + np.arange(300)) * step / 90000  # what PyAV/torchcodec report, float64
        query = first * step / 90000 + ts.astype(np.float64)  # from_timestamp + timestamp
        f32 = np.abs(query.astype(np.float32) - sec.astype(np.float32))
        worst = max(worst, float(f32.max()))
        assert np.all(f32 < 1e-4) and np.all(np.abs(query - sec) < 2e-5)
        assert np.all(np.round(query * 30) == first + np.arange(300))
    assert worst > 0  # float32 does round: the bound is what keeps it under the tolerance
    with pytest.raises(video_concat.ConcatError, match="no exact frame grid"):
        video_concat.frame_step(7)


@pytest.mark.integration
def test_rerun_appends_only_new_episodes_into_new_files(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [31, 33])
    export(src, "v3.0", out)
    before = {p.relative_to(out).as_posix(): p.stat().st_ino for p in out.rglob("*") if p.is_file()}
    hashes = tree_hashes(out)
    res = export(src, "v3.0", out)
    assert res.added == 0 and tree_hashes(out) == hashes  # nothing new: untouched
    record(src, [32, 34, 30], seed0=2)
    res = export(src, "v3.0", out)
    assert (res.episodes, res.added) == (5, 3)
    summary = check_v30(out, src)
    assert summary == {"episodes": 5, "data_files": 2, "meta_files": 2, "video_files": 4}
    after = tree_hashes(out)
    for rel, ino in before.items():
        if rel.startswith(("data/", "videos/", "meta/episodes/")):
            assert (out / rel).stat().st_ino == ino and after[rel] == hashes[rel], rel  # never rewritten
    assert (out / "data/chunk-000/file-001.parquet").is_file()


def test_changed_or_shrunk_source_is_refused(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [31, 32])
    export(src, "v3.0", out)
    hashes = tree_hashes(out)
    path = src / "meta/episodes.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:1]) + "\n")
    with pytest.raises(ExportError, match="has only 1"):
        export(src, "v3.0", out)
    e = json.loads(lines[1])
    e["late_rows"] = 7
    path.write_text(lines[0] + "\n" + json.dumps(e) + "\n")
    with pytest.raises(ExportError, match="episode 1 of .* changed"):
        export(src, "v3.0", out)
    assert tree_hashes(out) == hashes


@pytest.mark.integration
def test_exception_mid_export_leaves_previous_export(tmp_path, monkeypatch):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [31, 32])
    export(src, "v3.0", out)
    hashes = tree_hashes(out)
    record(src, [33, 34], seed0=2)
    real = video_concat.VideoFileWriter.add_episode
    calls = []

    def failing(self, *a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated crash")
        return real(self, *a, **kw)

    monkeypatch.setattr(video_concat.VideoFileWriter, "add_episode", failing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        export(src, "v3.0", out)
    assert tree_hashes(out) == hashes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "v30"]  # no staging, and the lock removed
    monkeypatch.setattr(video_concat.VideoFileWriter, "add_episode", real)
    assert export(src, "v3.0", out).added == 2
    check_v30(out, src)


@pytest.mark.integration
def test_sigkill_mid_export_leaves_previous_export(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v30"
    record(src, [31])
    export(src, "v3.0", out)
    hashes = tree_hashes(out)
    record(src, [60] * 12, seed0=1)
    staging = tmp_path / ".v30.export-staging"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(
        [str(BIN / "piper-export"), str(src), "--to", "v3.0", "--out", str(out), "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not list((staging / "videos").rglob("*.mp4")) and time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    assert staging.exists()  # killed mid-build
    assert tree_hashes(out) == hashes  # the previous export, byte for byte
    check_v30_prefix = json.loads((out / "meta/piper_export.json").read_text())
    assert check_v30_prefix["episodes"] == 1
    r = subprocess.run(
        [str(BIN / "piper-export"), str(src), "--to", "v3.0", "--out", str(out), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert not staging.exists()
    check_v30(out, src)


# ---- v2.1 -----------------------------------------------------------------------------------
@pytest.mark.integration
def test_v21_export_passes_lerobot_doctor_and_links_payload(tmp_path):
    src, out = tmp_path / "src", tmp_path / "v21"
    record(src, [110, 117])
    export(src, "v2.1", out)
    record(src, [124], seed0=2)
    assert export(src, "v2.1", out).added == 1
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1"
    lines = [json.loads(x) for x in (out / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [x["episode_index"] for x in lines] == [0, 1, 2]
    for x, n in zip(lines, (110, 117, 124)):
        assert set(x["stats"]) == set(info["features"])
        assert x["stats"]["observation.state"]["count"] == [n]
        assert np.asarray(x["stats"]["observation.images.cam_front"]["mean"]).shape == (3, 1, 1)
    for rel in (
        "data/chunk-000/episode_000002.parquet",
        "videos/chunk-000/observation.images.cam_wrist/episode_000001.mp4",
    ):
        assert (out / rel).stat().st_ino == (src / rel).stat().st_ino  # hard link, not a copy
    assert (out / "meta/stats.json").read_bytes() == (src / "meta/stats.json").read_bytes()
    for name in ("episodes.jsonl", "tasks.jsonl", "modality.json"):
        assert (out / "meta" / name).read_bytes() == (src / "meta" / name).read_bytes()
    r = subprocess.run(
        [str(BIN / "lerobot-doctor"), "check", str(out), "--ci", "--fail-on", "warn"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_v21_export_exports_on_to_v30_with_its_own_stats(tmp_path, monkeypatch):
    """A v2.1 root (here our v2.1 export) is a source too; its episodes_stats lines are used as they are."""
    src = tmp_path / "src"
    record(src, [31, 40])
    export(src, "v2.1", tmp_path / "v21")
    export(src, "v3.0", tmp_path / "direct")

    def no_decoding(*a, **kw):
        raise AssertionError("stats recomputed although the v2.1 source has them")

    monkeypatch.setattr("piper_recorder.lerobot.format.episode_stats.root_episode_stats", no_decoding)
    export(tmp_path / "v21", "v3.0", tmp_path / "chained")
    check_v30(tmp_path / "chained", tmp_path / "v21")
    a = pq.read_table(tmp_path / "direct/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    b = pq.read_table(tmp_path / "chained/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert a == b


def strip_camera_stats(root: Path) -> dict:
    """Make ``root`` look recorded before camera stats existed; returns the entries it had."""
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    cams = {k: stats.pop(k) for k in list(stats) if k.startswith("observation.images.")}
    path.write_text(json.dumps(stats, indent=4))
    for rec in (root / "meta/.cache/stats").glob("*.episode.json"):
        rec.unlink()
    return cams


@pytest.mark.parametrize("to", ["v2.1", "v3.0"])
@pytest.mark.integration
def test_old_root_without_camera_stats_gets_them(tmp_path, to):
    src, out = tmp_path / "src", tmp_path / "out"
    record(src, [110, 117])
    written = strip_camera_stats(src)  # what the recorder computed from the frames it encoded
    export(src, to, out)
    stats = json.loads((out / "meta/stats.json").read_text())
    for key, theirs in written.items():
        entry = stats[key]  # from a decoded sample of the videos
        assert {"mean", "std", "min", "max", "q01", "q99"} <= set(entry)
        for s_ in ("mean", "std", "min", "max", "q01", "q99"):
            assert np.asarray(entry[s_]).shape == (3, 1, 1) and 0 <= np.min(entry[s_]) <= np.max(entry[s_]) <= 1
        np.testing.assert_allclose(entry["mean"], theirs["mean"], atol=0.02)  # compression loss only
        np.testing.assert_allclose(entry["q99"], theirs["q99"], atol=0.05)
    if to == "v2.1":
        lines = [json.loads(x) for x in (out / "meta/episodes_stats.jsonl").read_text().splitlines()]
        key = "observation.images.cam_front"
        counts = np.array([x["stats"][key]["count"][0] for x in lines], float)
        means = np.array([x["stats"][key]["mean"] for x in lines])
        np.testing.assert_allclose(stats[key]["mean"], np.tensordot(counts, means, 1) / counts.sum(), rtol=1e-9)
        r = subprocess.run(
            [str(BIN / "lerobot-doctor"), "check", str(out), "--ci", "--fail-on", "warn"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout[-3000:]
    else:
        check_v30(out, src)


# ---- refusals -------------------------------------------------------------------------------
def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "piper-export"), *map(str, args), "-q"], capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_refusals_exit_2_with_a_clear_message(tmp_path):
    src = tmp_path / "src"
    small_root(src, lengths=(31, 30))

    def variant(name, edit):
        root = tmp_path / name
        shutil.copytree(src, root)
        edit(root)
        return root

    def set_info(root, **kw):
        info = json.loads((root / "meta/info.json").read_text())
        info.update(kw)
        (root / "meta/info.json").write_text(json.dumps(info))

    def drop_camera(root):
        eps = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
        del eps[1]["video_frame_lengths"]["cam_wrist"]
        (root / "meta/episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))

    def short_video(root):
        from support.lerobot_fixtures import write_video

        write_video(root / "videos/chunk-000/observation.images.cam_front/episode_000001.mp4", 25)

    def off_grid(root):
        path = root / "data/chunk-000/episode_000001.parquet"
        t = pq.read_table(path)
        ts = pa.array(t["timestamp"].to_numpy() + np.float32(0.004), pa.float32())
        pq.write_table(t.set_column(t.schema.get_field_index("timestamp"), "timestamp", ts), path)

    def corrupt_video(root):
        path = root / "videos/chunk-000/observation.images.cam_wrist/episode_000001.mp4"
        path.write_bytes(b"\x00" * 64 + path.read_bytes()[64:200])

    cases = {
        "unknown version": (
            variant("v16", lambda r: set_info(r, codebase_version="v1.6")),
            "codebase_version 'v1.6' cannot be exported",
        ),
        "not ours": (
            variant("foreign", lambda r: (r / "meta/modality.json").unlink()),
            "not a root written by piper_recorder",
        ),
        "cameras differ": (variant("cams", drop_camera), "cameras must be the same in every episode"),
        "frames != rows": (variant("short", short_video), "25 video frames for 30 rows"),
        "rows off the grid": (variant("offgrid", off_grid), "v3.0 needs rows on the frame grid"),
        "unreadable video": (variant("corrupt", corrupt_video), "cannot be read"),
    }
    for what, (root, message) in cases.items():
        r = _cli(root, "--to", "v3.0", "--out", tmp_path / f"out-{root.name}")
        assert r.returncode == 2, (what, r.stderr)
        assert message in r.stderr, (what, r.stderr)
        assert r.stderr.startswith("piper-export: ") and "Traceback" not in r.stderr
        assert not (tmp_path / f"out-{root.name}").exists() or not any((tmp_path / f"out-{root.name}").iterdir())
    foreign = tmp_path / "notempty"
    foreign.mkdir()
    (foreign / "x.txt").write_text("mine")
    r = _cli(src, "--to", "v2.1", "--out", foreign)
    assert r.returncode == 2 and "holds no piper-export output" in r.stderr
    assert (foreign / "x.txt").read_text() == "mine"
    assert _cli(src, "--to", "v2.1", "--out", src / "inside").returncode == 2
    ok = _cli(src, "--to", "v2.1", "--out", tmp_path / "v21")
    assert ok.returncode == 0, ok.stderr
    r = _cli(src, "--to", "v3.0", "--out", tmp_path / "v21")
    assert r.returncode == 2 and "holds a v2.1 export" in r.stderr
    empty = tmp_path / "empty"
    shutil.copytree(src, empty)
    (empty / "meta/episodes.jsonl").write_text("")
    r = _cli(empty, "--to", "v3.0", "--out", tmp_path / "out-empty")
    assert r.returncode == 2 and "no saved episodes" in r.stderr

"""LeRobot v2.0 writer: output checked with independent readers (pyarrow, PyAV, json, lerobot-doctor)."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.lerobot.format.errors import BindingChangeError, DatasetError, EpisodeStateError, SchemaError
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, VideoConfig, WriterConfig, stats_sketch

from support.lerobot_data import H, W, decode_video, index_frame, read_jsonl_strict, read_table, row_values, tree_hashes
from support.paths import ROOT

FPS = 30
CAMS = ("cam_front", "cam_wrist")


def config(**kw) -> WriterConfig:
    kw.setdefault("cameras", {c: CameraSpec(H, W) for c in CAMS})
    return WriterConfig(fps=FPS, **kw)


def record(w: LeRobotWriter, task: str, n: int, seed: int, jitter_ms=None, quest: int = 0) -> dict:
    """One episode of n rows at k/fps; each camera frame k carries k in its pixels and is taken
    ``jitter_ms[k]`` ms before its row (0 = exactly at the row time).
    """
    w.start_episode(task)
    for k in range(n):
        t = float(grid_timestamp(k, FPS))  # as the assembler feeds rows: k/fps rounded up to float32
        w.add_row(t, row_values(t, seed))
        for cam in w.cfg.cameras:
            j = 0.0 if jitter_ms is None else jitter_ms[k]
            assert w.add_frame(cam, index_frame(k), max(0.0, t - j / 1000))
        for _ in range(quest):
            w.add_raw_quest(json.dumps({"t": k / FPS, "k": k}))
    return w.save_episode({"late_rows": 0})


def all_rows(root: Path, n_eps: int) -> dict[str, np.ndarray]:
    tables = [read_table(root, e) for e in range(n_eps)]
    return {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}


def test_round_trip_schema_meta_and_stats(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        recs = [record(w, "pick", 40, 0, quest=2), record(w, "place", 35, 1), record(w, "pick", 30, 2)]
        assert w.total_episodes == 3
    assert [r["task_index"] for r in recs] == [0, 1, 0]

    # parquet: exact arrow types, values, bookkeeping
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    types = {f.name: f.type for f in t.schema}
    assert types["observation.arm_joint"] == pa.list_(pa.float32(), 6)
    assert types["observation.arm_eef"] == pa.list_(pa.float32(), 7)
    assert types["observation.gripper"] == pa.float32()
    assert types["observation.state"] == pa.list_(pa.float32(), 14)
    assert types["action"] == pa.list_(pa.float32(), 8)
    assert types["timestamp"] == pa.float32()
    for k in ("frame_index", "episode_index", "index", "task_index"):
        assert types[k] == pa.int64()
    cols = read_table(root, 0)
    for k in range(40):
        want = row_values(float(grid_timestamp(k, FPS)), 0)  # as record() fed it
        for key, v in want.items():
            got = cols[key][k]
            np.testing.assert_array_equal(np.atleast_1d(got), v.astype(np.float32), err_msg=key)
        np.testing.assert_array_equal(
            cols["observation.state"][k],
            np.concatenate(
                [want["observation.arm_joint"], want["observation.arm_eef"], want["observation.gripper"]]
            ).astype(np.float32),
        )
        np.testing.assert_array_equal(
            cols["action"][k], np.concatenate([want["action.arm_eef"], want["action.gripper"]]).astype(np.float32)
        )
    assert cols["timestamp"].dtype == np.float32
    np.testing.assert_allclose(np.diff(cols["timestamp"].astype(np.float64)), 1 / FPS, atol=1e-6)
    rows = all_rows(root, 3)
    np.testing.assert_array_equal(rows["index"], np.arange(105))
    np.testing.assert_array_equal(rows["episode_index"], np.repeat([0, 1, 2], [40, 35, 30]))
    np.testing.assert_array_equal(rows["task_index"], np.repeat([0, 1, 0], [40, 35, 30]))

    # info.json
    info = json.loads((root / "meta/info.json").read_text())
    assert set(info) == {
        "codebase_version",
        "robot_type",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "total_videos",
        "total_chunks",
        "chunks_size",
        "fps",
        "splits",
        "data_path",
        "video_path",
        "features",
        "piper_combined",
    }
    assert (
        info["codebase_version"],
        info["total_episodes"],
        info["total_frames"],
        info["total_tasks"],
        info["total_videos"],
        info["total_chunks"],
    ) == ("v2.0", 3, 105, 2, 6, 1)
    assert info["splits"] == {"train": "0:3"}
    f = info["features"]
    assert f["observation.arm_eef"]["names"] == ["x", "y", "z", "qw", "qx", "qy", "qz"]
    assert f["observation.state"]["shape"] == [14] and len(f["observation.state"]["names"]) == 14
    assert info["piper_combined"] == {  # which combined column each split column joins (read by piper-dataset)
        "observation.arm_joint": "observation.state",
        "observation.arm_eef": "observation.state",
        "observation.gripper": "observation.state",
        "action.arm_eef": "action",
        "action.gripper": "action",
    }
    assert f["timestamp"] == {"dtype": "float32", "shape": [1], "names": None}
    v = f["observation.images.cam_front"]
    assert v["dtype"] == "video" and v["shape"] == [H, W, 3]
    assert v["names"] == ["height", "width", "channels"]
    assert set(v["info"]) == {
        "video.fps",
        "video.height",
        "video.width",
        "video.channels",
        "video.codec",
        "video.pix_fmt",
        "video.is_depth_map",
        "has_audio",
    }
    assert "video_info" not in json.dumps(info) and '"channel"' not in json.dumps(info)

    # modality.json slices the split columns
    mod = json.loads((root / "meta/modality.json").read_text())
    assert mod["state"]["eef_rot"] == {
        "start": 3,
        "end": 7,
        "original_key": "observation.arm_eef",
        "rotation_type": "quat_wxyz",
        "dtype": "float32",
        "absolute": True,
    }
    assert mod["action"]["gripper"]["original_key"] == "action.gripper"
    assert mod["video"] == {c: {"original_key": f"observation.images.{c}"} for c in CAMS}
    assert mod["annotation"] == {"human.task_description": {"original_key": "task_index"}}

    # episodes / tasks jsonl
    eps = read_jsonl_strict(root / "meta/episodes.jsonl")
    assert eps[0]["video_frame_lengths"] == {"cam_front": 40, "cam_wrist": 40}
    assert eps[0]["video_frame_length"] == 40 and eps[0]["late_rows"] == 0
    assert eps[1]["tasks"] == ["place"] and eps[1]["length"] == 35
    assert read_jsonl_strict(root / "meta/tasks.jsonl") == [
        {"task_index": 0, "task": "pick"},
        {"task_index": 1, "task": "place"},
    ]
    lines = read_jsonl_strict(root / "extras/episode_000000.quest.jsonl")
    assert len(lines) == 80 and lines[-1] == {"t": 39 / FPS, "k": 39}

    # stats.json: exact mean/std/min/max, q01/q99 within the documented rank error
    st = json.loads((root / "meta/stats.json").read_text())
    for key, feat in f.items():
        if feat["dtype"] == "video":
            continue
        assert set(st[key]) == {"mean", "std", "min", "max", "q01", "q99"}, key
        x = rows[key].reshape(len(rows[key]), -1).astype(np.float64)
        assert all(len(st[key][s]) == feat["shape"][0] for s in st[key])
        np.testing.assert_allclose(st[key]["mean"], x.mean(0), rtol=1e-9, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(st[key]["std"], x.std(0), rtol=1e-7, atol=1e-9, err_msg=key)
        np.testing.assert_array_equal(st[key]["min"], x.min(0), err_msg=key)
        np.testing.assert_array_equal(st[key]["max"], x.max(0), err_msg=key)
        for q, p in (("q01", 0.01), ("q99", 0.99)):  # rank error <= grid step + 1/episode rows
            margin = 0.002 + 1 / 30
            lo, hi = np.quantile(x, [max(0.0, p - margin), min(1.0, p + margin)], axis=0)
            got = np.array(st[key][q])
            assert np.all((got >= lo - 1e-9) & (got <= hi + 1e-9)), (key, q)


def test_single_episode_quantiles_match_numpy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 4)) * [1, 10, 0.01, 100]
    m = stats_sketch.merge(stats_sketch.sketch(x)[None])
    np.testing.assert_allclose(m["q01"], np.quantile(x, 0.01, axis=0), rtol=1e-12)
    np.testing.assert_allclose(m["q99"], np.quantile(x, 0.99, axis=0), rtol=1e-12)
    # many episodes with different distributions: within 0.2 % rank of the exact quantile
    eps = [rng.normal(rng.normal(), 1 + rng.random(), (rng.integers(50, 400), 3)) for _ in range(60)]
    m = stats_sketch.merge(np.stack([stats_sketch.sketch(e) for e in eps]))
    allv = np.concatenate(eps)
    np.testing.assert_allclose(m["mean"], allv.mean(0), rtol=1e-12)
    np.testing.assert_allclose(m["std"], allv.std(0), rtol=1e-10)
    lo, hi = np.quantile(allv, [0.008, 0.012], axis=0)
    assert np.all((m["q01"] >= lo) & (m["q01"] <= hi))
    lo, hi = np.quantile(allv, [0.988, 0.992], axis=0)
    assert np.all((m["q99"] >= lo) & (m["q99"] <= hi))


def test_video_pts_and_both_lookup_rules(tmp_path):
    """Frames taken 0..12 ms before their row: for every row, 'nearest within half a period' and
    'last frame with pts <= float32(timestamp)' both return the frame written for that row.
    """
    root = tmp_path / "ds"
    n = 90
    rng = np.random.default_rng(7)
    jitter = np.where(rng.random(n) < 0.3, 0.0, rng.uniform(0, 12, n))
    with LeRobotWriter(root, config()) as w:
        w.start_episode("lookup")
        for k in range(n):
            t = k / FPS
            w.add_row(t, row_values(t, 0))
            for cam in CAMS:
                assert w.add_frame(cam, index_frame(k), t - jitter[k] / 1000 if k else 0.0)
            if k == 10:  # a repeated capture time: dropped and counted
                assert not w.add_frame("cam_front", index_frame(999), t - jitter[k] / 1000)
        rec = w.save_episode()
    assert rec["video_dropped_frames"]["cam_front"]["non_increasing_pts"] == 1
    ts = read_table(root, 0)["timestamp"].astype(np.float64)  # float32 values, exactly
    for cam in CAMS:
        pts, idx, dur, tb = decode_video(root / f"videos/chunk-000/observation.images.{cam}/episode_000000.mp4")
        assert tb == Fraction(1, 90000)
        assert len(pts) == n and idx == list(range(n))
        assert all(b > a for a, b in itertools.pairwise(pts))
        assert all(d > 0 for d in dur) and dur[-1] == 3000, "the last frame lasts one frame period"
        p = np.array(pts, dtype=np.float64) / 90000.0
        for k in range(n):
            assert idx[int(np.argmin(np.abs(p - ts[k])))] == k and np.min(np.abs(p - ts[k])) <= 0.5 / FPS
            le = np.nonzero(p <= ts[k])[0]
            assert idx[le[-1]] == k, (cam, k, pts[k], ts[k])
        # torchcodec needs the last row's time to lie inside the last frame's span
        assert pts[-1] + dur[-1] > ts[-1] * 90000


@pytest.mark.parametrize("fps", [30, 15, 60])
def test_every_frame_meets_both_rules_exactly(tmp_path, fps):
    """Nominal (frames at row times, up to 10 min into an episode) and capture (arbitrary times):
    read back with PyAV, every frame's pts * time_base is <= float32(its time) and less than 1e-4 s
    below it, checked in exact arithmetic. Whole-ms PTS fail the second rule for 2 rows in 3.
    """
    root = tmp_path / "ds"
    ks = sorted({*range(40), *range(40, 600 * fps, 997), 600 * fps - 1})  # rows k/fps, sparse past 40
    rng = np.random.default_rng(fps)
    capture = np.cumsum(rng.uniform(0.5, 70.0, len(ks))) / 1000.0  # capture times, s
    capture[0] = 0.0
    cfg = WriterConfig(
        fps=fps, cameras={"nominal": CameraSpec(H, W), "capture": CameraSpec(H, W)}, video=VideoConfig(max_block_s=None)
    )  # fed flat out: wait for the encoder, never drop
    with LeRobotWriter(root, cfg) as w:
        w.start_episode("rules")
        for i, k in enumerate(ks):
            w.add_row(k / fps, row_values(k / fps, 0))
            assert w.add_frame("nominal", index_frame(i), k / fps)
            assert w.add_frame("capture", index_frame(i), float(capture[i]))
        w.save_episode()
    ts = read_table(root, 0)["timestamp"]
    ms_misses = 0
    for cam, times in (("nominal", ts), ("capture", capture)):
        pts, idx, dur, tb = decode_video(root / f"videos/chunk-000/observation.images.{cam}/episode_000000.mp4")
        assert tb == Fraction(1, 90000) and idx == list(range(len(ks))) and len(pts) == len(ks)
        assert dur[-1] == 90000 // fps
        for p, t in zip(pts, times):
            exact_t = Fraction(float(np.float32(t)))
            assert p * tb <= exact_t and exact_t - p * tb < Fraction(1, 10_000), (cam, p, t)
            ms_misses += exact_t - Fraction(math.floor(exact_t * 1000), 1000) >= Fraction(1, 10_000)
    assert ms_misses > len(ks) // 2  # the old whole-ms PTS would have failed most of these


@pytest.mark.integration
def test_lerobot_doctor_and_validator_pass(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        for e in range(3):
            record(w, ["pick the cube", "stack"][e % 2], 110 + 7 * e, e, quest=1)
    doctor = ROOT / ".venv/bin/lerobot-doctor"
    if not doctor.exists():
        doctor = Path(shutil.which("lerobot-doctor") or "lerobot-doctor")
    r = subprocess.run(
        [str(doctor), "check", str(root), "--ci", "--fail-on", "warn"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    from piper_recorder.lerobot.validate import validate_root

    assert validate_root(root, full=True) == []


def test_resume_continues_indices_and_tasks(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        record(w, "a", 20, 0)
        record(w, "b", 25, 1)
    with LeRobotWriter(root, config()) as w:
        assert w.total_episodes == 2 and w.total_frames == 45
        assert w.start_episode("b") == 2
        w.add_row(0.0, row_values(0.0, 3))
        w.add_row(1 / FPS, row_values(1 / FPS, 3))
        for cam in CAMS:
            w.add_frame(cam, index_frame(0), 0.0)
        rec = w.save_episode()
        assert rec["task_index"] == 1
        rec = record(w, "c", 10, 4)
        assert (rec["episode_index"], rec["task_index"]) == (3, 2)
    rows = all_rows(root, 4)
    np.testing.assert_array_equal(rows["index"], np.arange(57))
    assert [t["task"] for t in read_jsonl_strict(root / "meta/tasks.jsonl")] == ["a", "b", "c"]
    info = json.loads((root / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (4, 57, 3)


def test_discard_and_empty_episodes_leave_nothing(tmp_path):
    root = tmp_path / "ds"
    w = LeRobotWriter(root, config())
    record(w, "keep", 15, 0)
    before = tree_hashes(root)
    w.start_episode("new task")
    for k in range(10):
        w.add_row(k / FPS, row_values(k / FPS, 1))
        w.add_frame("cam_front", index_frame(k), k / FPS)
        w.add_raw_quest("{}")
    w.discard_episode()
    assert w.start_episode("empty") == 1
    assert w.save_episode() is None  # no rows: discarded
    assert tree_hashes(root) == before
    assert not any((root / ".staging").iterdir())
    assert w.start_episode("keep") == 1
    w.close()  # unsaved episode discarded
    assert tree_hashes(root) == before and not (root / ".staging").exists()


def test_delete_last_episode_restores_previous_state(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        record(w, "a", 20, 0)
    before = tree_hashes(root)
    with LeRobotWriter(root, config()) as w:
        with pytest.raises(EpisodeStateError):
            w.delete_last_episode()  # episode 0 was saved by another session
        record(w, "new", 30, 1, quest=1)
        assert (root / "extras/episode_000001.quest.jsonl").exists()
        w.start_episode("x")
        with pytest.raises(EpisodeStateError):
            w.delete_last_episode()
        w.discard_episode()
        deleted = w.delete_last_episode()
        assert deleted["episode_index"] == 1 and deleted["length"] == 30
        with pytest.raises(EpisodeStateError):
            w.delete_last_episode()
        assert tree_hashes(root) == before  # metadata, stats and files as before the save
        assert record(w, "b", 12, 2)["task_index"] == 1  # indices continue from the restored state
    np.testing.assert_array_equal(all_rows(root, 2)["index"], np.arange(32))


def test_schema_errors_name_the_column(tmp_path):
    with LeRobotWriter(tmp_path / "ds", config()) as w:
        with pytest.raises(EpisodeStateError):
            w.add_row(0.0, row_values(0.0, 0))
        with pytest.raises(EpisodeStateError):
            w.save_episode()
        w.start_episode("t")
        with pytest.raises(EpisodeStateError):
            w.start_episode("t")
        bad = [
            ({"observation.arm_joint": np.zeros(5)}, "observation.arm_joint"),
            ({"observation.arm_eef": np.zeros((1, 7))}, "observation.arm_eef"),
            ({"action.gripper": np.array(["a"])}, "action.gripper"),
            ({"action.gripper": np.array([True])}, "action.gripper"),
            ({"observation.gripper": np.array([np.nan])}, "observation.gripper"),
            ({"action.arm_eef": np.r_[np.zeros(6), np.inf]}, "action.arm_eef"),
            ({"observation.arm_joint": np.full(6, 1e300)}, "observation.arm_joint"),  # inf in float32
            ({"observation.extra": np.zeros(1)}, "observation.extra"),
        ]
        for patch, col in bad:
            vals = {**row_values(0.0, 0), **patch}
            with pytest.raises(SchemaError, match=col.replace(".", r"\.")):
                w.add_row(0.0, vals)
        vals = row_values(0.0, 0)
        del vals["action.arm_eef"]
        with pytest.raises(SchemaError, match=r"action\.arm_eef"):
            w.add_row(0.0, vals)
        with pytest.raises(SchemaError, match="timestamp"):
            w.add_row(float("nan"), row_values(0.0, 0))
        w.add_row(0.0, row_values(0.0, 0))
        with pytest.raises(SchemaError, match="timestamp"):
            w.add_row(0.0, row_values(0.0, 0))
        with pytest.raises(SchemaError, match=r"observation\.images\.cam_back"):
            w.add_frame("cam_back", index_frame(0), 0.0)
        with pytest.raises(SchemaError, match=r"observation\.images\.cam_front"):
            w.add_frame("cam_front", np.zeros((H, W, 3), np.float32), 0.0)
        with pytest.raises(SchemaError, match=r"observation\.images\.cam_front"):
            w.add_frame("cam_front", np.zeros((W, H, 3), np.uint8), 0.0)
        w.discard_episode()
    assert read_jsonl_strict(tmp_path / "ds/meta/episodes.jsonl") == []


def session(kp: float, fw: str = "S-V1.6-3") -> dict:
    return {
        "control": {"backend": "impedance", "impedance": {"kp": kp, "kd": 0.8, "t_ff": 0.0, "gravity_ff": True}},
        "arm": {"firmware": fw, "model": "piper"},
        "recording": {"fps": 30},
        "cameras": {"cam_front": {"serial": "123"}},
    }


def test_binding_change_warns_or_refuses(tmp_path, capsys):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        assert w.begin_session(session(10.0)) == []
    with LeRobotWriter(root, config()) as w:
        assert w.begin_session(session(10.0)) == []
        changes = w.begin_session(session(12.0, "S-V1.7"))
    assert changes == [("control.impedance.kp", 10.0, 12.0), ("arm.firmware", "S-V1.6-3", "S-V1.7")]
    err = capsys.readouterr().err
    assert "control.impedance.kp: 10.0 -> 12.0" in err and "fresh --root" in err
    lines = read_jsonl_strict(root / "meta/collection_sessions.jsonl")
    assert len(lines) == 3 and len({s["session_id"] for s in lines}) == 3
    assert all(s["writer_version"] and s["started_at"] for s in lines)
    assert json.loads((root / "meta/collection_meta.json").read_text()) == lines[-1]
    with LeRobotWriter(root, config(on_binding_change="refuse")) as w:
        with pytest.raises(BindingChangeError) as ei:
            w.begin_session(session(15.0, "S-V1.7"))
        assert ei.value.changes == [("control.impedance.kp", 12.0, 15.0)]
    assert len(read_jsonl_strict(root / "meta/collection_sessions.jsonl")) == 3


def test_options_rotation_type_no_combined_and_chunks(tmp_path):
    root = tmp_path / "ds"
    cfg = config(cameras={}, rotation_type="quaternion", combined_columns=False, chunks_size=2, save_raw_quest=False)
    with LeRobotWriter(root, cfg) as w:
        for e in range(3):
            record(w, "t", 12, e, quest=1)
    info = json.loads((root / "meta/info.json").read_text())
    assert "observation.state" not in info["features"] and "action" not in info["features"]
    assert info["total_chunks"] == 2 and info["total_videos"] == 0
    assert (root / "data/chunk-001/episode_000002.parquet").exists()
    assert not (root / "extras").exists()
    mod = json.loads((root / "meta/modality.json").read_text())
    assert mod["state"]["eef_rot"]["rotation_type"] == "quaternion"
    assert "observation.state" not in json.loads((root / "meta/stats.json").read_text())
    with pytest.raises(DatasetError, match="different configuration"):
        LeRobotWriter(root, config(cameras={}, chunks_size=2))


def test_one_writer_per_root(tmp_path):
    with LeRobotWriter(tmp_path / "ds", config()), pytest.raises(DatasetError, match="another writer"):
        LeRobotWriter(tmp_path / "ds", config())


def test_stats_cache_rebuilt_when_missing_or_stale(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, config(cameras={})) as w:
        for e in range(3):
            record(w, "t", 20 + e, e)
    stats_before = (root / "meta/stats.json").read_bytes()
    shutil.rmtree(root / "meta/.cache")
    (root / "meta/stats.json").write_text("{}")
    LeRobotWriter(root, config(cameras={})).close()
    assert (root / "meta/stats.json").read_bytes() == stats_before
    np.save(root / "meta/.cache/stats/episode_000001.npy", np.zeros((3, 3)))
    with LeRobotWriter(root, config(cameras={})) as w:
        record(w, "t", 20, 5)
        w.delete_last_episode()
    assert (root / "meta/stats.json").read_bytes() == stats_before


@pytest.mark.slow
def test_back_pressure_drops_and_counts_without_blocking(tmp_path):
    """A queue of one frame and no waiting: the caller never blocks on encoding; every refused
    frame is reported by add_frame and counted, every accepted one is in the file.
    """
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig

    root = tmp_path / "ds"
    cfg = config(
        cameras={"cam_front": CameraSpec(480, 640)}, video=VideoConfig(queue_size=1, max_block_s=0.0, preset="medium")
    )
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    import time

    with LeRobotWriter(root, cfg) as w:
        w.start_episode("burst")
        accepted, slowest = 0, 0.0
        for k in range(60):
            w.add_row(k / FPS, row_values(k / FPS, 0))
            t0 = time.perf_counter()
            accepted += w.add_frame("cam_front", np.roll(img, k, axis=1), k / FPS)
            slowest = max(slowest, time.perf_counter() - t0)
        rec = w.save_episode()
    assert slowest < 1.0
    dropped = rec["video_dropped_frames"]["cam_front"]["queue_full"]
    assert dropped > 0 and dropped + accepted == 60
    assert rec["video_frame_lengths"]["cam_front"] == accepted
    import av

    with av.open(str(root / "videos/chunk-000/observation.images.cam_front/episode_000000.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == accepted


def test_bad_config_is_refused(tmp_path):
    from piper_recorder.lerobot.writer.video_encoder import VideoConfig

    for bad in (
        {"rotation_type": "quat_xyzw"},
        {"on_binding_change": "ignore"},
        {"video": VideoConfig(codec="no-such-codec")},
        {"video": VideoConfig(gop=0)},
        {"cameras": {"a/b": CameraSpec()}},
    ):
        with pytest.raises(ValueError):
            LeRobotWriter(tmp_path / "ds", config(**bad))


def test_camera_thread_racing_save_never_blocks_or_corrupts(tmp_path):
    """A camera thread keeps pushing frames while the episode is saved: add_frame answers False
    during the save (no waiting on it), EpisodeStateError once no episode is open; the file holds
    exactly the frames that were accepted.
    """
    import threading
    import time

    root = tmp_path / "ds"
    accepted, refused, no_episode, slowest = [0], [0], [0], [0.0]
    stop = threading.Event()
    with LeRobotWriter(root, config(cameras={"cam_front": CameraSpec(H, W)})) as w:
        w.start_episode("race")

        def camera():
            k = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    ok = w.add_frame("cam_front", index_frame(k), k / FPS)
                    (accepted if ok else refused)[0] += 1
                except EpisodeStateError:
                    no_episode[0] += 1
                slowest[0] = max(slowest[0], time.perf_counter() - t0)
                k += 1
                time.sleep(0.001)

        th = threading.Thread(target=camera)
        th.start()
        for k in range(40):
            w.add_row(k / FPS, row_values(k / FPS, 0))
            time.sleep(0.005)
        rec = w.save_episode()
        time.sleep(0.05)
        stop.set()
        th.join()
    assert no_episode[0] > 0 and slowest[0] < 1.0
    assert rec["video_frame_lengths"]["cam_front"] == accepted[0]
    from support.lerobot_data import decode_video

    _, idx, _, _ = decode_video(root / "videos/chunk-000/observation.images.cam_front/episode_000000.mp4")
    assert idx == list(range(accepted[0]))


def test_a_frame_converted_while_finishing_begins_is_refused_not_lost(tmp_path, monkeypatch):
    """``add`` converts a frame outside any lock; if ``request_finish`` puts its end marker meanwhile, the
    frame is refused (False): accepted behind the marker, it would be counted by the caller and never
    encoded (the race a camera thread and a save can run).
    """
    import threading

    from piper_recorder.lerobot.writer.video_encoder import VideoEncoder

    enc = VideoEncoder(tmp_path / "a.mp4", "cam", 48, 64, 30, VideoConfig(max_block_s=None))
    rgb = np.zeros((48, 64, 3), np.uint8)
    assert enc.add(rgb, 0.0)
    converting, go_on = threading.Event(), threading.Event()
    convert = enc._convert

    def slow_convert(frame):
        converting.set()
        go_on.wait(5)
        return convert(frame)

    monkeypatch.setattr(enc, "_convert", slow_convert)
    answer: list[bool] = []
    camera = threading.Thread(target=lambda: answer.append(enc.add(rgb, 1 / 30)))
    camera.start()
    assert converting.wait(5)
    enc.request_finish()  # the end marker is queued while the second frame is being converted
    go_on.set()
    camera.join(5)
    assert answer == [False]
    assert enc.finish() == 1 and enc.dropped_pts == 0 and enc.dropped_queue == 0


def test_open_repairs_leftovers_deterministically(tmp_path):
    """Leftovers of each crash window: an episode in flight, payload moved but not committed,
    interrupted atomic writes, stale derived metadata. Saved episodes stay byte-identical.
    """
    root = tmp_path / "ds"
    with LeRobotWriter(root, config()) as w:
        record(w, "a", 20, 0, quest=1)
        record(w, "b", 22, 1, quest=1)
    saved = tree_hashes(root)
    # crash inside a save of episode 2: payload already moved into place, episodes.jsonl not yet
    (root / ".staging/episode_000003").mkdir(parents=True)
    (root / ".staging/episode_000003/cam_front.mp4").write_bytes(b"partial")
    for rel in (
        "data/chunk-000/episode_000002.parquet",
        "videos/chunk-000/observation.images.cam_front/episode_000002.mp4",
        "extras/episode_000002.quest.jsonl",
        "meta/.cache/stats/episode_000002.npy",
    ):
        (root / rel).write_bytes(b"orphan")
    (root / "meta/info.json.tmp").write_text("{")
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "total_episodes": 3}))  # renamed early
    (root / "meta/tasks.jsonl").write_text(
        '{"task_index": 0, "task": "a"}\n{"task_index": 1, "task": "b"}\n{"task_index": 2, "task": "c"}\n'
    )
    w = LeRobotWriter(root, config())
    w.close()
    assert any(r.startswith("removed unsaved episode") for r in w.repairs)
    assert any("moved unreferenced data/chunk-000/episode_000002.parquet" in r for r in w.repairs)
    assert tree_hashes(root) == {**saved, **{k: v for k, v in tree_hashes(root).items() if k.startswith(".recovered/")}}
    assert len([k for k in tree_hashes(root) if k.startswith(".recovered/")]) == 3
    from piper_recorder.lerobot.validate import validate_root

    assert validate_root(root, full=True) == []


def test_offline_encoder_is_deterministic_x264_without_mbtree(tmp_path):
    """The converter's encoder runs x264 with mbtree=0 (``VideoConfig.deterministic``): with mbtree on,
    identical frames gave different packets when thread timing varied (bench/video_determinism.py), so a
    retried Ray task decoded to other pixels. Live recording keeps x264's default (mbtree on).
    """
    from piper_recorder.lerobot.writer.video_encoder import VideoEncoder
    from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config

    assert lerobot_writer_config(LeRobotRecorderConfig(), offline=True).video.deterministic
    assert not lerobot_writer_config(LeRobotRecorderConfig()).video.deterministic
    rng = np.random.default_rng(0)
    for det in (True, False):
        path = tmp_path / f"det{det}.mp4"
        enc = VideoEncoder(path, "cam", 48, 64, 30, VideoConfig(deterministic=det, max_block_s=None))
        for i in range(20):
            enc.add(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), i / 30)
        assert enc.finish() == 20
        sei = path.read_bytes()  # x264 writes its settings into the stream (an SEI user-data string)
        assert (b" mbtree=0 " in sei) == det and (b" mbtree=1 " in sei) == (not det)


def _reference_packets(frames, cfg):
    """The packets PyAV gives for ``frames`` handed to ``encode`` as rgb24 frames (the encoder's input
    before it converted frames itself): same stream settings as ``VideoEncoder``.
    """
    import io

    import av

    from piper_recorder.timebase import TICKS, TIME_BASE, pts_ticks

    out = av.open(io.BytesIO(), "w", format="mp4", options={"video_track_timescale": str(TICKS)})
    s = out.add_stream(cfg.codec, rate=30)
    s.width, s.height, s.pix_fmt = frames[0].shape[1], frames[0].shape[0], cfg.pix_fmt
    s.time_base = TIME_BASE
    cc = s.codec_context
    cc.time_base, cc.gop_size, cc.max_b_frames, cc.thread_count = TIME_BASE, cfg.gop, cfg.bf, cfg.threads
    s.options = {
        "bf": str(cfg.bf),
        "g": str(cfg.gop),
        "crf": str(cfg.crf),
        "preset": cfg.preset,
        "x264-params": "mbtree=0",
    }
    packets = []
    for i, rgb in enumerate(frames):
        f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        f.pts, f.time_base = pts_ticks(i / 30), TIME_BASE
        packets += [bytes(p) for p in s.encode(f)]
    packets += [bytes(p) for p in s.encode(None)]
    out.close()
    return packets


def test_encoder_converts_frames_as_pyav_encode_does_packets_identical(tmp_path, monkeypatch):
    """``VideoEncoder.add`` converts RGB to yuv420p itself (no RGB copy, one swscale context): x264 gets
    the very pixels PyAV's own conversion in ``encode`` gave, so the packets are byte-identical; the
    frames queued own their pixels (the caller's array is overwritten right after ``add``), a padded-row
    array converts like a contiguous one, and the stats sampler sees every queued frame's RGB in order.
    """
    import av

    from piper_recorder.lerobot.writer.video_encoder import VideoEncoder

    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    frames = [np.roll(base, 3 * i, axis=1) // (1 + i % 3) for i in range(24)]
    cfg = VideoConfig(deterministic=True, max_block_s=None)
    packets: list[bytes] = []
    orig_mux = VideoEncoder._mux
    monkeypatch.setattr(
        VideoEncoder, "_mux", lambda self, ps: orig_mux(self, [packets.append(bytes(p)) or p for p in ps])
    )
    enc = VideoEncoder(tmp_path / "a.mp4", "cam", 48, 64, 30, cfg)
    offered: list[bytes] = []
    enc.on_frame = lambda rgb: offered.append(rgb.tobytes())
    buf = np.empty((48, 64, 3), np.uint8)
    padded = np.zeros((48, 64 * 3 + 16), np.uint8)  # rows with padding (a message's step > width * 3)
    for i, f in enumerate(frames):
        if i % 2:
            view = padded[:, : 64 * 3].reshape(48, 64, 3)
            view[:] = f
            assert enc.add(view, i / 30)
            view[:] = 0
        else:
            buf[:] = f
            assert enc.add(buf, i / 30)
            buf[:] = 255  # reused at once: the queued frame must not see this
    assert enc.finish() == len(frames)
    assert packets == _reference_packets(frames, cfg)
    assert offered == [f.tobytes() for f in frames]
    with av.open(str(tmp_path / "a.mp4")) as c:
        assert c.streams.video[0].codec_context.pix_fmt == "yuv420p"

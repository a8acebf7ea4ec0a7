"""LeRobot v2.1 output (meta/episodes_stats.jsonl) and per-camera image statistics, checked with numpy,
pyarrow, json and lerobot-doctor against values computed here from the frames and rows fed in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
from piper_recorder.lerobot.writer.video_encoder import VideoConfig

from support.lerobot_data import read_jsonl_strict, read_table, row_values, tree_hashes
from support.paths import ROOT

FPS = 30
STRIDE = 5  # the documented sample: video frames 0, 5, 10, ...
CAMS = {"cam_front": (240, 320), "cam_wrist": (48, 64)}  # 320 px wide: LeRobot downsamples by 2
SIX = {"mean", "std", "min", "max", "q01", "q99"}


def cfg(version: str = "v2.1", **kw) -> WriterConfig:
    """Encoders block instead of dropping a frame (the machine is shared; the sample must be exact)."""
    return WriterConfig(
        fps=FPS,
        cameras={c: CameraSpec(h, w) for c, (h, w) in CAMS.items()},
        video=VideoConfig(max_block_s=None),
        lerobot_version=version,
        **kw,
    )


def frame(cam: str, k: int, seed: int) -> np.ndarray:
    """Smooth content (survives encoding) with different per-channel distributions: R a moving
    horizontal ramp over 0..255, G a vertical ramp over 40..120, B one level per frame.
    """
    h, w = CAMS[cam]
    img = np.empty((h, w, 3), np.uint8)
    img[..., 0] = ((np.arange(w) * 255 // (w - 1) + 3 * k + seed) % 256)[None, :]
    img[..., 1] = (40 + np.arange(h) * 80 // (h - 1))[:, None]
    img[..., 2] = (k * 11 + seed * 7) % 256
    return img


def record(w: LeRobotWriter, task: str, n: int, seed: int) -> dict[str, list[np.ndarray]]:
    w.start_episode(task)
    fed: dict[str, list[np.ndarray]] = {c: [] for c in CAMS}
    for k in range(n):
        t = float(grid_timestamp(k, FPS))  # as the assembler feeds rows: k/fps rounded up to float32
        w.add_row(t, row_values(t, seed))
        for cam in CAMS:
            img = frame(cam, k, seed)
            assert w.add_frame(cam, img, t)
            fed[cam].append(img)
    w.save_episode()
    return fed


def sample_pixels(frames: list[np.ndarray]) -> np.ndarray:
    """(3, pixels) of every 5th frame, downsampled by LeRobot's rule (auto_downsample_height_width)."""
    h, w = frames[0].shape[:2]
    f = 1 if max(h, w) < 300 else (int(w / 150) if w > h else int(h / 150))
    chw = np.stack([fr.transpose(2, 0, 1)[:, ::f, ::f] for fr in frames[::STRIDE]])
    return chw.transpose(1, 0, 2, 3).reshape(3, -1)


def lerobot_aggregate(stats_list: list[dict]) -> dict:
    """Lerobot 0.3.3 load_episodes_stats + aggregate_stats (cast to numpy, shape checks, weighted merge)."""
    items = [{k: {s: np.array(v) for s, v in d.items()} for k, d in st.items()} for st in stats_list]
    for st in items:
        for key, d in st.items():
            for s, v in d.items():
                assert v.ndim >= 1
                if s == "count":
                    assert v.shape == (1,)
                elif "image" in key:
                    assert v.shape == (3, 1, 1), (key, s, v.shape)
    out = {}
    for key in items[0]:
        fs = [st[key] for st in items]
        means, var = np.stack([s["mean"] for s in fs]), np.stack([s["std"] ** 2 for s in fs])
        counts = np.stack([s["count"] for s in fs])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, -1)
        mean = (means * counts).sum(0) / total
        out[key] = {
            "mean": mean,
            "std": np.sqrt(((var + (means - mean) ** 2) * counts).sum(0) / total),
            "min": np.min(np.stack([s["min"] for s in fs]), 0),
            "max": np.max(np.stack([s["max"] for s in fs]), 0),
            "count": total,
        }
    return out


def check_root(root: Path, fed: list[dict[str, list[np.ndarray]]]) -> None:
    """episodes_stats.jsonl and the camera entries of stats.json against numpy on what was fed in."""
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1"
    lines = read_jsonl_strict(root / "meta/episodes_stats.jsonl")
    assert [ln["episode_index"] for ln in lines] == list(range(len(fed)))
    for ep, (line, frames) in enumerate(zip(lines, fed)):
        assert set(line) == {"episode_index", "stats"}
        st = line["stats"]
        assert list(st) == list(info["features"])  # every feature, bookkeeping and cameras included
        table = read_table(root, ep)
        for key, values in table.items():
            e = st[key]
            assert set(e) == {"min", "max", "mean", "std", "count"}
            v = values if values.ndim == 1 else np.ascontiguousarray(values)
            keep = v.ndim == 1
            for s, fn in (("min", np.min), ("max", np.max), ("mean", np.mean), ("std", np.std)):
                want = fn(v, axis=0, keepdims=keep).tolist()
                assert e[s] == want, (ep, key, s)  # numpy on the stored dtype, bit for bit
            assert e["count"] == [len(v)]
        assert isinstance(st["frame_index"]["min"][0], int) and isinstance(st["timestamp"]["mean"][0], float)
        for cam, imgs in frames.items():
            e = st[f"observation.images.{cam}"]
            px = sample_pixels(imgs)
            assert e["count"] == [len(imgs[::STRIDE])]
            for s, fn in (("min", np.min), ("max", np.max), ("mean", np.mean), ("std", np.std)):
                got = np.asarray(e[s])
                assert got.shape == (3, 1, 1)
                np.testing.assert_allclose(got.ravel(), fn(px, axis=1) / 255.0, rtol=1e-9, atol=1e-12)
    stats = json.loads((root / "meta/stats.json").read_text())
    for cam in CAMS:
        e = stats[f"observation.images.{cam}"]
        assert set(e) == SIX
        px = np.concatenate([sample_pixels(f[cam]) for f in fed], axis=1)
        want = {
            "mean": px.mean(1),
            "std": px.std(1),
            "min": px.min(1),
            "max": px.max(1),
            "q01": np.quantile(px, 0.01, axis=1),
            "q99": np.quantile(px, 0.99, axis=1),
        }
        for s, v in want.items():
            got = np.asarray(e[s])
            assert got.shape == (3, 1, 1)
            np.testing.assert_allclose(got.ravel(), v / 255.0, rtol=1e-9, atol=1e-12)
    # what lerobot 0.3.3 builds for a v2.1 root: the aggregate of the lines, cameras included
    agg = lerobot_aggregate([ln["stats"] for ln in lines])
    for key, e in stats.items():
        np.testing.assert_allclose(agg[key]["mean"].ravel(), np.ravel(e["mean"]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(agg[key]["std"].ravel(), np.ravel(e["std"]), rtol=1e-4, atol=1e-6)


def gr00t_stats_rules(root: Path) -> None:
    """GR00T N1.5 (gr00t/data/dataset.py): every stats.json entry validates as mean/std/min/max/q01/q99,
    and each state/action modality slices every stat of its original_key by [start:end].
    """
    stats = json.loads((root / "meta/stats.json").read_text())
    modality = json.loads((root / "meta/modality.json").read_text())
    for key, e in stats.items():
        assert set(e) == SIX, key  # no count: GR00T slices every key it finds
    for group in ("state", "action"):
        for _name, m in modality[group].items():
            e = stats[m["original_key"]]
            for s in SIX:
                assert len(np.asarray(e[s])[np.arange(m["start"], m["end"])]) == m["end"] - m["start"]


def doctor(root: Path) -> None:
    exe = ROOT / ".venv/bin/lerobot-doctor"
    if not exe.exists():
        exe = Path(shutil.which("lerobot-doctor") or "lerobot-doctor")
    r = subprocess.run(
        [str(exe), "check", str(root), "--ci", "--fail-on", "warn"], capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.integration
def test_v21_save_delete_resume_keep_episodes_stats_current(tmp_path):
    root = tmp_path / "ds"
    fed = []
    with LeRobotWriter(root, cfg()) as w:
        fed.append(record(w, "pick", 113, 0))
        fed.append(record(w, "place", 108, 1))
    check_root(root, fed)
    before = tree_hashes(root)
    with LeRobotWriter(root, cfg()) as w:  # resume, save, delete: back to the same bytes
        record(w, "third", 12, 2)
        assert len(read_jsonl_strict(root / "meta/episodes_stats.jsonl")) == 3
        w.delete_last_episode()
        assert tree_hashes(root) == before
        fed.append(record(w, "pick", 104, 3))
    check_root(root, fed)
    assert validate_root(root, full=True) == []
    gr00t_stats_rules(root)
    doctor(root)


@pytest.mark.slow
def test_records_rebuilt_from_parquet_and_video_when_lost(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        record(w, "a", 26, 0)
        record(w, "b", 14, 1)
    lines = read_jsonl_strict(root / "meta/episodes_stats.jsonl")
    stats = json.loads((root / "meta/stats.json").read_text())
    shutil.rmtree(root / "meta/.cache")
    (root / "meta/episodes_stats.jsonl").unlink()
    with LeRobotWriter(root, cfg()):
        pass
    again = read_jsonl_strict(root / "meta/episodes_stats.jsonl")
    stats2 = json.loads((root / "meta/stats.json").read_text())
    for old, new in zip(lines, again):
        for key, e in old["stats"].items():
            if key.startswith("observation.images."):  # same frames, decoded: within compression loss
                assert new["stats"][key]["count"] == e["count"]
                for s in ("mean", "std"):
                    np.testing.assert_allclose(new["stats"][key][s], e[s], atol=4 / 255)
            else:
                assert new["stats"][key] == e  # vectors: bit-identical from the parquet
    for key in stats:
        assert set(stats2[key]) == set(stats[key])
    assert validate_root(root) == []


@pytest.mark.parametrize("have,want", [("v2.0", "v2.1"), ("v2.1", "v2.0")])
def test_resuming_the_other_version_is_refused(tmp_path, have, want):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg(have)) as w:
        record(w, "a", 6, 0)
    before = tree_hashes(root)
    with pytest.raises(DatasetError, match=f"LeRobot {have} root but lerobot_version is '{want}'"):
        LeRobotWriter(root, cfg(want))
    assert tree_hashes(root) == before


@pytest.mark.integration
def test_v20_default_has_camera_stats_and_no_episodes_stats(tmp_path):
    root = tmp_path / "ds"
    fed = []
    default = WriterConfig(
        fps=FPS, cameras={c: CameraSpec(h, w) for c, (h, w) in CAMS.items()}, video=VideoConfig(max_block_s=None)
    )
    assert default.lerobot_version == "v2.0"
    with LeRobotWriter(root, default) as w:
        fed.append(record(w, "a", 111, 0))
        fed.append(record(w, "b", 106, 1))
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.0"
    assert not (root / "meta/episodes_stats.jsonl").exists()
    stats = json.loads((root / "meta/stats.json").read_text())
    for cam in CAMS:  # lerobot-train (ACT, defaults) replaces these with ImageNet stats: they must exist
        e = stats[f"observation.images.{cam}"]
        px = np.concatenate([sample_pixels(f[cam]) for f in fed], axis=1)
        np.testing.assert_allclose(np.ravel(e["mean"]), px.mean(1) / 255.0, rtol=1e-12)
        np.testing.assert_allclose(np.ravel(e["q99"]), np.quantile(px, 0.99, axis=1) / 255.0, rtol=1e-12)
    gr00t_stats_rules(root)
    assert validate_root(root) == []
    doctor(root)


def test_validator_catches_bad_episodes_stats(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        record(w, "a", 11, 0)
        record(w, "b", 8, 1)
    path = root / "meta/episodes_stats.jsonl"
    good = path.read_text()
    lines = [json.loads(x) for x in good.splitlines()]
    path.write_text(json.dumps(lines[0]) + "\n")
    assert any("1 lines for 2 episodes" in p for p in validate_root(root))
    bad = json.loads(json.dumps(lines))
    bad[1]["stats"]["observation.images.cam_front"]["mean"] = [0.5, 0.5, 0.5]
    bad[1]["stats"]["action"]["max"][0] += 1.0
    del bad[0]["stats"]["timestamp"]
    path.write_text("".join(json.dumps(x) + "\n" for x in bad))
    problems = validate_root(root)
    assert any("line 2 'observation.images.cam_front'.mean must be per-channel" in p for p in problems)
    assert any("line 2 'action': max do not match" in p for p in problems)
    assert any("line 1: stats must cover every feature" in p and "timestamp" in p for p in problems)
    path.unlink()
    assert any("episodes_stats.jsonl: missing" in p for p in validate_root(root))
    stats = json.loads((root / "meta/stats.json").read_text())
    del stats["observation.images.cam_wrist"]
    (root / "meta/stats.json").write_text(json.dumps(stats))
    assert any("no entry for column 'observation.images.cam_wrist'" in p for p in validate_root(root))


def test_root_episode_stats_cached_and_recomputed(tmp_path):
    from piper_recorder.lerobot.format.episode_stats import root_episode_stats

    from support.lerobot_fixtures import small_root

    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        record(w, "a", 27, 0)
        record(w, "b", 16, 1)
    info = json.loads((root / "meta/info.json").read_text())
    lines = read_jsonl_strict(root / "meta/episodes_stats.jsonl")
    for i in range(2):
        assert root_episode_stats(root, info, i) == lines[i]["stats"]
        fresh = root_episode_stats(root, info, i, cached=False)
        assert list(fresh) == list(lines[i]["stats"])
        for key, e in lines[i]["stats"].items():
            if key.startswith("observation.images."):
                assert fresh[key]["count"] == e["count"]
                np.testing.assert_allclose(fresh[key]["mean"], e["mean"], atol=3 / 255)
            else:
                assert fresh[key] == e
    # a root written by another tool (no records): parquet + decoded frames
    other = small_root(tmp_path / "other", lengths=(12, 9))
    info = json.loads((other / "meta/info.json").read_text())
    st = root_episode_stats(other, info, 1)
    tab = read_table(other, 1)
    assert st["index"] == {"min": [12], "max": [20], "mean": [16.0], "std": [float(np.std(np.arange(9)))], "count": [9]}
    assert st["action"]["max"] == np.max(tab["action"], axis=0).tolist()
    assert st["observation.images.cam_front"]["count"] == [2]  # frames 0 and 5 of 9
    assert np.asarray(st["observation.images.cam_wrist"]["std"]).shape == (3, 1, 1)

"""piper-bag2dataset on synthetic bags: episode sources, storage formats, bad input, --jobs, resume, mapping."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from piper_recorder.bag.episodes import spans_from_events, spans_from_ranges
from piper_recorder.bag.synth import SynthScenario, agilex_scenario, scenario_messages, string, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.validate import validate_root
from rgbd_writer.validate import validate_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # slow: converts synthetic bags of seconds of 30 fps video
W, H = 64, 48


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Path:
    """The recorders' parameter file for 64x48 cameras (what the converter reads with --config)."""
    p = tmp_path_factory.mktemp("cfg") / "recorders.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {
                        "task": "config task",
                        "cameras": ["cam_front", "cam_wrist"],
                        "camera_width": W,
                        "camera_height": H,
                    }
                },
                "rgbd_recorder": {"ros__parameters": {"camera": "cam_front", "camera_width": W, "camera_height": H}},
            }
        )
    )
    return p


def make_bag(path: Path, storage: str = "sqlite3", **kw) -> Path:
    kw.setdefault("cameras", ("cam_front", "cam_wrist"))
    return write_bag(path, scenario_messages(SynthScenario(**kw)), storage)


def episodes(root: Path) -> list[dict]:
    p = root / "meta" / "episodes.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def table(root: Path, i: int) -> dict:
    return pq.read_table(root / f"data/chunk-000/episode_{i:06d}.parquet").to_pydict()


def run(*args: str) -> int:
    return bag2dataset([*map(str, args), "--no-progress"])


def test_spans_from_events_follow_saves_deletes_and_the_recorder():
    ev = [
        {"recorder": "rgbd_recorder", "event": "saved", "episode_index": 0, "start_ns": 1, "end_ns": 2, "rows": 1},
        {"recorder": "lerobot_recorder", "event": "started", "episode_index": 0, "start_ns": 90},
        {
            "recorder": "lerobot_recorder",
            "event": "saved",
            "episode_index": 0,
            "start_ns": 100,
            "end_ns": 200,
            "rows": 3,
            "task": "a",
            "reason": "stop_episode",
        },
        {"recorder": "lerobot_recorder", "event": "saved", "episode_index": 1, "start_ns": 300, "end_ns": 400},
        {"recorder": "lerobot_recorder", "event": "deleted", "episode_index": 1},
        {"recorder": "lerobot_recorder", "event": "discarded", "episode_index": 1, "start_ns": 450},
        {
            "recorder": "lerobot_recorder",
            "event": "saved",
            "episode_index": 1,
            "start_ns": 500,
            "end_ns": 600,
            "reason": "max_episode_s",
        },
    ]
    lines = [json.dumps(e) for e in ev] + ["not json"]
    spans = spans_from_events(lines, "lerobot_recorder")
    assert [(s.start_ns, s.end_ns, s.feed_from_ns, s.timeout) for s in spans] == [
        (100, 200, 90, False),
        (500, 600, 500, True),
    ]
    assert spans[0].task == "a" and spans[0].rows == 3
    assert [s.start_ns for s in spans_from_events(lines)] == [1]  # first recorder that saved
    with pytest.raises(ValueError, match="overlap"):
        spans_from_ranges(["1:3", "2.9:4"], 0, 100_000_000)
    with pytest.raises(ValueError, match="START:END"):
        spans_from_ranges(["1-3"], 0)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_events_ranges_and_whole_bag(tmp_path, cfg, storage, capsys):
    bag = make_bag(tmp_path / "bag", storage, duration_s=4.0, episodes=[(0.5, 2.0), (2.4, 3.6)])
    out = tmp_path / "ev"
    assert run(bag, "--format", "lerobot", "--out", out, "--config", cfg) == 0
    eps = episodes(out)
    # 0.5..2.0 s on a 30 fps grid from the origin: ticks 0..45
    assert [e["length"] for e in eps] == [46, 37] and eps[0]["tasks"] == ["synthetic task"]
    assert all(e["video_frame_lengths"] == {"cam_front": e["length"], "cam_wrist": e["length"]} for e in eps)
    assert eps[0]["source"]["start_ns"] == SynthScenario().t0_ns + 500_000_000
    assert eps[0]["skipped_start_ticks"] == 0 and eps[0]["raw_quest_lines"] > 0
    t = table(out, 0)
    assert np.allclose(t["timestamp"], np.arange(46) / 30, atol=1e-6)
    assert validate_root(out, full=True) == []
    sessions = [json.loads(x) for x in (out / "meta" / "collection_sessions.jsonl").read_text().splitlines()]
    assert sessions[0]["arm"]["firmware"] == "S-V1.6-3" and sessions[0]["source"]["converter"] == "piper-bag2dataset"
    assert len(sessions[0]["source"]["fingerprints"][0]) == 64

    nev = make_bag(tmp_path / "nev", storage, duration_s=3.0, with_events=False)
    out2 = tmp_path / "ranges"
    assert (
        run(
            nev,
            "--format",
            "lerobot",
            "--out",
            out2,
            "--config",
            cfg,
            "--episode",
            "0.5:1.0",
            "--episode",
            "1.5:2.5",
            "--task",
            "ranged",
        )
        == 0
    )
    assert [(e["length"], e["tasks"]) for e in episodes(out2)] == [(16, ["ranged"]), (31, ["ranged"])]
    assert run(nev, "--format", "lerobot", "--out", tmp_path / "notask") == 1  # recorder defaults: task ""
    assert "has no task" in capsys.readouterr().err
    out3 = tmp_path / "whole"
    assert run(nev, "--format", "lerobot", "--out", out3, "--config", cfg) == 0
    (whole,) = episodes(out3)
    assert whole["tasks"] == ["config task"] and 85 <= whole["length"] <= 90

    h5 = tmp_path / "ev.hdf5"
    assert run(bag, "--format", "rgbd", "--out", h5, "--config", cfg) == 0
    assert validate_file(h5, full=True) == []
    with h5py.File(h5, "r") as f:
        assert list(f["index/episode_lengths"][()]) == [45, 36]  # T transitions for T + 1 observations
        assert bool(f["transitions/terminals"][44]) and not bool(f["transitions/timeouts"][44])


def test_bag_started_mid_episode_skips_that_episode(tmp_path, cfg, capsys):
    """``ros2 bag record`` started 1 s into a session: the first episode's start is not in the bag."""
    s = SynthScenario(duration_s=4.0, episodes=[(0.5, 2.0), (2.4, 3.6)], cameras=("cam_front", "cam_wrist"))
    late = (m for m in scenario_messages(s) if m[2] >= s.t0_ns + 1_000_000_000)
    bag = write_bag(tmp_path / "late", late)
    out = tmp_path / "late_out"
    assert run(bag, "--format", "lerobot", "--out", out, "--config", cfg) == 0
    (ep,) = episodes(out)
    assert ep["length"] == 37 and ep["source"]["live_episode_index"] == 1
    assert "live episode 0 began 0.502s before the bag's first message: skipped" in capsys.readouterr().err
    h5 = tmp_path / "late.hdf5"
    assert run(bag, "--format", "rgbd", "--out", h5, "--config", cfg) == 0
    with h5py.File(h5, "r") as f:
        assert list(f["index/episode_lengths"][()]) == [36]


def _bad_bags(tmp: Path, good: Path) -> dict[str, Path]:
    bags = {}
    for kind in ("truncated", "corrupt"):
        b = tmp / kind
        shutil.copytree(good, b)
        f = next(p for p in b.iterdir() if p.suffix == ".db3")
        data = bytearray(f.read_bytes())
        if kind == "truncated":
            data = data[: len(data) // 2]
        else:
            data[4096 : len(data) // 2] = os.urandom(len(data) // 2 - 4096)
        f.write_bytes(bytes(data))
        bags[kind] = b
    bags["topicless"] = write_bag(tmp / "topicless", iter([("/chatter", "std_msgs/msg/String", 1, string("hi"))]))
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(get_types_from_msg("float64 x", "piper_msgs/msg/Thing"))
    with Writer(tmp / "wrongtype", version=9, storage_plugin=StoragePlugin.SQLITE3) as w:
        c = w.add_connection("/arm/joint_states", "piper_msgs/msg/Thing", typestore=store)
        w.write(c, 1, store.serialize_cdr(store.types["piper_msgs/msg/Thing"](x=1.0), "piper_msgs/msg/Thing"))
    bags["wrongtype"] = tmp / "wrongtype"
    with Writer(tmp / "nodefinition", version=9, storage_plugin=StoragePlugin.SQLITE3) as w:
        c = w.add_connection("/custom", "piper_msgs/msg/Unknown", msgdef="", rihs01="RIHS01_" + "0" * 64)
        w.write(c, 1, b"\x00\x01\x00\x00abcd")
    bags["nodefinition"] = tmp / "nodefinition"
    bags["missing"] = tmp / "does_not_exist"
    return bags


def test_bad_bags_fail_alone_with_clear_errors(tmp_path, cfg, capsys):
    good = make_bag(tmp_path / "good", duration_s=2.0, episodes=[(0.3, 1.5)])
    bad = _bad_bags(tmp_path, good)
    out = tmp_path / "out"
    rc = run(
        bad["truncated"],
        good,
        bad["corrupt"],
        bad["topicless"],
        bad["wrongtype"],
        bad["nodefinition"],
        bad["missing"],
        "--format",
        "lerobot",
        "--out",
        out,
        "--config",
        cfg,
        "--jobs",
        "2",
    )
    cap = capsys.readouterr()
    assert rc == 1
    assert "1 of 7 bags converted or skipped" in cap.out and "6 of 7 bags FAILED" in cap.out
    err = cap.err
    assert f"FAILED {bad['truncated']}: " in err and "malformed" in err
    assert f"FAILED {bad['corrupt']}: " in err
    assert "missing topics ['/arm/joint_states'" in err and "/chatter" in err
    assert "/arm/joint_states is piper_msgs/msg/Thing, expected sensor_msgs/msg/JointState" in err
    assert "unknown message type" in err and "piper_msgs/msg/Unknown" in err
    assert "no such bag" in err
    assert len(episodes(out)) == 1 and validate_root(out) == []


def decode(path: Path) -> list[tuple[int, np.ndarray]]:
    with av.open(str(path)) as c:
        return [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


def _same_lerobot(a: Path, b: Path) -> None:
    ea, eb = episodes(a), episodes(b)
    assert len(ea) == len(eb) > 0
    for x, y in zip(ea, eb):
        assert dict(x.items()) == dict(y.items())
        ta, tb = table(a, x["episode_index"]), table(b, y["episode_index"])
        assert ta == tb
        for cam in ("cam_front", "cam_wrist"):
            rel = f"videos/chunk-000/observation.images.{cam}/episode_{x['episode_index']:06d}.mp4"
            fa, fb = decode(a / rel), decode(b / rel)
            # same frames at the same PTS; libx264's frame threads may round a few pixels differently
            assert [f[0] for f in fa] == [f[0] for f in fb]
            assert max(np.abs(u[1].astype(int) - v[1].astype(int)).mean() for u, v in zip(fa, fb)) < 3
    for name in ("info.json", "stats.json", "tasks.jsonl"):
        assert (a / "meta" / name).read_bytes() == (b / "meta" / name).read_bytes(), name


@pytest.mark.integration
def test_jobs_resume_and_crash_safety(tmp_path, cfg):
    bags = [
        make_bag(
            tmp_path / f"b{i}",
            duration_s=2.5,
            seed=i,
            t0_ns=1_700_000_000_000_000_000 + i * 10**10,
            episodes=[(0.3, 1.1), (1.4, 2.2)],
            task=f"task {i % 2}",
        )
        for i in range(4)
    ]
    one = tmp_path / "one"
    assert run(*bags, "--format", "lerobot", "--out", one, "--config", cfg, "--jobs", "1") == 0
    assert [e["tasks"][0] for e in episodes(one)] == ["task 0"] * 2 + ["task 1"] * 2 + ["task 0"] * 2 + ["task 1"] * 2

    # resume: converted bags are skipped, new ones appended, with --jobs 2: the same as one --jobs 1 run
    part = tmp_path / "part"
    assert run(*bags[:2], "--format", "lerobot", "--out", part, "--config", cfg) == 0
    before = (part / "meta" / "episodes.jsonl").read_bytes()
    assert run(*bags[:2], "--format", "lerobot", "--out", part, "--config", cfg) == 0
    assert (part / "meta" / "episodes.jsonl").read_bytes() == before
    assert run(*bags, "--format", "lerobot", "--out", part, "--config", cfg, "--jobs", "2") == 0
    _same_lerobot(one, part)

    # killed mid-run: the output stays valid, and the next run completes it
    killed = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "piper_recorder.cli.bag2dataset",
        *map(str, bags),
        "--format",
        "lerobot",
        "--out",
        str(killed),
        "--config",
        str(cfg),
        "--jobs",
        "2",
        "--no-progress",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + 60
    while len(episodes(killed)) < 3 and p.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(10)
    n = len(episodes(killed))
    assert 1 <= n < 8 or p.returncode == 0
    assert run(*bags, "--format", "lerobot", "--out", killed, "--config", cfg, "--jobs", "2") == 0
    assert validate_root(killed) == []
    assert [e["length"] for e in episodes(killed)] == [e["length"] for e in episodes(one)]
    assert [e["source"] for e in episodes(killed)] == [e["source"] for e in episodes(one)]
    assert not (tmp_path / ".killed.bag2dataset").exists()


def test_rgbd_jobs_and_resume(tmp_path, cfg):
    bags = [
        make_bag(
            tmp_path / f"b{i}",
            duration_s=2.0,
            seed=i,
            t0_ns=1_700_000_000_000_000_000 + i * 10**10,
            episodes=[(0.3, 1.6)],
            cameras=("cam_front",),
        )
        for i in range(3)
    ]
    one, two = tmp_path / "one.hdf5", tmp_path / "two.hdf5"
    assert run(*bags, "--format", "rgbd", "--out", one, "--config", cfg) == 0
    assert run(*bags[:1], "--format", "rgbd", "--out", two, "--config", cfg) == 0
    assert run(*bags, "--format", "rgbd", "--out", two, "--config", cfg, "--jobs", "2") == 0
    assert validate_file(two, full=True) == []
    with h5py.File(one, "r") as a, h5py.File(two, "r") as b:
        assert a.attrs["total_episodes"] == b.attrs["total_episodes"] == 3
        for ds in ("observations/rgb_jpeg", "observations/depth_jp2"):
            assert all(bytes(x) == bytes(y) for x, y in zip(a[ds], b[ds]))
        for ds in ("transitions/actions", "observations/state/arm_eef", "transitions/terminals"):
            assert np.array_equal(a[ds][()], b[ds][()])
        assert [json.loads(a["episodes"][f"demo_{i}"].attrs["source"])["bag"] for i in range(3)] == list(map(str, bags))


def test_agilex_mapping_file(tmp_path, cfg):
    bag = write_bag(tmp_path / "agilex", scenario_messages(agilex_scenario(duration_s=2.5)), "mcap")
    mapping = tmp_path / "agilex.yaml"
    mapping.write_text(
        yaml.safe_dump(
            {
                "joint_states": {
                    "topic": "/joint_states_single",
                    "names": [f"joint{i}" for i in range(1, 8)],
                    "gripper_scale": 0.001,
                },
                "eef_pose": "/end_pose_stamped",
                "commanded_pose": "/end_pose_stamped",
                "commanded_gripper": {"topic": "/joint_states_single", "name": "joint7", "scale": 0.001},
                "cameras": {
                    "cam_front": {
                        "color": "/camera/color/image_raw",
                        "depth": "/camera/aligned_depth_to_color/image_raw",
                    }
                },
                "raw_quest": None,
                "provenance": None,
            }
        )
    )
    out = tmp_path / "out"
    # without the mapping the robot graph's topics are missing
    assert run(bag, "--format", "lerobot", "--out", tmp_path / "nomap", "--config", cfg) == 1
    assert (
        run(
            bag,
            "--format",
            "lerobot",
            "--out",
            out,
            "--config",
            cfg,
            "--mapping",
            mapping,
            "--episode",
            "0.2:2.2",
            "--task",
            "agilex",
        )
        == 0
    )
    (e,) = episodes(out)
    assert e["length"] == 61 and e["video_frame_lengths"] == {"cam_front": 61}
    t = table(out, 0)
    grip = np.asarray(t["observation.gripper"]).reshape(-1)
    assert grip.min() > 0.009 and grip.max() < 0.051  # 0.03 + 0.02 sin(t) m, from joint7 / 1000
    assert np.array_equal(np.asarray(t["action.arm_eef"]), np.asarray(t["observation.arm_eef"]))
    assert np.array_equal(np.asarray(t["action.gripper"]), np.asarray(t["observation.gripper"]))
    h5 = tmp_path / "agilex.hdf5"
    assert run(bag, "--format", "rgbd", "--out", h5, "--config", cfg, "--mapping", mapping) == 0
    assert validate_file(h5, full=True) == []
    # no --config: the code defaults give nominal timing, which every loader accepts
    doc = yaml.safe_load(mapping.read_text())
    doc["cameras"]["cam_front"].update(height=H, width=W)
    mapping.write_text(yaml.safe_dump(doc))
    plain = tmp_path / "no_config"
    assert (
        run(
            bag, "--format", "lerobot", "--out", plain, "--mapping", mapping, "--episode", "0.2:2.2", "--task", "agilex"
        )
        == 0
    )
    (e,) = episodes(plain)
    assert e["timestamp_mode"] == "nominal" and e["video_frame_lengths"] == {"cam_front": e["length"]}
    assert validate_root(plain) == []  # includes every row's frame at or before it, < 1e-4 s
    with av.open(str(plain / "videos/chunk-000/observation.images.cam_front/episode_000000.mp4")) as c:
        s = c.streams.video[0]
        pts = [p.pts * s.time_base for p in c.demux(s) if p.size]
    rows = [Fraction(float(t)) for t in table(plain, 0)["timestamp"]]  # float32 values, exactly
    assert len(pts) == len(rows) and all(p <= t < p + Fraction(1, 10_000) for p, t in zip(pts, rows))


def test_usage_errors_and_progress(tmp_path, cfg, capsys):
    bag = make_bag(tmp_path / "bag", duration_s=1.5, episodes=[(0.2, 1.2)], cameras=("cam_front",))
    assert run(bag, "--format", "rgbd", "--out", tmp_path / "x.zarr", "--config", cfg) == 2
    assert run(bag, "--format", "lerobot", "--out", tmp_path / "x", "--config", cfg, "--episode", "3:1") == 2
    bad_map = tmp_path / "m.yaml"
    bad_map.write_text("joint_state: /x\n")
    assert run(bag, "--format", "lerobot", "--out", tmp_path / "x", "--mapping", bad_map) == 2
    assert "unknown mapping keys ['joint_state']" in capsys.readouterr().err
    assert (
        bag2dataset(
            [str(bag), "--format", "rgbd", "--out", str(tmp_path / "p.hdf5"), "--config", str(cfg), "--progress"]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "bags: 100%" in err and "1/1" in err


def test_same_bag_twice_in_one_run_is_converted_once(tmp_path, cfg, capsys):
    bag = make_bag(tmp_path / "bag", duration_s=1.5, episodes=[(0.2, 1.2)], cameras=("cam_front", "cam_wrist"))
    copy = tmp_path / "copy"
    shutil.copytree(bag, copy)
    assert run(bag, copy, "--format", "lerobot", "--out", tmp_path / "out", "--config", cfg) == 0
    assert len(episodes(tmp_path / "out")) == 1
    assert f"skipped {copy}: 0 episodes" in capsys.readouterr().out


def test_import_episode_refuses_bad_input_and_leaves_the_root_unchanged(tmp_path, cfg):
    from piper_recorder.bag.config import topic_map
    from piper_recorder.bag.convert import ConvertOptions, open_writer
    from piper_recorder.lerobot.format.errors import SchemaError
    from piper_recorder.recording.config import LeRobotRecorderConfig, load_config

    bag = make_bag(tmp_path / "bag", duration_s=1.5, episodes=[(0.2, 1.2)])
    src = tmp_path / "src"
    assert run(bag, "--format", "lerobot", "--out", src, "--config", cfg) == 0
    (rec,) = episodes(src)
    assert "tick_delay_ms" not in rec
    s = load_config(LeRobotRecorderConfig, cfg)
    w = open_writer(ConvertOptions("lerobot", s, topic_map("lerobot", s)), tmp_path / "dst")
    try:
        t = table(src, 0)
        cols = {
            k: np.asarray(t[k], np.float32).reshape(len(t["timestamp"]), -1)
            for k in (
                "observation.arm_joint",
                "observation.arm_eef",
                "observation.gripper",
                "action.arm_eef",
                "action.gripper",
            )
        }
        vids = {
            c: src / f"videos/chunk-000/observation.images.{c}/episode_000000.mp4" for c in ("cam_front", "cam_wrist")
        }
        with pytest.raises(SchemaError, match="observation.gripper: missing"):
            w.import_episode(
                "t", t["timestamp"], {k: v for k, v in cols.items() if k != "observation.gripper"}, vids, None, rec
            )
        with pytest.raises(SchemaError, match="strictly increasing"):
            w.import_episode("t", np.zeros(len(t["timestamp"])), cols, vids, None, rec)
        assert w.total_episodes == 0 and all(v.exists() for v in vids.values())
        new = w.import_episode("t", t["timestamp"], cols, vids, None, rec)
        assert new["length"] == rec["length"] and new["video_frame_lengths"] == rec["video_frame_lengths"]
        assert new["source"] == rec["source"] and not any(v.exists() for v in vids.values())  # moved
    finally:
        w.close()
    assert validate_root(tmp_path / "dst", full=True) == []


def test_lerobot_version_v21_jobs_and_refusal(tmp_path, cfg, capsys):
    bags = [
        make_bag(
            tmp_path / f"b{i}",
            duration_s=2.0,
            seed=i,
            t0_ns=1_700_000_000_000_000_000 + i * 10**10,
            episodes=[(0.2, 0.9), (1.1, 1.8)],
        )
        for i in range(2)
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    assert run(*bags, "--format", "lerobot", "--out", one, "--config", cfg, "--lerobot-version", "v2.1") == 0
    assert (
        run(*bags, "--format", "lerobot", "--out", two, "--config", cfg, "--lerobot-version", "v2.1", "--jobs", "2")
        == 0
    )
    assert json.loads((one / "meta/info.json").read_text())["codebase_version"] == "v2.1"
    lines = [json.loads(x) for x in (one / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [x["episode_index"] for x in lines] == [0, 1, 2, 3]
    assert lines[0]["stats"]["observation.images.cam_front"]["count"][0] > 0
    # parallel staging roots hand their sampled image histograms over: the same stats as one writer
    for name in ("episodes_stats.jsonl", "stats.json"):
        assert (one / "meta" / name).read_bytes() == (two / "meta" / name).read_bytes(), name
    assert validate_root(one) == [] and validate_root(two) == []
    capsys.readouterr()
    assert run(*bags, "--format", "lerobot", "--out", one, "--config", cfg) == 2  # v2.0 onto a v2.1 root
    assert "LeRobot v2.1 root but lerobot_version is 'v2.0'" in capsys.readouterr().err
    assert (
        run(*bags, "--format", "rgbd", "--out", tmp_path / "x.hdf5", "--config", cfg, "--lerobot-version", "v2.1") == 2
    )


@pytest.mark.parametrize("fmt", ["lerobot", "rgbd"])
def test_episodes_start_from_the_capture_history_the_live_recorder_had(tmp_path, cfg, fmt, monkeypatch):
    """Live, a recorder keeps each camera's newest capture stamps while idle (``CaptureHistory``) and an
    episode's phase estimate starts from them; the converter, which skips decoding between episodes,
    keeps each camera topic's last phase window there, so every episode starts from the same history:
    the newest ``window_captures`` (colour, or paired colour/depth) stamps received before its start.
    """
    from piper_recorder.assembly.frame_assign import window_captures
    from piper_recorder.assembly.messages import stamp_to_ns
    from piper_recorder.bag.source import BagSource
    from piper_recorder.recording import controller

    seen = []

    class Spy(controller.EpisodeAssembler):
        def __init__(self, config, start_ns, sink, depth=False, history=None):
            seen.append((start_ns, {cam: list(h) for cam, h in (history or {}).items()}))
            super().__init__(config, start_ns, sink, depth, history)

    monkeypatch.setattr(controller, "EpisodeAssembler", Spy)
    bag = make_bag(tmp_path / "bag", duration_s=9.0, episodes=[(2.5, 4.0), (7.0, 8.5)])
    out = tmp_path / ("ds" if fmt == "lerobot" else "ds.hdf5")
    assert run(bag, "--format", fmt, "--out", out, "--config", cfg) == 0
    cams = ("cam_front", "cam_wrist") if fmt == "lerobot" else ("cam_front",)
    received = {cam: [] for cam in cams}  # (receive time, capture stamp) of each colour image
    with BagSource(bag) as src:
        for m in src.messages([f"/{cam}/color/image_raw" for cam in cams]):
            received[m.topic.split("/")[1]].append((m.log_ns, stamp_to_ns(m.msg.header.stamp)))
    assert len(seen) == 2
    for start_ns, history in seen:
        for cam in cams:
            before = sorted(s for log, s in received[cam] if log < start_ns)[-window_captures(30) :]
            assert history[cam] == before and len(before) == 60, (cam, start_ns)

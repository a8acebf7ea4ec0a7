"""Curation (#24 items 1, 2): outcome labels and the save-time integrity verdict, through the real
writers (LeRobot v2.0 root, RGB-D HDF5 file) driven by the recorders' own episode controller, then
``piper-dataset label`` / ``filter`` (the edits' atomic rebuild) and the v3.0 export's meta/episodes.

Every output is read back with independent readers (json, pyarrow, h5py, PyAV through our
validator) and validated; the graph-level proof (service, headset chord, a stalled sim camera) is
test/system/test_curation_graph.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from piper_recorder.cli import dataset as dataset_cli
from piper_recorder.lerobot.export.operation import export
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import LeRobotWriter
from piper_recorder.recording.config import (
    LeRobotRecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    rgbd_writer_config,
)
from piper_recorder.recording.targets import LeRobotTarget, RgbdTarget
from piper_recorder.recording.verdict import VerdictConfig, judge
from rgbd_writer import RgbdWriter
from rgbd_writer.validate import validate_file

from support.curation import CLOCK, MS, controller, record_episode


def _episodes(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines() if x.strip()]


# ---- the verdict alone ------------------------------------------------------------------------------
HEALTHY = {
    "length": 300,
    "timestamp_mode": "nominal",
    "video_frame_lengths": {"cam": 300},
    "video_dropped_frames": {"cam": {"non_increasing_pts": 0, "queue_full": 0}},
    "frames_dropped": {"cam": 0},
    "frames_repeated": {"cam": 2},
    "frames_stale": {"cam": 0},
    "frame_age_max_ms": {"cam": 34.0},
    "frame_ahead_max_ms": {"cam": 0.4},
    "values_stale": {"joint_states": 0, "eef_pose": 0},
    "messages_late": {"joint_states": 1},
}


def test_verdict_thresholds_and_reasons():
    cfg = VerdictConfig()
    assert judge(HEALTHY, cfg, 30, ["cam"]).fields() == {"verdict": "ok", "verdict_reasons": []}
    # a camera that stalled for a second: 30 repeated frames, a frame 1 s old at a row
    stall = {**HEALTHY, "frames_repeated": {"cam": 32}, "frame_age_max_ms": {"cam": 1034.0}}
    v = judge(stall, cfg, 30, ["cam"])
    assert v.verdict == "bad"
    assert any("cam: oldest frame at a row (camera stall): 1034 ms > 500 ms" in r for r in v.reasons), v.reasons
    assert any(r.startswith("bad: cam: frames repeated: 32 of 300 rows") for r in v.reasons), v.reasons
    # what was written: a missing video frame in nominal mode is bad; any lost frame warns
    v = judge({**HEALTHY, "video_frame_lengths": {"cam": 299}, "frames_dropped": {"cam": 1}}, cfg, 30, ["cam"])
    assert v.verdict == "bad" and "bad: cam: 299 video frames written for 300 rows" in v.reasons
    assert "warn: cam: frames skipped between rows (capture jitter): 1 of 300 rows (0.3 % > 0 %)" in v.reasons
    # capture jitter is named as jitter, a loss as a loss; several causes each with their count
    v = judge({**HEALTHY, "frames_dropped": {"cam": 0}, "frames_dropped_writer_behind": {"cam": 2}}, cfg, 30, ["cam"])
    assert v.reasons == ("warn: cam: frames lost behind the writer: 2 of 300 rows (0.7 % > 0 %)",), v.reasons
    v = judge(
        {**HEALTHY, "frames_dropped": {"cam": 4}, "video_dropped_frames": {"cam": {"queue_full": 3}}}, cfg, 30, ["cam"]
    )
    assert v.verdict == "bad" and v.reasons == (
        (
            "bad: cam: frames skipped between rows (capture jitter) 4, lost to a full encoder queue 3: 7 of 300 rows "
            "(2.3 % > 2 %)"
        ),
    ), v.reasons
    assert not any("lost" in r for r in judge({**HEALTHY, "frames_dropped": {"cam": 3}}, cfg, 30, ["cam"]).reasons)
    # arm feedback gap (stale rows) and a clock step (a frame captured 20 ms after its row)
    v = judge({**HEALTHY, "values_stale": {"joint_states": 4}, "frame_ahead_max_ms": {"cam": 20.0}}, cfg, 30, ["cam"])
    assert v.verdict == "warn" and len(v.reasons) == 2, v.reasons
    # two arms: each arm's feedback gap is named as arm feedback with the arm's name; another input as an input
    v = judge({**HEALTHY, "values_stale": {"right_eef_pose": 20, "wrench": 20}}, cfg, 30, ["cam"])
    assert [r.split(":")[1].strip() for r in v.reasons] == [
        "arm feedback right_eef_pose stale (gap longer than stale_s)",
        "input wrench stale",
    ], v.reasons
    # thresholds are parameters: a laxer config accepts the same counts
    assert (
        judge(
            stall,
            VerdictConfig(bad_repeated=0.5, warn_repeated=0.5, warn_frame_age_ms=2000, bad_frame_age_ms=2000),
            30,
            ["cam"],
        ).verdict
        == "ok"
    )
    # row times read back: one off the grid is bad
    times = [k / 30 for k in range(10)]
    assert judge(HEALTHY, cfg, 30, [], timestamps=times).verdict == "ok"
    times[5] += 0.002
    assert judge(HEALTHY, cfg, 30, [], timestamps=times).verdict == "bad"
    with pytest.raises(ValueError, match="bad_stale must be >= verdict.warn_stale"):
        VerdictConfig(warn_stale=0.2, bad_stale=0.1).validate()


# ---- recorded through the controller and the real writers --------------------------------------
def test_lerobot_labels_verdicts_filter_and_v30(tmp_path: Path):
    root = tmp_path / "ds"
    cfg = LeRobotRecorderConfig(
        root=str(root), cameras=["cam_front"], camera_height=16, camera_width=16, lateness_s=0.0
    )
    events: list[dict] = []
    target = LeRobotTarget(LeRobotWriter(cfg.root, lerobot_writer_config(cfg)), fps=30, cameras=("cam_front",))
    c = controller(target, cfg, events)
    try:
        assert not c.label("failure").ok  # nothing to label yet
        t = time.time_ns()
        assert c.start("pick", lambda: t).ok
        ans = c.label("success", "clean grasp")  # in flight: applied at the save
        assert ans.ok and "applied at its save" in ans.message
        c.discard()
        record_episode(c, 2.0)  # a new episode: no label carried over
        record_episode(c, 2.0, stall=(0.7, 1.7))  # a camera stall of a second
        assert not c.label("maybe").ok and not c.label("success", "x" * 201).ok
        ans = c.label("failure", "camera froze")  # the last saved one, rewritten
        assert ans.ok and "episode 1 labelled failure" in ans.message, ans.message
        record_episode(c, 2.0)
        assert c.label("success").ok  # after the save
        assert c.label("success", episode=0).ok  # an earlier one of this session
        assert not c.label("success", episode=7).ok
        st = c.status(time.time_ns())
        assert (
            st["last_label"] == {"episode_index": 0, "outcome": "success"} and st["last_verdict"]["verdict"] == "ok"
        ), st["last_verdict"]
    finally:
        c.shutdown(save=False)
    eps = _episodes(root)
    assert [e.get("outcome") for e in eps] == ["success", "failure", "success"]
    assert [e["verdict"] for e in eps] == ["ok", "bad", "ok"], [e["verdict_reasons"] for e in eps]
    assert eps[1]["outcome_note"] == "camera froze" and "outcome_note" not in eps[0]
    assert any("cam_front: oldest frame at a row (camera stall)" in r for r in eps[1]["verdict_reasons"])
    saved = [e for e in events if e["event"] == "saved"]
    assert [e["verdict"] for e in saved] == ["ok", "bad", "ok"] and saved[1]["verdict_reasons"]
    assert [e["outcome"] for e in events if e["event"] == "labeled"] == ["success", "failure", "success", "success"]
    assert validate_root(root) == []

    # piper-dataset label (afterwards, in place) and filter (a new root of the chosen episodes)
    assert (
        dataset_cli.main(["label", str(root), "--episodes", "2", "--outcome", "failure", "--note", "slipped", "-q"])
        == 0
    )
    assert [(e.get("outcome"), e.get("outcome_note")) for e in _episodes(root)] == [
        ("success", None),
        ("failure", "camera froze"),
        ("failure", "slipped"),
    ]
    assert validate_root(root) == []
    out = tmp_path / "good"
    assert (
        dataset_cli.main(["filter", str(root), "--outcome", "success", "--verdict", "ok", "--out", str(out), "-q"]) == 0
    )
    (kept,) = _episodes(out)
    assert kept["episode_index"] == 0 and kept["outcome"] == "success" and kept["verdict"] == "ok"
    assert validate_root(out) == []
    edits = [json.loads(x) for x in (out / "meta/dataset_edits.jsonl").read_text().splitlines()]
    assert [e["operation"] for e in edits] == ["label", "filter"] and edits[-1]["selected"] == [0]
    assert (
        dataset_cli.main(
            [
                "filter",
                str(root),
                "--verdict",
                "bad,warn",
                "--outcome",
                "success",
                "--out",
                str(tmp_path / "none"),
                "-q",
            ]
        )
        == 2
    )  # nothing matches: refused
    assert not (tmp_path / "none").exists()
    assert dataset_cli.main(["filter", str(root), "--verdict", "great", "--out", str(tmp_path / "x"), "-q"]) == 2

    # the v3.0 export carries both fields into meta/episodes/
    v3 = tmp_path / "v3"
    export(root, "v3.0", v3)
    (f,) = sorted((v3 / "meta/episodes").glob("*/*.parquet"))
    t3 = pq.read_table(f, columns=["episode_index", "outcome", "outcome_note", "verdict", "verdict_reasons"])
    rows = t3.to_pylist()
    assert [r["outcome"] for r in rows] == ["success", "failure", "failure"]
    assert [r["verdict"] for r in rows] == ["ok", "bad", "ok"] and rows[1]["verdict_reasons"] == eps[1][
        "verdict_reasons"
    ]
    assert [r["outcome_note"] for r in rows] == [None, "camera froze", "slipped"]


def test_rgbd_labels_and_verdict_in_the_episode_attrs(tmp_path: Path):
    path = tmp_path / "rgbd.hdf5"
    cfg = RgbdRecorderConfig(path=str(path), camera="cam_front", camera_height=64, camera_width=64, lateness_s=0.0)
    events: list[dict] = []
    c = controller(RgbdTarget(RgbdWriter(path, rgbd_writer_config(cfg)), "cam_front", fps=30), cfg, events)
    try:
        t = time.time_ns()
        assert c.start("pick", lambda: t).ok
        assert c.label("failure", "dropped it").ok  # in flight
        c.discard()
        record_episode(c, 1.5, px=64)
        assert c.label("failure", "dropped it").ok  # the saved one, in the file
        record_episode(c, 2.0, stall=(0.6, 1.6), px=64)
    finally:
        c.shutdown(save=False)
    assert validate_file(path) == []
    with h5py.File(path, "r") as f:
        a0, a1 = f["episodes/demo_0"].attrs, f["episodes/demo_1"].attrs
        assert (a0["outcome"], a0["outcome_note"], bool(a0["success"]), a0["verdict"]) == (
            "failure",
            "dropped it",
            False,
            "ok",
        )
        assert "outcome" not in a1 and "success" not in a1 and a1["verdict"] == "bad"  # unlabelled: no claim
        assert any("camera stall" in r for r in json.loads(a1["verdict_reasons"]))
    # filter and label over the RGB-D file through the same rebuild
    out = tmp_path / "bad.hdf5"
    assert dataset_cli.main(["filter", str(path), "--verdict", "bad", "--out", str(out), "-q"]) == 0
    assert dataset_cli.main(["label", str(out), "--episodes", "0", "--outcome", "success", "-q"]) == 0
    assert validate_file(out) == []
    with h5py.File(out, "r") as f:
        assert int(f.attrs["total_episodes"]) == 1
        a = f["episodes/demo_0"].attrs
        assert (a["outcome"], a["verdict"], bool(a["success"])) == ("success", "bad", True)


def test_rgbd_success_is_written_only_for_labelled_episodes(tmp_path: Path):
    """``success`` in ``/episodes/demo_N`` where known: a labelled success True, a labelled failure False, an
    unlabelled episode (stopped or timed out, good or bad) none at all, so a loader filtering on it never
    trains on unlabelled data. ``piper-dataset label`` sets it; the validator accepts both. Read with h5py.
    """
    path = tmp_path / "rgbd.hdf5"
    cfg = RgbdRecorderConfig(path=str(path), camera="cam_front", camera_height=32, camera_width=32, lateness_s=0.0)
    events: list[dict] = []
    c = controller(RgbdTarget(RgbdWriter(path, rgbd_writer_config(cfg)), "cam_front", fps=30), cfg, events)
    try:
        record_episode(c, 1.0, px=32)  # 0: unlabelled, stopped
        record_episode(c, 1.0, px=32)  # 1: labelled success after the save
        assert c.label("success").ok
        t = CLOCK[0] = CLOCK[0] + 2_000 * MS  # 2: labelled failure while recording
        assert c.start("pick", lambda: t).ok and c.label("failure", "slipped").ok
        c.discard()
        record_episode(c, 1.0, px=32)
        assert c.label("failure", episode=2).ok
        record_episode(c, 1.0, stall=(0.2, 0.9), px=32)  # 3: unlabelled, a bad verdict
    finally:
        c.shutdown(save=False)
    assert validate_file(path) == []
    with h5py.File(path, "r") as f:
        a = [dict(f[f"episodes/demo_{e}"].attrs) for e in range(int(f.attrs["total_episodes"]))]
    assert len(a) == 4
    assert "success" not in a[0] and "success" not in a[3] and a[3]["verdict"] == "bad"
    assert a[1]["success"] == np.bool_(True) and a[1]["outcome"] == "success"
    assert a[2]["success"] == np.bool_(False) and a[2]["outcome"] == "failure"
    assert [e.get("success") for e in events if e.get("event") == "saved"] == [None, None, None, None]
    # labelled afterwards: the flag follows the outcome; the others keep theirs (or none)
    assert dataset_cli.main(["label", str(path), "--episodes", "0", "--outcome", "failure", "-q"]) == 0
    assert dataset_cli.main(["label", str(path), "--episodes", "3", "--outcome", "success", "-q"]) == 0
    assert validate_file(path) == []
    with h5py.File(path, "r") as f:
        got = [f[f"episodes/demo_{e}"].attrs.get("success") for e in range(4)]
    assert got == [np.bool_(False), np.bool_(True), np.bool_(False), np.bool_(True)]
    # a timed-out episode without a label claims nothing either
    path2 = tmp_path / "timeout.hdf5"
    c = controller(RgbdTarget(RgbdWriter(path2, rgbd_writer_config(cfg)), "cam_front", fps=30), cfg, [])
    try:
        t = CLOCK[0] = max(time.time_ns(), CLOCK[0] + 2_000 * MS)
        assert c.start("pick", lambda: t).ok
        for i in range(60):
            s = t + i * MS * 10
            c.add_joint_state(s, [0.1] * 6 + [0.04])
            c.add_eef_pose(s, (0.2, 0, 0.2), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0.2, 0, 0.2), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.02)
            if i % 3 == 0:
                c.add_frame("cam_front", s, np.zeros((32, 32, 3), np.uint8), np.full((32, 32), 500, np.uint16))
            c.tick(s)
        CLOCK[0] = t + 60 * MS * 10
        assert c.stop(CLOCK[0], reason="max_episode_s").ok
    finally:
        c.shutdown(save=False)
    with h5py.File(path2, "r") as f:
        demo = f["episodes/demo_0"].attrs
        assert bool(demo["truncated"]) or bool(f["transitions/timeouts"][-1])
        assert "success" not in demo


def test_hud_shows_the_last_episode_and_dashboard_events_carry_the_verdict():
    from piper_recorder.dashboard.model import clean_event
    from piper_recorder.quest.hud import HudModel

    hud = HudModel("lerobot_recorder")
    hud.on_episode_event(1.0, {"recorder": "lerobot_recorder", "event": "started", "episode_index": 3})
    hud.on_episode_event(
        2.0,
        {
            "recorder": "lerobot_recorder",
            "event": "saved",
            "episode_index": 3,
            "verdict": "bad",
            "verdict_reasons": ["bad: cam_front: ..."],
        },
    )
    assert hud.state(2.1).headline() == "READY  1 saved  ep3 unlabelled bad"
    hud.on_episode_event(
        2.2, {"recorder": "rgbd_recorder", "event": "labeled", "episode_index": 3, "outcome": "success"}
    )  # another recorder: not the HUD's
    hud.on_episode_event(
        2.3, {"recorder": "lerobot_recorder", "event": "labeled", "episode_index": 3, "outcome": "failure"}
    )
    assert hud.state(2.4).headline() == "READY  1 saved  ep3 failure bad"
    hud.on_episode_event(
        2.5, {"recorder": "lerobot_recorder", "event": "labeled", "episode_index": 3, "outcome": "<b>x</b>"}
    )  # never shown as it came
    assert hud.state(2.6).headline() == "READY  1 saved  ep3 unlabelled bad"
    ev = clean_event(
        {
            "recorder": "r",
            "event": "saved",
            "episode_index": 1,
            "verdict": "warn",
            "verdict_reasons": ["warn: cam: frames repeated"],
            "outcome": "success",
        }
    )
    assert (ev["verdict"], ev["verdict_reasons"], ev["outcome"]) == ("warn", ["warn: cam: frames repeated"], "success")
    bad = clean_event({"recorder": "r", "event": "saved", "verdict_reasons": "<script>"})
    assert bad["verdict_reasons"] == [] and "verdict_reasons" in bad["invalid_fields"]


def test_verdict_thresholds_from_a_parameter_file(tmp_path: Path):
    """The bag converter reads the recorders' verdict.* parameters from the same file as the node."""
    from piper_recorder.recording.config import load_config

    p = tmp_path / "params.yaml"
    p.write_text(
        "lerobot_recorder:\n  ros__parameters:\n    fps: 30\n    verdict.bad_repeated: 0.2\n"
        "    verdict.warn_repeated: 0.1\n"
    )
    cfg = load_config(LeRobotRecorderConfig, p)
    assert (cfg.verdict.warn_repeated, cfg.verdict.bad_repeated, cfg.verdict.bad_dropped) == (0.1, 0.2, 0.02)
    p.write_text("lerobot_recorder:\n  ros__parameters:\n    verdict.bad_everything: 1.0\n")
    with pytest.raises(ValueError, match=r"unknown parameters \['verdict.bad_everything'\]"):
        load_config(LeRobotRecorderConfig, p)
    p.write_text("lerobot_recorder:\n  ros__parameters:\n    verdict.warn_late: 0.5\n")
    with pytest.raises(ValueError, match="bad_late must be >= verdict.warn_late"):
        load_config(LeRobotRecorderConfig, p)

"""piper-dataset merge|split|delete|retask on LeRobot roots, checked with independent
readers: pyarrow for the rows, PyAV for the frames (each test frame spells its row index in its
pixels), json for the meta, piper-validate and lerobot-doctor as separate processes. Roots are
recorded by the real writer (fast, small frames); the demo roots through the sim graph and
LeRobot 0.3.3's loader are in test_dataset_edit_consumers.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.dataset_edit import EditError, delete, merge, retask, retype, split
from piper_recorder.lerobot.format.features import FeatureSpec, piper_features
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
from piper_recorder.lerobot.writer.video_encoder import VideoConfig

from support.lerobot_data import H, W, index_frame, row_values, tree_hashes
from support.lerobot_roots import BIN, CAMS, FPS, TASKS, check_root, doctor, episode_rows, jsonl, record, validate

pytestmark = pytest.mark.integration


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "piper-dataset"), *args], capture_output=True, text=True, timeout=300)


# ---- merge ------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_merge_equals_recording_the_episodes_in_one_root(tmp_path, version):
    a, b, m, direct = (tmp_path / n for n in ("a", "b", "m", "direct"))
    record(a, [110, 115, 108], version=version)
    record(b, [112, 109], seed0=3, version=version)
    record(direct, [110, 115, 108, 112, 109], version=version)  # the same episodes recorded in one root
    before = {r: tree_hashes(r) for r in (a, b)}
    res = merge([a, b], m)
    assert res.totals == [{"episodes": 5, "frames": 554}]
    assert {r: tree_hashes(r) for r in (a, b)} == before  # sources untouched
    check_root(m, [(a, 0, "pick"), (a, 1, "place"), (a, 2, "stack"), (b, 0, "pick"), (b, 1, "place")])
    # stats, episodes_stats, info, tasks: exactly what the writer wrote recording them in one root
    names = ["stats.json", "info.json", "tasks.jsonl", "modality.json"] + (
        ["episodes_stats.jsonl"] if version == "v2.1" else []
    )
    for name in names:
        assert (m / "meta" / name).read_bytes() == (direct / "meta" / name).read_bytes(), name
    for i in range(5):  # the parquet files too: same schema, same HF metadata, same bytes
        rel = f"data/chunk-000/episode_{i:06d}.parquet"
        assert pq.read_schema(m / rel).equals(pq.read_schema(direct / rel), check_metadata=True)
        assert pq.read_table(m / rel).equals(pq.read_table(direct / rel))
    # every session of every source, in order, and the edit recorded
    sessions = jsonl(m / "meta/collection_sessions.jsonl")
    assert [s["root_tag"] for s in sessions] == ["a", "b"]
    assert [s["session_id"] for s in sessions] == [
        jsonl(r / "meta/collection_sessions.jsonl")[0]["session_id"] for r in (a, b)
    ]
    assert json.loads((m / "meta/collection_meta.json").read_text())["root_tag"] == "b"
    edit = jsonl(m / "meta/dataset_edits.jsonl")[-1]
    assert edit["operation"] == "merge" and edit["episodes_from"] == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]]
    # videos are the source files (hard links), never re-encoded
    rel = "videos/chunk-000/observation.images.cam_front/episode_000004.mp4"
    assert (m / rel).stat().st_ino == (
        b / "videos/chunk-000/observation.images.cam_front/episode_000001.mp4"
    ).stat().st_ino
    validate(m)
    doctor(m)


def test_merge_refusals_name_what_differs(tmp_path):
    a = tmp_path / "a"
    record(a, [12])
    cases = {
        "fps": ({"fps": 15}, "fps: 30 vs 15"),
        "cams": ({"cams": ("cam_front",)}, "cameras: ['cam_front', 'cam_wrist'] vs ['cam_front']"),
        "version": ({"version": "v2.1"}, "lerobot_version: 'v2.0' vs 'v2.1'"),
        "robot": ({"robot_type": "other_arm"}, "robot type: 'agilex_piper' vs 'other_arm'"),
        "codec": (
            {"video": VideoConfig(max_block_s=None, codec="libx265")},
            "observation.images.cam_front video.codec: 'h264' vs 'hevc'",
        ),
    }
    for name, (kw, text) in cases.items():
        other = tmp_path / name
        fps = kw.pop("fps", FPS)
        cams = kw.pop("cams", CAMS)
        version = kw.pop("version", "v2.0")
        cfg = WriterConfig(
            fps=fps,
            cameras={c: CameraSpec(H, W) for c in cams},
            lerobot_version=version,
            **{"video": VideoConfig(max_block_s=None), **kw},
        )
        with LeRobotWriter(other, cfg) as w:
            w.start_episode("pick")
            for k in range(6):
                t = float(grid_timestamp(k, fps))
                w.add_row(t, row_values(t, 0))
                for cam in cams:
                    w.add_frame(cam, index_frame(k), t)
            w.save_episode()
        r = run_cli("merge", str(a), str(other), "--out", str(tmp_path / f"out_{name}"))
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert text in r.stderr, (name, r.stderr)
        assert not (tmp_path / f"out_{name}").exists()


def test_merge_refuses_a_root_held_by_a_writer(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    record(a, [10])
    record(b, [10], seed0=1)
    with (
        LeRobotWriter(b, WriterConfig(fps=FPS, cameras={c: CameraSpec(H, W) for c in CAMS})),
        pytest.raises(EditError, match="is open in a writer"),
    ):
        merge([a, b], tmp_path / "m")
    assert not (tmp_path / "m").exists()


# ---- the combined columns the writer recorded ---------------------------------------------------
PIPER_COMBINED = {
    "observation.arm_joint": "observation.state",
    "observation.arm_eef": "observation.state",
    "observation.gripper": "observation.state",
    "action.arm_eef": "action",
    "action.gripper": "action",
}


def test_edit_rebuilds_the_combined_columns_the_writer_recorded(tmp_path):
    """info.json records which combined column each split column joins, so a column joining one the
    old name guess does not know (LeRobot's observation.environment_state) edits like any other; a
    root written before the record (no key) still edits by the guess.
    """
    obj = FeatureSpec("observation.object_pose", ("x", "y", "z"), combined="observation.environment_state")
    src, out = tmp_path / "src", tmp_path / "out"
    record(
        src,
        [14, 15, 16],
        features=piper_features() + (obj,),
        extra=lambda t, seed: {obj.key: np.array([np.sin(t + seed), np.cos(2 * t), 0.1 * t + seed])},
    )
    info = json.loads((src / "meta/info.json").read_text())
    joins = {"observation.object_pose": "observation.environment_state"}
    assert info["piper_combined"] == PIPER_COMBINED | joins
    assert info["features"]["observation.environment_state"]["names"] == [
        "object_pose.x",
        "object_pose.y",
        "object_pose.z",
    ]
    delete(src, "1", out)
    check_root(out, [(src, 0, "pick"), (src, 2, "stack")])
    edited = json.loads((out / "meta/info.json").read_text())
    assert edited["features"] == info["features"] and edited["piper_combined"] == info["piper_combined"]
    np.testing.assert_array_equal(  # the combined column is still the object pose's rows
        episode_rows(out, 1)["observation.environment_state"], episode_rows(src, 2)["observation.object_pose"]
    )
    validate(out)

    old, old_out = tmp_path / "old", tmp_path / "old_out"
    record(old, [12, 13])
    info = json.loads((old / "meta/info.json").read_text())
    assert info.pop("piper_combined") == PIPER_COMBINED
    (old / "meta/info.json").write_text(json.dumps(info, indent=4))
    delete(old, "0", old_out)
    check_root(old_out, [(old, 1, "place")])
    assert json.loads((old_out / "meta/info.json").read_text())["piper_combined"] == PIPER_COMBINED


# ---- delete -----------------------------------------------------------------------------------
def test_delete_middle_episode_renumbers_everything_after_it(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    record(src, [20, 25, 18])
    before = tree_hashes(src)
    delete(src, "1", out)
    assert tree_hashes(src) == before
    check_root(out, [(src, 0, "pick"), (src, 2, "stack")])
    tasks = jsonl(out / "meta/tasks.jsonl")
    assert [t["task"] for t in tasks] == ["pick", "stack"]  # "place" is gone, "stack" renumbered to 1
    assert not (out / "videos/chunk-000/observation.images.cam_front/episode_000002.mp4").exists()
    assert not (out / "data/chunk-000/episode_000002.parquet").exists()
    validate(out)
    # in place: the same result at the source's path, atomically swapped
    r = run_cli("delete", str(src), "--episodes", "1")
    assert r.returncode == 0, r.stderr
    same = [
        k
        for k in tree_hashes(out)
        if k.startswith(("data/", "videos/"))
        or k in ("meta/info.json", "meta/stats.json", "meta/tasks.jsonl", "meta/episodes.jsonl")
    ]
    assert {k: tree_hashes(src)[k] for k in same} == {k: tree_hashes(out)[k] for k in same}
    assert set(tree_hashes(src)) == set(tree_hashes(out))  # nothing left of the old root
    assert not (tmp_path / ".src.dsedit-staging").exists()
    validate(src)


def test_delete_dry_run_changes_nothing_and_says_what_would_happen(tmp_path):
    src = tmp_path / "src"
    record(src, [10, 11, 12, 13])
    before = tree_hashes(src)
    r = run_cli("delete", str(src), "--episodes", "1-2", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "dry run" in r.stdout and "2 episodes, 23 rows" in r.stdout
    assert "episodes 0 <- " in r.stdout and "episodes 1 <- " in r.stdout and "episodes 3 (13 rows)" in r.stdout
    assert tree_hashes(src) == before
    r = run_cli("delete", str(src), "--episodes", "7")
    assert r.returncode == 2 and "episodes [7] do not exist" in r.stderr
    r = run_cli("delete", str(src), "--episodes", "0-3")
    assert r.returncode == 2 and "nothing would remain" in r.stderr
    assert tree_hashes(src) == before


# ---- split ------------------------------------------------------------------------------------
def test_split_and_merge_back_gives_the_original_rows(tmp_path):
    src = tmp_path / "src"
    record(src, [15, 16, 17, 18, 19], version="v2.1")
    split(src, tmp_path / "head", tmp_path / "tail", episodes="0-2")
    merge([tmp_path / "head", tmp_path / "tail"], tmp_path / "back")
    for i in range(5):
        rel = f"data/chunk-000/episode_{i:06d}.parquet"
        assert pq.read_table(tmp_path / "back" / rel).equals(pq.read_table(src / rel))
    for name in ("stats.json", "episodes_stats.jsonl", "tasks.jsonl", "info.json"):
        assert (tmp_path / "back/meta" / name).read_bytes() == (src / "meta" / name).read_bytes(), name
    check_root(tmp_path / "back", [(src, i, TASKS[i % 3]) for i in range(5)])
    # a seeded fraction: the same seed picks the same episodes; merged back, the same rows (as a set)
    r = run_cli(
        "split",
        str(src),
        "--fraction",
        "0.4",
        "--seed",
        "7",
        "--out",
        str(tmp_path / "val"),
        "--rest",
        str(tmp_path / "train"),
    )
    assert r.returncode == 0, r.stderr
    chosen = jsonl(tmp_path / "val/meta/dataset_edits.jsonl")[-1]["selected"]
    assert len(chosen) == 2
    split(src, tmp_path / "val2", None, fraction=0.4, seed=7)
    assert jsonl(tmp_path / "val2/meta/dataset_edits.jsonl")[-1]["selected"] == chosen
    check_root(tmp_path / "val", [(src, i, TASKS[i % 3]) for i in chosen])
    rest = [i for i in range(5) if i not in chosen]
    check_root(tmp_path / "train", [(src, i, TASKS[i % 3]) for i in rest])
    merge([tmp_path / "train", tmp_path / "val"], tmp_path / "back2")
    check_root(tmp_path / "back2", [(src, i, TASKS[i % 3]) for i in rest + chosen])
    for root in ("val", "train", "back2"):
        validate(tmp_path / root)


# ---- retask -----------------------------------------------------------------------------------
def test_retask_renames_and_merges_tasks(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    record(src, [10, 11, 12, 13])  # pick, place, stack, pick
    retask(src, {"place": "pick", "stack": "stack the cubes"}, out)
    check_root(out, [(src, 0, "pick"), (src, 1, "pick"), (src, 2, "stack the cubes"), (src, 3, "pick")])
    assert jsonl(out / "meta/tasks.jsonl") == [
        {"task_index": 0, "task": "pick"},
        {"task_index": 1, "task": "stack the cubes"},
    ]
    validate(out)
    r = run_cli("retask", str(src), "--rename", "nope=x")
    assert r.returncode == 2 and "no episode has task(s) ['nope']" in r.stderr


# ---- retype ------------------------------------------------------------------------------------
def _rotation_tags(root: Path) -> dict[str, str]:
    mod = json.loads((root / "meta/modality.json").read_text())
    return {
        f"{part}.{k}": e["rotation_type"]
        for part in ("state", "action")
        for k, e in mod[part].items()
        if "rotation_type" in e
    }


def test_retype_tags_the_quaternions_for_gr00t_and_changes_nothing_else(tmp_path):
    """GR00T N1.5's modality schema rejects the spec's ``quat_wxyz`` (its pydantic enum has
    ``quaternion``, w-first): retype changes that tag and nothing else a reader sees.
    """
    src, out = tmp_path / "src", tmp_path / "out"
    record(src, [12, 9, 10])
    assert _rotation_tags(src) == {"state.eef_rot": "quat_wxyz", "action.eef_rot": "quat_wxyz"}
    retype(src, "quaternion", out)
    assert _rotation_tags(out) == {"state.eef_rot": "quaternion", "action.eef_rot": "quaternion"}
    assert _rotation_tags(src) == {"state.eef_rot": "quat_wxyz", "action.eef_rot": "quat_wxyz"}  # untouched
    check_root(out, [(src, i, TASKS[i]) for i in range(3)])  # rows, indices, every row's frame
    for ep in range(3):
        a, b = episode_rows(src, ep), episode_rows(out, ep)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    for name in ("info.json", "stats.json"):
        assert json.loads((src / "meta" / name).read_text()) == json.loads((out / "meta" / name).read_text())
    retagged = json.loads((src / "meta/modality.json").read_text().replace('"quat_wxyz"', '"quaternion"'))
    assert json.loads((out / "meta/modality.json").read_text()) == retagged
    assert jsonl(out / "meta/dataset_edits.jsonl")[-1]["rotation_type"] == {"from": "quat_wxyz", "to": "quaternion"}
    validate(out)
    # in place, through the CLI; a dry run and a no-op change nothing
    r = run_cli("retype", str(src), "--rotation-type", "quaternion", "--dry-run")
    assert r.returncode == 0 and "quat_wxyz -> quaternion" in r.stdout, r.stderr
    assert _rotation_tags(src)["state.eef_rot"] == "quat_wxyz"
    r = run_cli("retype", str(src), "--rotation-type", "quaternion")
    assert r.returncode == 0, r.stderr
    assert _rotation_tags(src) == {"state.eef_rot": "quaternion", "action.eef_rot": "quaternion"}
    validate(src)
    r = run_cli("retype", str(src), "--rotation-type", "quaternion")
    assert r.returncode == 2 and "already tagged" in r.stderr
    with pytest.raises(EditError, match="rotation type must be one of"):
        retype(src, "rotation_6d", tmp_path / "x")


# ---- crash safety -----------------------------------------------------------------------------
@pytest.mark.parametrize("in_place", [False, True])
def test_sigkill_mid_edit_leaves_input_untouched_and_no_valid_output(tmp_path, in_place):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    record(a, [40] * 8)
    record(b, [40] * 8, seed0=8)
    before = {r: tree_hashes(r) for r in (a, b)}
    cmd = ["delete", str(a), "--episodes", "0"] if in_place else ["merge", str(a), str(b), "--out", str(out)]
    staging = tmp_path / (".a.dsedit-staging" if in_place else ".out.dsedit-staging")
    p = subprocess.Popen([str(BIN / "piper-dataset"), *cmd, "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((staging / "videos").rglob("episode_000002.mp4")) and time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    assert staging.exists()  # killed mid-build
    assert {r: tree_hashes(r) for r in (a, b)} == before
    assert not out.exists()
    assert not any(
        x.name == "out" or not x.name.startswith(".") for x in tmp_path.iterdir() if x.name not in ("a", "b")
    )
    assert len(jsonl(staging / "meta/episodes.jsonl")) >= 2  # the writer had committed episodes in it...
    r = subprocess.run([str(BIN / "piper-validate"), str(staging)], capture_output=True, text=True)
    assert r.returncode == 1 and "data/INCOMPLETE.parquet" in r.stdout  # ...yet it is not a valid root
    with pytest.raises(pa.ArrowInvalid):  # nor readable the way LeRobot reads data/ (every *.parquet under it)
        pq.ParquetDataset(staging / "data").read()
    # the re-run removes the leftover and completes
    r = run_cli(*cmd)
    assert r.returncode == 0, r.stderr
    assert not staging.exists()
    validate(a if in_place else out)

"""validate_root: a valid spec-built root passes; each single corruption is reported at the right file."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from piper_recorder.lerobot.maintenance.action_stats import FinalizeConfig, finalize_root
from piper_recorder.lerobot.validate import TimingSummary, validate_root

from support.lerobot_fixtures import FINE, MS, grid_pts, small_root, write_video

LENGTHS = (12, 9, 7)  # episodes 0, 1, 2 -> global index 0..11, 12..20, 21..27
P1 = "data/chunk-000/episode_000001.parquet"
V1 = "videos/chunk-000/observation.images.cam_front/episode_000001.mp4"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return small_root(tmp_path_factory.mktemp("pristine") / "root", lengths=LENGTHS)


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(pristine, dst)
    return dst


# ---- small editing helpers --------------------------------------------------------------------------
def edit_json(path: Path, fn) -> None:
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj))


def edit_jsonl(path: Path, fn) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    fn(lines)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def edit_table(root: Path, fn, rel: str = P1) -> None:
    path = root / rel
    pq.write_table(fn(pq.read_table(path)), path)


def set_column(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, array)


def scalar_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


# ---- mutations: (id, function(root), file prefix, message fragment) ---------------------------------
def drop_last_row(t):
    return t.slice(0, t.num_rows - 1)


def index_gap(t):
    return set_column(t, "index", pa.array(scalar_column(t, "index") + 1))


def frame_index_wrong(t):
    fi = scalar_column(t, "frame_index").copy()
    fi[3] = 7
    return set_column(t, "frame_index", pa.array(fi))


def episode_index_wrong(t):
    return set_column(t, "episode_index", pa.array(np.zeros(t.num_rows, dtype=np.int64)))


def task_index_out_of_range(t):
    return set_column(t, "task_index", pa.array(np.full(t.num_rows, 5, dtype=np.int64)))


def task_index_inconsistent(t):  # episode 1 is "place the cube" (task 1); say task 0
    return set_column(t, "task_index", pa.array(np.zeros(t.num_rows, dtype=np.int64)))


def timestamp_float64(t):
    return set_column(t, "timestamp", pa.array(scalar_column(t, "timestamp").astype(np.float64)))


def joint_variable_list(t):
    values = [list(map(float, v)) for v in t.column("observation.arm_joint").to_pylist()]
    return set_column(t, "observation.arm_joint", pa.array(values, type=pa.list_(pa.float32())))


def joint_wrong_width(t):
    values = np.asarray(t.column("observation.arm_joint").to_pylist(), dtype=np.float32)[:, :5]
    return set_column(t, "observation.arm_joint", pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 5))


def gripper_as_list(t):
    values = scalar_column(t, "observation.gripper").astype(np.float32)
    return set_column(t, "observation.gripper", pa.FixedSizeListArray.from_arrays(pa.array(values), 1))


def timestamp_step(t):
    return set_column(t, "timestamp", pa.array((np.arange(t.num_rows) * 0.034).astype(np.float32)))


def timestamp_repeat(t):
    ts = scalar_column(t, "timestamp").copy()
    ts[4] = ts[3]
    return set_column(t, "timestamp", pa.array(ts))


def non_finite(t):
    values = np.asarray(t.column("action.arm_eef").to_pylist(), dtype=np.float32)
    values[2, 0] = np.nan
    return set_column(t, "action.arm_eef", pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 7))


def extra_column(t):
    return t.append_column("observation.extra", pa.array(np.zeros(t.num_rows, dtype=np.float32)))


def missing_column(t):
    return t.drop_columns(["action.gripper"])


def meta(root):
    return root / "meta"


MUTATIONS = [
    ("missing parquet", lambda r: (r / P1).unlink(), P1, "missing"),
    ("row count", lambda r: edit_table(r, drop_last_row), P1, "8 rows, meta/episodes.jsonl says length 9"),
    ("index gap", lambda r: edit_table(r, index_gap), P1, "'index' not continuous: row 0 has 13, expected 12"),
    ("frame_index", lambda r: edit_table(r, frame_index_wrong), P1, "'frame_index' must be 0..8"),
    ("episode_index", lambda r: edit_table(r, episode_index_wrong), P1, "'episode_index' row 0 is 0, expected 1"),
    ("task_index range", lambda r: edit_table(r, task_index_out_of_range), P1, "not in meta/tasks.jsonl"),
    (
        "task_index vs episodes",
        lambda r: edit_table(r, task_index_inconsistent),
        P1,
        "meta/episodes.jsonl task is index 1",
    ),
    ("float64 timestamp", lambda r: edit_table(r, timestamp_float64), P1, "'timestamp' has type double"),
    ("variable list", lambda r: edit_table(r, joint_variable_list), P1, "'observation.arm_joint' has type list"),
    ("wrong width", lambda r: edit_table(r, joint_wrong_width), P1, "'observation.arm_joint' has type"),
    ("shape-1 as list", lambda r: edit_table(r, gripper_as_list), P1, "'observation.gripper' has type"),
    ("timestamp step", lambda r: edit_table(r, timestamp_step), P1, "timestamp step 0.034000 s at row 1"),
    ("timestamp repeat", lambda r: edit_table(r, timestamp_repeat), P1, "not strictly increasing at row 4"),
    ("non-finite", lambda r: edit_table(r, non_finite), P1, "'action.arm_eef' has non-finite values"),
    ("undeclared column", lambda r: edit_table(r, extra_column), P1, "'observation.extra' is not declared"),
    ("missing column", lambda r: edit_table(r, missing_column), P1, "column 'action.gripper' missing"),
    ("missing video", lambda r: (r / V1).unlink(), V1, "missing"),
    (
        "frame count (jsonl)",
        lambda r: edit_jsonl(meta(r) / "episodes.jsonl", lambda ls: ls[1]["video_frame_lengths"].update(cam_front=10)),
        V1,
        "9 frames, meta/episodes.jsonl episode 1 says 10",
    ),
    ("frame count (video)", lambda r: write_video(r / V1, 8), V1, "8 frames, meta/episodes.jsonl episode 1 says 9"),
    (
        "video_frame_length",
        lambda r: edit_jsonl(meta(r) / "episodes.jsonl", lambda ls: ls[0].update(video_frame_length=11)),
        "meta/episodes.jsonl",
        "video_frame_length 11, minimum over cameras is 12",
    ),
    ("pts past the end", lambda r: write_video(r / V1, 9, fps=15), V1, "past the episode end"),
    (
        "whole-ms pts",
        lambda r: write_video(r / V1, 9, time_base=MS),
        V1,
        "6 of 9 rows have no frame at or before their timestamp within 0.0001 s",
    ),
    (
        "pts one tick late",
        lambda r: write_video(r / V1, 9, pts=[grid_pts(k / 30, FINE) + (k > 0) for k in range(9)]),
        V1,
        "8 of 9 rows have no frame at or before their timestamp",
    ),
    (
        "capture mode whole-ms",
        lambda r: (set_mode(r, 1, "capture"), write_video(r / V1, 9, time_base=MS)),
        V1,
        "capture mode: frames cannot be placed within 0.0001 s of their capture time; time base 1/1000",
    ),
    (
        "stats missing column",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s.pop("action.gripper")),
        "meta/stats.json",
        "no entry for column 'action.gripper'",
    ),
    (
        "stats missing timestamp",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s.pop("timestamp")),
        "meta/stats.json",
        "no entry for column 'timestamp'",
    ),
    (
        "stats wrong width",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s["observation.arm_joint"]["q99"].pop()),
        "meta/stats.json",
        "'observation.arm_joint'.q99 must be a flat list of 6 numbers",
    ),
    (
        "stats extra key",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s["action"].update(count=[28] * 8)),
        "meta/stats.json",
        "extra ['count']",
    ),
    (
        "stats unknown entry",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s.update(foo=s["timestamp"])),
        "meta/stats.json",
        "entry 'foo' is not a feature",
    ),
    (
        "stats stale",
        lambda r: edit_json(meta(r) / "stats.json", lambda s: s["observation.gripper"].update(max=[1.0])),
        "meta/stats.json",
        "entry 'observation.gripper' max do not match the parquet data",
    ),
    (
        "modality too wide",
        lambda r: edit_json(meta(r) / "modality.json", lambda m: m["state"]["eef_rot"].update(end=8)),
        "meta/modality.json",
        "state.eef_rot: slice [3:8] does not fit 'observation.arm_eef' of width 7",
    ),
    (
        "modality unknown key",
        lambda r: edit_json(
            meta(r) / "modality.json", lambda m: m["action"]["gripper"].update(original_key="action.grip")
        ),
        "meta/modality.json",
        "original_key 'action.grip' is not a feature",
    ),
    (
        "total_frames",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(total_frames=29)),
        "meta/info.json",
        "total_frames is 29, expected 28",
    ),
    (
        "total_episodes",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(total_episodes=4)),
        "meta/info.json",
        "total_episodes is 4, expected 3",
    ),
    (
        "total_videos",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(total_videos=3)),
        "meta/info.json",
        "total_videos is 3, expected 6",
    ),
    (
        "total_tasks",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(total_tasks=1)),
        "meta/info.json",
        "total_tasks is 1, expected 2",
    ),
    (
        "total_chunks",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(total_chunks=2)),
        "meta/info.json",
        "total_chunks is 2, expected 1",
    ),
    (
        "splits",
        lambda r: edit_json(meta(r) / "info.json", lambda i: i.update(splits={"train": "0:2"})),
        "meta/info.json",
        "splits must be",
    ),
    (
        "blank line episodes",
        lambda r: (meta(r) / "episodes.jsonl").write_text(
            (meta(r) / "episodes.jsonl").read_text().replace("\n", "\n\n", 1)
        ),
        "meta/episodes.jsonl",
        "line 2: blank",
    ),
    (
        "blank line tasks",
        lambda r: (meta(r) / "tasks.jsonl").write_text((meta(r) / "tasks.jsonl").read_text() + "\n"),
        "meta/tasks.jsonl",
        "line 3: blank line",
    ),
    (
        "episode task unknown",
        lambda r: edit_jsonl(meta(r) / "episodes.jsonl", lambda ls: ls[2].update(tasks=["fly"])),
        "meta/episodes.jsonl",
        "task 'fly' is not in meta/tasks.jsonl",
    ),
    (
        "video_info convention",
        lambda r: edit_json(
            meta(r) / "info.json",
            lambda i: i["features"]["observation.images.cam_front"].update(video_info={"video.fps": 30}),
        ),
        "meta/info.json",
        "'video_info'",
    ),
    (
        "channel name",
        lambda r: edit_json(
            meta(r) / "info.json",
            lambda i: i["features"]["observation.images.cam_wrist"].update(names=["height", "width", "channel"]),
        ),
        "meta/info.json",
        "names must be ['height', 'width', 'channels']",
    ),
    (
        "video info block",
        lambda r: edit_json(
            meta(r) / "info.json", lambda i: i["features"]["observation.images.cam_wrist"]["info"].pop("video.pix_fmt")
        ),
        "meta/info.json",
        "info lacks 'video.pix_fmt'",
    ),
    (
        "stray parquet",
        lambda r: shutil.copy(r / P1, r / "data/chunk-000/episode_000003.parquet"),
        "data/chunk-000/episode_000003.parquet",
        "not named by meta/episodes.jsonl",
    ),
]


def set_mode(root: Path, episode: int, mode: str) -> None:
    edit_jsonl(meta(root) / "episodes.jsonl", lambda ls: ls[episode].update(timestamp_mode=mode))


def test_valid_root_has_no_problems(pristine):
    assert validate_root(pristine) == []
    assert validate_root(pristine, full=True) == []


def test_timing_summary_names_the_worst_row(pristine):
    timing = TimingSummary()
    assert validate_root(pristine, timing=timing) == []
    assert timing.rows == 2 * sum(LENGTHS) and timing.bad_rows == 0 and timing.capture_videos == 0
    w = timing.worst
    # independently: the largest float32(k/30) - floor(float32(k/30) * 90000) / 90000 over the rows
    gaps = [(float(np.float32(k / 30)) - grid_pts(k / 30, FINE) / 90000, k) for k in range(max(LENGTHS))]
    assert w.time_base == FINE and 0 < w.gap_s < 1 / 90000 and (w.gap_s, w.row) == pytest.approx(max(gaps))
    assert w.pts == grid_pts(w.row / 30, FINE) and w.timestamp == float(np.float32(w.row / 30))


def test_nearest_rounded_timestamps_fail_lerobots_lookup_rounded_up_ones_pass(tmp_path):
    """Timestamps k/30 rounded to the NEAREST float32 (below the grid for rows 17, 19, ...) with PTS
    floored from them onto 1/90000: every row's last frame at or before t is its own, but LeRobot asks
    for frame round(t * 30) and gets the first frame at or after k/30 exactly: frame k + 1 there.
    The same rows rounded up (what the recorder writes now) pass both rules.
    """
    old = small_root(tmp_path / "old", lengths=(41,), cameras=("cam_front",), round_up=False)
    ts = pq.read_table(old / "data/chunk-000/episode_000000.parquet").column("timestamp").to_numpy()
    below = [k for k, t in enumerate(ts) if Fraction(float(t)) < Fraction(k, 30)]
    assert below[:2] == [17, 19]
    timing = TimingSummary()
    problems = validate_root(old, timing=timing)
    assert len(problems) == 1, problems
    msg = problems[0]
    assert msg.startswith("videos/chunk-000/observation.images.cam_front/episode_000000.mp4")
    assert f"{len(below)} of 41 rows get another frame from LeRobot's lookup" in msg
    assert f"{len(below)} row timestamps lie below the k/fps grid" in msg and "piper-repair" in msg
    w = timing.lerobot_worst
    assert timing.bad_rows == 0 and timing.lerobot_bad_rows == len(below) and w.row in below
    assert f"LeRobot gets frame {w.row + 1}" in msg and f"the last frame at or before t is frame {w.row}" in msg
    assert w.pts == grid_pts(float(ts[w.row + 1]), FINE) and w.gap_s == pytest.approx(1 / 30, abs=1e-6)

    new = small_root(tmp_path / "new", lengths=(40,), cameras=("cam_front",))
    timing = TimingSummary()
    assert validate_root(new, timing=timing) == [] and validate_root(new, full=True) == []
    assert timing.lerobot_bad_rows == 0 and timing.lerobot_worst is None and timing.rows == 40


def test_capture_mode_frames_off_the_rows_pass_nominal_ones_do_not(root):
    """Capture mode keeps frames at capture times (here 1 to 20 ms after each row but row 0): the row
    rules do not apply, only 'row 0 has a frame' and a fine time base; the same file in a nominal
    episode fails.
    """
    rng = np.random.default_rng(3)
    pts = [0] + [grid_pts(k / 30, FINE) + int(rng.integers(90, 1800)) for k in range(1, 9)]
    write_video(root / V1, 9, pts=pts)
    problems = validate_root(root)
    assert any(p.startswith(V1) and "8 of 9 rows have no frame" in p for p in problems), problems
    set_mode(root, 1, "capture")
    timing = TimingSummary()
    assert validate_root(root, timing=timing) == []
    assert timing.capture_videos == 2 and timing.rows == 2 * sum(LENGTHS) - 2 * 9  # both cameras of episode 1
    write_video(root / V1, 9, pts=[p + 90 for p in pts])
    assert any(
        p.startswith(V1) and "row 0 (timestamp 0.000000 s) has no frame at or before it" in p
        for p in validate_root(root)
    )


@pytest.mark.parametrize("mutate,where,fragment", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_each_corruption_is_reported(root, mutate, where, fragment):
    mutate(root)
    problems = validate_root(root)
    hits = [p for p in problems if p.startswith(where + ":") and fragment in p]
    assert hits, f"expected '{where}: ...{fragment}...' among {problems}"


def test_empty_root_is_valid_until_an_episode_is_listed(tmp_path):
    from support.lerobot_fixtures import write_root

    root = write_root(tmp_path / "r", [], cameras=("cam_front",))
    assert json.loads((root / "meta/stats.json").read_text()) == {}
    assert validate_root(root) == []
    (meta(root) / "episodes.jsonl").write_text(json.dumps({"episode_index": 0, "tasks": ["t"], "length": 3}) + "\n")
    problems = validate_root(root)
    assert any(p.startswith(P1.replace("000001", "000000")) and "missing" in p for p in problems)
    assert any("no entry for column 'timestamp'" in p for p in problems)


def test_full_decode_counts_frames_too(root):
    write_video(root / V1, 8)
    assert any(p.startswith(V1) and "8 frames" in p for p in validate_root(root, full=True))


def test_problem_in_one_episode_does_not_hide_the_others(root):
    (root / P1).unlink()
    edit_table(root, index_gap, rel="data/chunk-000/episode_000002.parquet")
    problems = validate_root(root)
    assert any(p.startswith(P1) for p in problems)
    assert any(p.startswith("data/chunk-000/episode_000002.parquet") and "'index'" in p for p in problems)


def test_finalize_output_checked_when_present(root):
    finalize_root(root, FinalizeConfig(horizon=4, log=lambda m: None))
    assert validate_root(root) == []
    edit_json(meta(root) / "delta_stats.json", lambda s: s["action.arm_eef"]["mean"].pop())
    assert any(p.startswith("meta/delta_stats.json") and "'action.arm_eef'.mean" in p for p in validate_root(root))


def test_chunked_root(tmp_path):
    """Episodes spread over chunks use the chunk number of the templates; totals count the chunks."""
    from support.lerobot_fixtures import random_episode, write_root

    rng = np.random.default_rng(3)
    root = write_root(
        tmp_path / "r", [("t", random_episode(rng, 5)) for _ in range(3)], cameras=("cam_front",), chunks_size=2
    )
    assert (root / "data/chunk-001/episode_000002.parquet").exists()
    assert validate_root(root) == []
    edit_json(meta(root) / "info.json", lambda i: i.update(total_chunks=1))
    assert any("total_chunks is 1, expected 2" in p for p in validate_root(root))


def test_writer_output_validates_and_finalizes(tmp_path):
    """The project's own writer, across a resume, a discard and a delete, against this independent validator."""
    from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig

    from support.lerobot_fixtures import random_episode

    root = tmp_path / "w"
    cfg = WriterConfig(
        fps=30, cameras={"cam_front": CameraSpec(height=48, width=64), "cam_wrist": CameraSpec(height=48, width=64)}
    )
    rng = np.random.default_rng(5)

    def record(w, task, n, save=True):
        w.start_episode(task)
        cols = random_episode(rng, n)
        for i in range(n):
            t = i / 30
            w.add_row(t, {k: v[i].astype(np.float32) for k, v in cols.items()})
            for cam in ("cam_front", "cam_wrist"):
                w.add_frame(cam, np.full((48, 64, 3), (i * 9) % 256, np.uint8), t)
        return w.save_episode() if save else w.discard_episode()

    w = LeRobotWriter(root, cfg)
    w.begin_session({})
    record(w, "pick", 14)
    record(w, "place", 10)
    record(w, "pick", 6, save=False)
    w.close()
    w = LeRobotWriter(root, cfg)  # resume
    w.begin_session({})
    record(w, "stack", 8)
    record(w, "pick", 5)
    w.delete_last_episode()
    w.close()

    assert validate_root(root, full=True) == []
    info = json.loads((root / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 32, 3)
    finalize_root(root, FinalizeConfig(horizon=6, log=lambda m: None))
    assert validate_root(root) == []
    rel = json.loads((root / "meta/relative_stats.json").read_text())
    assert rel["action"]["mean"] == rel["action.arm_eef"]["mean"] + rel["action.gripper"]["mean"]

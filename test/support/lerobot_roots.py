"""LeRobot roots recorded by the real writer whose camera frames spell their row index, and the independent
checks of a root built from them (pyarrow for the rows, PyAV for the frames, json for the meta, piper-validate
and lerobot-doctor as processes): what the dataset edits must keep.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq

from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig
from piper_recorder.lerobot.writer.video_encoder import VideoConfig

from support.lerobot_data import H, W, frame_index_of, index_frame, row_values
from support.paths import ROOT

BIN = ROOT / ".venv" / "bin"
FPS = 30
CAMS = ("cam_front", "cam_wrist")
TASKS = ("pick", "place", "stack")


def record(
    root: Path, lengths: list[int], seed0: int = 0, cams=CAMS, version: str = "v2.0", extra=None, **cfg_kw
) -> None:
    """Episodes recorded by the real writer on the row grid; camera frame k spells k in its pixels.
    Episode j has seed ``seed0 + j`` and task ``TASKS[(seed0 + j) % 3]``; ``extra(t, seed)`` gives the
    values of extra features.
    """
    cfg = WriterConfig(
        fps=FPS,
        cameras={c: CameraSpec(H, W) for c in cams},
        lerobot_version=version,
        video=VideoConfig(max_block_s=None),
        **cfg_kw,
    )
    with LeRobotWriter(root, cfg) as w:
        w.begin_session({"control": {"backend": "position"}, "recording": {"fps": FPS}, "root_tag": root.name})
        for j, n in enumerate(lengths):
            w.start_episode(TASKS[(seed0 + j) % 3])
            for k in range(n):
                t = float(grid_timestamp(k, FPS))
                w.add_row(t, row_values(t, seed0 + j) | (extra(t, seed0 + j) if extra else {}))
                for cam in cams:
                    assert w.add_frame(cam, index_frame(k), t)
            w.save_episode({"late_rows": seed0 + j})


# ---- independent reading ----------------------------------------------------------------------
def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().split("\n") if x.strip()]


def episode_rows(root: Path, ep: int) -> dict[str, np.ndarray]:
    t = pq.read_table(root / f"data/chunk-{ep // 1000:03d}/episode_{ep:06d}.parquet")
    out = {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        out[name] = col.flatten().to_numpy().reshape(len(col), -1) if col.type.num_fields == 1 else col.to_numpy()
    return out


def video_pairs(root: Path, ep: int, cam: str) -> tuple[list[int], list[float]]:
    """Decoded frames' spelled indices and PTS in seconds, with PyAV."""
    path = root / f"videos/chunk-{ep // 1000:03d}/observation.images.{cam}/episode_{ep:06d}.mp4"
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        frames = [(frame_index_of(f.to_ndarray(format="rgb24")), float(f.pts * s.time_base)) for f in c.decode(s)]
    return [f[0] for f in frames], [f[1] for f in frames]


def check_root(root: Path, expect: list[tuple[Path, int, str]]) -> None:
    """``root`` holds exactly the episodes ``expect`` lists (source root, source episode, task), in that
    order: rows equal the source rows, indices renumbered and continuous, task indices pointing at the
    task strings, and every row's video frame (PyAV) the frame of its row, at the row's time.
    """
    info = json.loads((root / "meta/info.json").read_text())
    eps = jsonl(root / "meta/episodes.jsonl")
    tasks = {t["task_index"]: t["task"] for t in jsonl(root / "meta/tasks.jsonl")}
    assert [e["episode_index"] for e in eps] == list(range(len(expect)))
    assert info["total_episodes"] == len(expect) and info["total_tasks"] == len(tasks)
    assert sorted(tasks) == list(range(len(tasks)))
    index = 0
    for i, (src, j, task) in enumerate(expect):
        rows, want = episode_rows(root, i), episode_rows(src, j)
        n = len(want["timestamp"])
        assert eps[i]["length"] == n and eps[i]["tasks"] == [task]
        assert tasks[eps[i]["task_index"]] == task
        for key in want:
            if key not in ("episode_index", "index", "task_index"):
                np.testing.assert_array_equal(rows[key], want[key], err_msg=f"episode {i} {key}")
        np.testing.assert_array_equal(rows["episode_index"], np.full(n, i))
        np.testing.assert_array_equal(rows["index"], np.arange(index, index + n))
        np.testing.assert_array_equal(rows["task_index"], np.full(n, eps[i]["task_index"]))
        index += n
        src_eps = jsonl(src / "meta/episodes.jsonl")
        assert eps[i]["late_rows"] == src_eps[j]["late_rows"]  # the recorder's counters travel along
        for cam in CAMS:
            spelled, pts = video_pairs(root, i, cam)
            assert spelled == list(range(n)), f"episode {i} {cam}: frames {spelled[:5]}..."
            assert eps[i]["video_frame_lengths"][cam] == n
            assert np.all(np.abs(np.asarray(pts) - rows["timestamp"]) < 1e-4)
    assert info["total_frames"] == index


def validate(root: Path) -> None:
    r = subprocess.run([str(BIN / "piper-validate"), str(root)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def doctor(root: Path) -> None:
    r = subprocess.run(
        [str(BIN / "lerobot-doctor"), "check", str(root), "--ci", "--fail-on", "warn"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]

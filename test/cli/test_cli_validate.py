"""piper-validate as a real process: exit codes, output lines, dispatch by path type."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.lerobot_fixtures import small_root

pytestmark = pytest.mark.integration

EXE = str(Path(sys.executable).parent / "piper-validate")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60)


def test_valid_root_exits_0_with_one_ok_line(tmp_path):
    root = small_root(tmp_path / "r", lengths=(6, 5))
    for extra in ([], ["--full"]):
        res = run(str(root), *extra)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.strip().splitlines()
        assert len(lines) == 3 and lines[2].startswith("OK: ") and "2 episodes, 11 frames" in lines[2]
        assert (
            lines[0].startswith("video timing: 22 of 22 video rows find their frame") and "worst: episode" in lines[0]
        )
        assert "x 1/90000" in lines[0] and " gap " in lines[0]
        assert lines[1] == "frame pairing: no per-row frame offsets recorded"


def set_counters(root: Path, per_episode: list[dict]) -> None:
    """Merge recorder counters into meta/episodes.jsonl, one dict per episode."""
    p = root / "meta/episodes.jsonl"
    eps = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps({**e, **c}) + "\n" for e, c in zip(eps, per_episode)))


def test_pairing_line_reports_the_worst_offset_both_ways_and_a_future_frame_fails(tmp_path):
    """The rows' frames must be captured at or before the row (1 ms of clock noise)."""
    root = small_root(tmp_path / "r", lengths=(6, 5))
    set_counters(
        root,
        [
            {"frame_ahead_max_ms": {"cam_front": 0.4}, "frame_behind_max_ms": {"cam_front": 31.2}},
            {"frame_ahead_max_ms": {"cam_front": 0.0}, "frame_behind_max_ms": {"cam_front": 40.5}},
        ],
    )
    res = run(str(root))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        "frame pairing: worst frame captured after its row: 0.400 ms (episode 0, cam_front); "
        "worst before its row: 40.500 ms (episode 1, cam_front)"
    ) in res.stdout.splitlines()
    set_counters(root, [{"frame_ahead_max_ms": {"cam_front": 16.3}}, {}])  # the old nearest-capture rule
    res = run(str(root))
    assert res.returncode == 1
    assert (
        "meta/episodes.jsonl: episode 0: cam_front: a row's frame was captured 16.300 ms after the row "
        "(more than 1 ms: a frame from the future)"
    ) in res.stdout.splitlines()
    old = small_root(tmp_path / "old", lengths=(6,))  # recorded before the direction was kept
    set_counters(old, [{"frame_offset_max_ms": {"cam_front": 12.5}}])
    res = run(str(old))
    assert (
        res.returncode == 0
        and ("frame pairing: older episodes record no direction: largest offset 12.500 ms (episode 0, cam_front)")
        in res.stdout
    )


def test_whole_ms_root_fails_naming_the_worst_row_and_the_fix(tmp_path):
    """A root as older recorders wrote it (time base 1/1000): at 30 fps two rows in three
    sit up to 1 ms after their frame, beyond LeRobot's 1e-4 s.
    """
    from support.lerobot_fixtures import MS

    root = small_root(tmp_path / "r", lengths=(6, 5), time_base=MS)
    res = run(str(root))
    assert res.returncode == 1
    out = res.stdout
    vid = "videos/chunk-000/observation.images.cam_front/episode_000000.mp4: "
    line = next(x for x in out.splitlines() if x.startswith(vid))
    assert "4 of 6 rows have no frame at or before their timestamp within 0.0001 s" in line
    assert "worst row 5: timestamp 0.166667 s, frame pts 166 x 1/1000 = 0.166000 s, gap 666.672 us" in line
    assert f"piper-repair {root}" in line
    timing = next(x for x in out.splitlines() if x.startswith("video timing: "))
    assert "video rows find their frame" in timing and "worst: episode 0, cam_front, row 5" in timing


def test_broken_root_prints_each_problem_and_exits_1(tmp_path):
    root = small_root(tmp_path / "r", lengths=(6, 5))
    (root / "data/chunk-000/episode_000001.parquet").unlink()
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] = 99
    (root / "meta/info.json").write_text(json.dumps(info))
    res = run(str(root))
    assert res.returncode == 1
    lines = res.stdout.strip().splitlines()
    assert any(line.startswith("data/chunk-000/episode_000001.parquet: missing") for line in lines)
    assert any(line.startswith("meta/info.json: total_frames is 99") for line in lines)
    assert "OK" not in res.stdout
    assert "problem(s)" in res.stderr


def test_missing_path_and_unknown_file_exit_2(tmp_path):
    """A path of the wrong kind is a bad argument (2, one line), not a dataset with problems (1)."""
    res = run(str(tmp_path / "nope"))
    assert res.returncode == 2 and res.stderr.strip().endswith("does not exist") and "Traceback" not in res.stderr
    other = tmp_path / "x.txt"
    other.write_text("hi")
    res = run(str(other))
    assert res.returncode == 2 and "expected a LeRobot root directory or a .hdf5/.h5 file" in res.stderr


def test_hdf5_goes_to_rgbd_validator(tmp_path):
    from rgbd_writer import RgbdConfig, RgbdWriter

    from support import rgbd_crash_worker as cw

    good = tmp_path / "ok.hdf5"
    w = RgbdWriter(good, RgbdConfig(width=cw.W, height=cw.H, rgb_source="/c", depth_source="/d", durable=False))
    cw.write_episode(w, 0)
    w.close()
    for extra in ([], ["--full"]):
        res = run(str(good), *extra)
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.strip() == f"OK: {good}: RGB-D HDF5"
    bogus = tmp_path / "bogus.h5"
    bogus.write_bytes(b"not an hdf5 file")
    res = run(str(bogus))
    assert res.returncode == 1
    assert res.stdout.startswith(f"{bogus}: ")

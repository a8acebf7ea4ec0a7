"""piper-validate as a real process: exit codes, output lines, dispatch by path type."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lerobot_fixtures import small_root

EXE = str(Path(sys.executable).parent / "piper-validate")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60)


def test_valid_root_exits_0_with_one_ok_line(tmp_path):
    root = small_root(tmp_path / "r", lengths=(6, 5))
    for extra in ([], ["--full"]):
        res = run(str(root), *extra)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("OK: ") and "2 episodes, 11 frames" in lines[0]


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


def test_missing_path_and_unknown_file_exit_1(tmp_path):
    assert run(str(tmp_path / "nope")).returncode == 1
    other = tmp_path / "x.txt"
    other.write_text("hi")
    res = run(str(other))
    assert res.returncode == 1 and "expected a LeRobot root directory or a .hdf5/.h5 file" in res.stderr


def test_hdf5_goes_to_rgbd_validator(tmp_path):
    import rgbd_crash_worker as cw
    from rgbd_writer.writer import RgbdConfig, RgbdWriter
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

"""A full disk (ENOSPC) at any step of save / delete fails with a clear error and leaves the dataset
byte-for-byte as it was; the episode stays pending and a retry succeeds.
"""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.lerobot.format import fsutil
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig, dataset_writer

from support.lerobot_data import H, W, index_frame, read_table, row_values, tree_hashes

FPS = 30
PATCHED = [
    (fsutil, "write_tmp"),
    (fsutil, "replace"),
    (fsutil, "fsync_dir"),
    (fsutil, "fsync_file"),
    (dataset_writer, "write_parquet"),
]


class FailAt:
    """Make the k-th call (counting all patched I/O functions) raise ENOSPC."""

    def __init__(self, monkeypatch, k: int):
        self.k, self.calls, self.fired = k, 0, False
        for mod, name in PATCHED:
            monkeypatch.setattr(mod, name, self.wrap(getattr(mod, name)))

    def wrap(self, fn):
        def inner(*a, **kw):
            self.calls += 1
            if self.calls == self.k:
                self.fired = True
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return fn(*a, **kw)

        return inner


def cfg(version: str = "v2.0") -> WriterConfig:
    return WriterConfig(fps=FPS, cameras={"cam_front": CameraSpec(H, W)}, lerobot_version=version)


def feed(w: LeRobotWriter, task: str, n: int, seed: int) -> None:
    w.start_episode(task)
    for k in range(n):
        t = float(grid_timestamp(k, FPS))  # as the assembler feeds rows: k/fps rounded up to float32
        w.add_row(t, row_values(t, seed))
        w.add_frame("cam_front", index_frame(k), t)
        w.add_raw_quest("{}")


@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
@pytest.mark.slow
def test_enospc_at_every_save_step_leaves_dataset_unchanged(tmp_path, version):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg(version)) as w:
        feed(w, "a", 20, 0)
        w.save_episode()
        feed(w, "b", 25, 1)  # new task: tasks.jsonl changes too
        before = tree_hashes(root)
        failures = 0
        for k in range(1, 100):
            with pytest.MonkeyPatch.context() as mp:
                inj = FailAt(mp, k)
                try:
                    rec = w.save_episode({"attempt": k})
                except DatasetError as e:
                    assert "unchanged" in str(e) and "No space left" in str(e)
                    assert inj.fired
                    failures += 1
                    assert tree_hashes(root) == before, f"dataset changed by failure at step {k}"
                    assert w.recording and w.total_episodes == 1
                    continue
            assert not inj.fired
            break
        assert failures >= 8, "every I/O step of the save was exercised"
        assert rec["episode_index"] == 1 and w.total_episodes == 2
    assert validate_root(root, full=True) == []
    if version == "v2.1":
        assert [
            json.loads(x)["episode_index"] for x in (root / "meta/episodes_stats.jsonl").read_text().splitlines()
        ] == [0, 1]
    np.testing.assert_array_equal(read_table(root, 1)["index"], np.arange(20, 45))
    assert json.loads((root / "meta/info.json").read_text())["total_tasks"] == 2


@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_enospc_during_delete_leaves_dataset_unchanged(tmp_path, version):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg(version)) as w:
        feed(w, "a", 20, 0)
        w.save_episode()
        feed(w, "b", 22, 1)
        w.save_episode()
        before = tree_hashes(root)
        for k in range(1, 100):
            with pytest.MonkeyPatch.context() as mp:
                inj = FailAt(mp, k)
                try:
                    w.delete_last_episode()
                except DatasetError as e:
                    assert "unchanged" in str(e)
                    assert tree_hashes(root) == before, f"dataset changed by failure at step {k}"
                    assert w.total_episodes == 2
                    continue
            assert not inj.fired and k > 5
            break
        assert w.total_episodes == 1
    assert validate_root(root, full=True) == []

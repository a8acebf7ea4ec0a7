"""No stray "encoder cam_front failed: FileNotFoundError" when an episode is dropped (#16.13)."""

from __future__ import annotations

import logging

import pytest

from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig

from support.lerobot_data import H, W, index_frame, row_values


def test_discarding_an_episode_logs_no_encoder_error(tmp_path, caplog):
    """No "encoder cam_front failed: FileNotFoundError" for an episode dropped with or without frames."""
    caplog.set_level(logging.WARNING, logger="piper_recorder.lerobot")
    with LeRobotWriter(tmp_path / "ds", WriterConfig(fps=30, cameras={"cam_front": CameraSpec(H, W)})) as w:
        w.start_episode("no frames")
        w.discard_episode()
        w.start_episode("some frames")
        for k in range(5):
            w.add_row(k / 30, row_values(k / 30, 0))
            w.add_frame("cam_front", index_frame(k), k / 30)
        w.discard_episode()
        w.start_episode("rows but no frames")
        w.add_row(0.0, row_values(0.0, 0))
        with pytest.raises(DatasetError, match="no video frames"):
            w.save_episode()
        w.discard_episode()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

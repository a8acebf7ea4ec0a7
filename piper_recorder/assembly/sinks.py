"""Adapters from assembled rows/frames to the two writers (typed by the calls they make: no writer import).

``LeRobotSink`` maps rows to the LeRobot columns of the feature table and frames to ``add_frame``
(capture stamps, or re-stamped to the row time in nominal mode). ``RgbdSink`` turns consecutive rows
into T+1 observations (the table's RGB-D state terms) and T transitions (its action parts, its reward);
it holds one step back so the last transition can carry terminal/timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from piper_recorder.features.table import PIPER_TABLE, FeatureTable

from .assembler import Frame, Row

# The Piper table's LeRobot columns (column -> row value key) and RGB-D state terms.
LEROBOT_COLUMNS = PIPER_TABLE.columns()
RGBD_STATE_TERMS = PIPER_TABLE.rgbd_keys("state")


class LeRobotRows(Protocol):
    """What ``LeRobotSink`` calls on a LeRobot writer (``lerobot.writer.LeRobotWriter``)."""

    def add_row(self, timestamp: float, values: Mapping[str, np.ndarray]) -> None:
        """Add one row of the open episode."""

    def add_frame(self, camera: str, rgb: np.ndarray, t: float) -> bool:
        """Add one camera frame at ``t`` seconds; False when the writer refused it."""

    def add_raw_quest(self, line: str) -> None:
        """Add one raw headset line."""


class RgbdSteps(Protocol):
    """What ``RgbdSink`` calls on an RGB-D writer (``rgbd_writer.writer.RgbdWriter``)."""

    def add_observation(self, rgb: np.ndarray, depth: np.ndarray, state: Mapping[str, np.ndarray]) -> Any:
        """Add the observation of the next step."""

    def add_transition(self, action: np.ndarray, reward: float, terminal: bool = False, timeout: bool = False) -> Any:
        """Add the action and reward that follow the last observation."""


class LeRobotSink:
    """Feeds a LeRobotWriter; counts frames the writer refused (non-increasing PTS) per camera."""

    def __init__(self, writer: LeRobotRows, save_raw_quest: bool = True, table: FeatureTable = PIPER_TABLE):
        self.writer, self.save_raw_quest = writer, save_raw_quest
        self.columns = table.columns()
        self.frames_written: dict[str, int] = {}
        self.frames_rejected: dict[str, int] = {}

    def row(self, row: Row) -> None:
        """Write the row's values to the writer (and its frames, when rows carry them)."""
        t = float(row.timestamp)
        self.writer.add_row(t, {col: row.values[key] for col, key in self.columns.items()})
        for cam, frame in row.frames.items():  # nominal mode: one frame per row, at the row time
            self._frame(cam, frame, t)

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        """Write a frame sent with its own time (capture mode)."""
        self._frame(camera, frame, t)

    def _frame(self, camera: str, frame: Frame, t: float) -> None:
        ok = self.writer.add_frame(camera, frame.rgb, t)
        d = self.frames_written if ok is not False else self.frames_rejected
        d[camera] = d.get(camera, 0) + 1

    def raw_quest(self, line: str) -> None:
        """Keep a raw headset line when ``save_raw_quest`` is on."""
        if self.save_raw_quest:
            self.writer.add_raw_quest(line)

    def counters(self) -> dict[str, Any]:
        """The sink's counters for the episode's record (frames written and refused, per camera)."""
        return {"frames_written": dict(self.frames_written), "frames_rejected_by_encoder": dict(self.frames_rejected)}


class RgbdSink:
    """Feeds an RgbdWriter: obs k = (frame at/before t_k, state at t_k); transition k = (action, reward at t_k)."""

    def __init__(self, writer: RgbdSteps, camera: str, table: FeatureTable = PIPER_TABLE):
        self.writer, self.camera = writer, camera
        self.state_terms = table.rgbd_keys("state")
        self.action_parts = table.rgbd_keys("action")
        rewards = table.rgbd_keys("reward")
        self.reward_key = rewards[0] if rewards else None
        self.observations = 0
        self.transitions = 0
        self._pending: tuple[tuple[np.ndarray, float], Row] | None = None  # (transition k-1, obs k)
        self._last_action: tuple[np.ndarray, float] | None = None

    def row(self, row: Row) -> None:
        """Turn the row into RGB-D steps: the previous row's action and reward, then this observation."""
        reward = float(row.values[self.reward_key][0]) if self.reward_key is not None else 0.0
        action = (np.concatenate([row.values[k] for k in self.action_parts]).astype(np.float32), reward)
        if self._last_action is None:
            self._observe(row)
        else:
            if self._pending is not None:
                self._flush(terminal=False, timeout=False)
            self._pending = (self._last_action, row)
        self._last_action = action

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        """Refuse: RGB-D observations take their frame from the row (assemble with ``depth=True``)."""
        raise RuntimeError("RGB-D observations take their frame from the row; assemble with depth=True")

    def raw_quest(self, line: str) -> None:
        """The RGB-D format has no place for raw headset lines."""

    def end(self, terminal: bool, timeout: bool) -> None:
        """Write the held-back last step with its end flags; call once after ``finish``."""
        if self._pending is not None:
            self._flush(terminal=terminal, timeout=timeout)

    def _flush(self, terminal: bool, timeout: bool) -> None:
        assert self._pending is not None
        (action, reward), row = self._pending
        self._pending = None
        self.writer.add_transition(action, reward, terminal=terminal, timeout=timeout)
        self.transitions += 1
        self._observe(row)

    def _observe(self, row: Row) -> None:
        f = row.frames[self.camera]
        assert f.depth is not None  # the assembly (depth=True) refuses frames without depth
        self.writer.add_observation(f.rgb, f.depth, {k: row.values[k] for k in self.state_terms})
        self.observations += 1

"""Adapters from assembled rows/frames to the two writers (duck-typed: no writer import needed here).

``LeRobotSink`` maps rows to the split LeRobot columns and frames to ``add_frame`` (capture stamps, or
re-stamped to the row time in nominal mode). ``RgbdSink`` turns consecutive rows into T+1 observations
and T transitions; it holds one step back so the last transition can carry terminal/timeout.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .assembler import Frame, Row

LEROBOT_COLUMNS = {
    "observation.arm_joint": "arm_joint",
    "observation.arm_eef": "arm_eef",
    "observation.gripper": "gripper",
    "action.arm_eef": "cmd_eef",
    "action.gripper": "cmd_gripper",
}
RGBD_STATE_TERMS = ("arm_joint", "arm_eef", "gripper")


class LeRobotSink:
    """Feeds a LeRobotWriter; counts frames the writer refused (non-increasing ms PTS) per camera."""

    def __init__(self, writer: Any, save_raw_quest: bool = True):
        self.writer, self.save_raw_quest = writer, save_raw_quest
        self.frames_written: dict[str, int] = {}
        self.frames_rejected: dict[str, int] = {}

    def row(self, row: Row) -> None:
        t = float(row.timestamp)
        self.writer.add_row(t, {col: row.values[key] for col, key in LEROBOT_COLUMNS.items()})
        for cam, frame in row.frames.items():   # nominal mode: one frame per row, at the row time
            self._frame(cam, frame, t)

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        self._frame(camera, frame, t)

    def _frame(self, camera: str, frame: Frame, t: float) -> None:
        ok = self.writer.add_frame(camera, frame.rgb, t)
        d = self.frames_written if ok is not False else self.frames_rejected
        d[camera] = d.get(camera, 0) + 1

    def raw_quest(self, line: str) -> None:
        if self.save_raw_quest:
            self.writer.add_raw_quest(line)

    def counters(self) -> dict[str, Any]:
        return {"frames_written": dict(self.frames_written), "frames_rejected_by_encoder": dict(self.frames_rejected)}


class RgbdSink:
    """Feeds an RgbdWriter: obs k = (frame at/before t_k, state at t_k); transition k = (action, reward at t_k)."""

    def __init__(self, writer: Any, camera: str):
        self.writer, self.camera = writer, camera
        self.observations = 0
        self.transitions = 0
        self._pending: tuple[tuple[np.ndarray, float], Row] | None = None  # (transition k-1, obs k)
        self._last_action: tuple[np.ndarray, float] | None = None

    def row(self, row: Row) -> None:
        action = (np.concatenate([row.values["cmd_eef"], row.values["cmd_gripper"]]).astype(np.float32),
                  float(row.values["reward"][0]))
        if self._last_action is None:
            self._observe(row)
        else:
            if self._pending is not None:
                self._flush(terminal=False, timeout=False)
            self._pending = (self._last_action, row)
        self._last_action = action

    def frame(self, camera: str, frame: Frame, t: float) -> None:
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
        self.writer.add_observation(f.rgb, f.depth, {k: row.values[k] for k in RGBD_STATE_TERMS})
        self.observations += 1

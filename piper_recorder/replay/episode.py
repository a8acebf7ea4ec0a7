"""Load one episode's absolute actions from a LeRobot v2.0 root (ours or any with the same features).

Each arm's targets come from its own action columns, named by the root's own info.json
(``lerobot.format.action_layout.ActionLayout``): one arm's ``action.arm_eef`` and ``action.gripper``, two
arms' ``action.left_arm_eef`` ... , every arm on the episode's one time line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.lerobot.format.layout import INFO, data_file


@dataclass(frozen=True)
class ArmTrack:
    """One arm's recorded targets: ``poses`` (N, 7) xyz + quat wxyz (unit), ``gripper`` (N,) metres."""

    poses: np.ndarray
    gripper: np.ndarray


@dataclass(frozen=True)
class ReplayEpisode:
    """Actions of one episode: each arm's ``ArmTrack`` (key None for one arm) at times ``t`` (N,) seconds from 0."""

    episode_index: int
    t: np.ndarray
    tracks: dict[str | None, ArmTrack]
    fps: float

    @staticmethod
    def one_arm(episode_index: int, t: np.ndarray, poses: np.ndarray, gripper: np.ndarray, fps: float) -> ReplayEpisode:
        """An episode of one arm."""
        return ReplayEpisode(episode_index, t, {None: ArmTrack(poses, gripper)}, fps)

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms' names in the root's order; () for one arm."""
        return tuple(a for a in self.tracks if a is not None)

    def _one(self) -> ArmTrack:
        if None not in self.tracks:
            raise ValueError(f"episode {self.episode_index} has arms {', '.join(self.arms)}: take each arm's track")
        return self.tracks[None]

    @property
    def poses(self) -> np.ndarray:
        """One arm's poses (N, 7); ValueError for several arms."""
        return self._one().poses

    @property
    def gripper(self) -> np.ndarray:
        """One arm's gripper widths (N,); ValueError for several arms."""
        return self._one().gripper

    @property
    def duration(self) -> float:
        """Seconds from the first row to the last."""
        return float(self.t[-1]) if len(self.t) else 0.0


def load_episode(
    root: str | Path, episode_index: int, pose_key: str | None = None, gripper_key: str | None = None
) -> ReplayEpisode:
    """Episode ``episode_index`` of ``root``: times from 0, unit quaternions; ValueError when unusable.

    Every arm of the root's action layout; ``pose_key`` and ``gripper_key`` name one arm's columns instead.
    """
    root = Path(root)
    info = json.loads((root / INFO).read_text())
    if pose_key is None and gripper_key is None:
        layout = ActionLayout.from_features(info["features"])
        columns = {s.arm: (s.pose_column, s.gripper_column) for s in layout.arms}
    else:
        columns = {None: (pose_key or "action.arm_eef", gripper_key or "action.gripper")}
    for key in (k for pair in columns.values() for k in pair):
        if key not in info["features"]:
            raise ValueError(f"{root}: dataset has no feature {key!r} to replay")
    if not 0 <= episode_index < int(info["total_episodes"]):
        raise ValueError(f"{root}: episode {episode_index} out of range (0..{int(info['total_episodes']) - 1})")
    names = ["timestamp", *(k for pair in columns.values() for k in pair)]
    table = pq.read_table(data_file(root, info, episode_index), columns=names)
    t = table.column("timestamp").to_numpy().astype(np.float64)
    if len(t) == 0:
        raise ValueError(f"episode {episode_index}: empty")
    tracks = {}
    for arm, (pose_col, grip_col) in columns.items():
        poses = np.asarray(table.column(pose_col).to_pylist(), dtype=np.float64).reshape(len(t), -1)
        gripper = np.asarray(table.column(grip_col).to_pylist(), dtype=np.float64).reshape(len(t), -1)[:, 0]
        if poses.shape[1] != 7:
            raise ValueError(f"{pose_col} must have 7 elements (xyz + quat wxyz), has {poses.shape[1]}")
        if not (np.all(np.isfinite(poses)) and np.all(np.isfinite(gripper))):
            raise ValueError(f"episode {episode_index}: non-finite actions in {pose_col} or {grip_col}")
        poses[:, 3:] /= np.linalg.norm(poses[:, 3:], axis=1, keepdims=True)
        tracks[arm] = ArmTrack(poses, gripper)
    return ReplayEpisode(episode_index, t - t[0], tracks, float(info["fps"]))

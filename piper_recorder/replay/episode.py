"""Load one episode's absolute actions from a LeRobot v2.0 root (ours or any with the same features)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from piper_recorder.lerobot.format.layout import INFO, data_file


@dataclass(frozen=True)
class ReplayEpisode:
    """Actions of one episode: ``poses`` (N, 7) xyz + quat wxyz, ``gripper`` (N,) metres, ``t`` (N,) seconds."""

    episode_index: int
    t: np.ndarray
    poses: np.ndarray
    gripper: np.ndarray
    fps: float

    @property
    def duration(self) -> float:
        """Seconds from the first row to the last."""
        return float(self.t[-1]) if len(self.t) else 0.0


def load_episode(
    root: str | Path, episode_index: int, pose_key: str = "action.arm_eef", gripper_key: str = "action.gripper"
) -> ReplayEpisode:
    """Episode ``episode_index`` of ``root``: times from 0, unit quaternions; ValueError when unusable."""
    root = Path(root)
    info = json.loads((root / INFO).read_text())
    for key in (pose_key, gripper_key):
        if key not in info["features"]:
            raise ValueError(f"{root}: dataset has no feature {key!r} to replay")
    if not 0 <= episode_index < int(info["total_episodes"]):
        raise ValueError(f"{root}: episode {episode_index} out of range (0..{int(info['total_episodes']) - 1})")
    table = pq.read_table(data_file(root, info, episode_index), columns=["timestamp", pose_key, gripper_key])
    t = table.column("timestamp").to_numpy().astype(np.float64)
    poses = np.asarray(table.column(pose_key).to_pylist(), dtype=np.float64).reshape(len(t), -1)
    gripper = np.asarray(table.column(gripper_key).to_pylist(), dtype=np.float64).reshape(len(t), -1)[:, 0]
    if poses.shape[1] != 7:
        raise ValueError(f"{pose_key} must have 7 elements (xyz + quat wxyz), has {poses.shape[1]}")
    if len(t) == 0 or not (np.all(np.isfinite(poses)) and np.all(np.isfinite(gripper))):
        raise ValueError(f"episode {episode_index}: empty or non-finite actions")
    poses[:, 3:] /= np.linalg.norm(poses[:, 3:], axis=1, keepdims=True)
    return ReplayEpisode(episode_index, t - t[0], poses, gripper, float(info["fps"]))

"""Dry-run backends that need no server.

``hold`` stays where the arm is; ``replay:<root>:<episode>`` plays a recorded episode's absolute actions, by time
since the run started. Both answer rows in the training root's action layout (every arm's pose and gripper).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.replay.episode import load_episode

from .backend import SINGLE_ARM, ActionChunk, BackendError, Observation


class HoldBackend:
    """Answers every observation with each arm's own measured pose and gripper: the arms hold."""

    def __init__(self, layout: ActionLayout = SINGLE_ARM):
        self.layout = layout

    def describe(self) -> dict[str, object]:
        """Provenance: the ``hold`` backend."""
        return {"backend": "hold", "content_hash": None}

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """``horizon`` rows holding each arm's observed pose and gripper."""
        parts = {}
        for arm in self.layout.arms:
            eef_key, grip_key = arm.state_column("arm_eef"), arm.state_column("gripper")
            eef, grip = obs.state.get(eef_key), obs.state.get(grip_key)
            if eef is None or grip is None:
                raise BackendError(f"hold needs {eef_key} and {grip_key}")
            parts[arm.arm] = np.concatenate([eef[:7], grip[:1]])
        row = self.layout.join(parts).astype(np.float32)
        return ActionChunk(np.tile(row, (horizon, 1)), obs.stamp_ns, obs.stamp_ns)

    def close(self) -> None:
        """Nothing to release."""


class ReplayBackend:
    """Row k of each chunk is the episode's action at (obs time - first obs time) + k / fps, every arm's."""

    def __init__(self, root: str | Path, episode: int):
        self.root, self.episode = Path(root), episode
        self.layout = ActionLayout.load(self.root)
        ep = load_episode(self.root, episode)
        self.fps = ep.fps
        rows = np.full((len(ep.t), self.layout.dim), np.nan)
        for arm in self.layout.arms:
            track = ep.tracks[arm.arm]
            rows[:, arm.pose_at : arm.pose_at + 7] = track.poses
            rows[:, arm.gripper_at] = track.gripper
        self.rows = rows.astype(np.float32)
        self._t0: int | None = None
        path = sorted((self.root / "data").rglob(f"episode_{episode:06d}.parquet"))
        self._hash = hashlib.sha256(path[0].read_bytes()).hexdigest() if path else None

    def describe(self) -> dict[str, object]:
        """Provenance: the replayed root and episode."""
        return {"backend": "replay", "checkpoint": f"{self.root}:{self.episode}", "content_hash": self._hash}

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """The episode's actions from the time since the run started, at most ``horizon`` rows."""
        if self._t0 is None:
            self._t0 = obs.stamp_ns
        k0 = int(round((obs.stamp_ns - self._t0) * self.fps / 1e9))
        idx = np.minimum(np.arange(k0, k0 + horizon), len(self.rows) - 1)
        return ActionChunk(self.rows[idx].copy(), obs.stamp_ns, obs.stamp_ns)

    def close(self) -> None:
        """Nothing to release."""

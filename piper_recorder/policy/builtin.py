"""Dry-run backends that need no server.

``hold`` stays where the arm is; ``replay:<root>:<episode>`` plays a recorded episode's absolute actions, by time
since the run started.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from piper_recorder.replay.episode import load_episode

from .backend import ACTION_DIM, ActionChunk, BackendError, Observation


class HoldBackend:
    """Answers every observation with its own measured pose and gripper: the arm holds."""

    def describe(self) -> dict[str, object]:
        """Provenance: the ``hold`` backend."""
        return {"backend": "hold", "content_hash": None}

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """``horizon`` rows holding the observed pose and gripper."""
        eef = obs.state.get("observation.arm_eef")
        grip = obs.state.get("observation.gripper")
        if eef is None or grip is None:
            raise BackendError("hold needs observation.arm_eef and observation.gripper")
        row = np.concatenate([eef[:7], grip[:1]]).astype(np.float32)
        return ActionChunk(np.tile(row, (horizon, 1)), obs.stamp_ns, obs.stamp_ns)

    def close(self) -> None:
        """Nothing to release."""


class ReplayBackend:
    """Row k of each chunk is the episode's action at (obs time - first obs time) + k / fps."""

    def __init__(self, root: str | Path, episode: int):
        self.root, self.episode = Path(root), episode
        ep = load_episode(self.root, episode)
        self.fps = ep.fps
        self.rows = np.concatenate([ep.poses, ep.gripper[:, None]], axis=1).astype(np.float32)
        assert self.rows.shape[1] == ACTION_DIM
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

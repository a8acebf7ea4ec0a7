"""Replay core: episode loading, the slow approach, playback timing and tracking statistics."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from piper_recorder.replay.episode import load_episode
from piper_recorder.replay.motion import Approach, TrackingStats, angle_between, row_at


def _quat_z(theta: float) -> np.ndarray:
    return np.array([np.cos(theta / 2), 0.0, 0.0, np.sin(theta / 2)])


def test_approach_respects_speed_limits_and_ends_at_goal():
    start = np.concatenate([[0.3, 0.0, 0.2], _quat_z(0.0)])
    goal = np.concatenate([[0.4, 0.1, 0.25], _quat_z(1.0)])
    ap = Approach(start, goal, linear_speed=0.05, angular_speed=0.5)
    dt = 0.001
    ts = np.arange(0.0, ap.duration + dt, dt)
    poses = np.array([ap.pose_at(t) for t in ts])
    lin = np.linalg.norm(np.diff(poses[:, :3], axis=0), axis=1) / dt
    ang = np.array([angle_between(poses[i, 3:], poses[i + 1, 3:]) for i in range(len(poses) - 1)]) / dt
    assert lin.max() <= 0.05 * 1.01
    assert ang.max() <= 0.5 * 1.01
    np.testing.assert_allclose(ap.pose_at(0.0), start, atol=1e-12)
    np.testing.assert_allclose(ap.pose_at(ap.duration), goal, atol=1e-9)
    assert np.allclose(np.linalg.norm(poses[:, 3:], axis=1), 1.0)


def test_row_at_follows_recorded_time_and_speed():
    t = np.arange(10) / 10.0
    assert row_at(t, 0.0, 1.0) == 0
    assert row_at(t, 0.25, 1.0) == 2
    assert row_at(t, 0.25, 2.0) == 5
    assert row_at(t, 5.0, 1.0) == 9


def test_tracking_stats_separates_lag_from_path_error():
    t = np.arange(0.0, 4.0, 0.01)
    path = np.stack([0.3 + 0.05 * np.sin(t), 0.05 * np.cos(t), np.full_like(t, 0.2)], axis=1)
    late = np.stack([0.3 + 0.05 * np.sin(t - 0.15), 0.05 * np.cos(t - 0.15), np.full_like(t, 0.2)], axis=1)
    s = TrackingStats()
    for ti, c, m in zip(t, path, late):
        s.add(ti, np.concatenate([c, [1, 0, 0, 0]]), m + [0.001, 0, 0])   # 150 ms late, 1 mm off
    out = s.summary()
    assert out["samples"] == len(t)
    assert out["rms_m"] > 0.005                       # the raw error includes the lag
    assert out["lag_s"] == pytest.approx(0.15, abs=0.006)
    assert out["lag_rms_m"] == pytest.approx(0.001, abs=3e-4)
    assert TrackingStats().summary() == {"samples": 0}


def _root(tmp_path, poses, grip):
    (tmp_path / "meta").mkdir()
    (tmp_path / "data" / "chunk-000").mkdir(parents=True)
    info = {"fps": 10, "total_episodes": 1, "chunks_size": 1000,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "features": {"action.arm_eef": {"dtype": "float32", "shape": [7]},
                         "action.gripper": {"dtype": "float32", "shape": [1]}}}
    (tmp_path / "meta" / "info.json").write_text(json.dumps(info))
    n = len(poses)
    table = pa.table({"timestamp": pa.array(np.arange(n, dtype=np.float32) / 10),
                      "action.arm_eef": pa.array(list(poses.astype(np.float32)), pa.list_(pa.float32(), 7)),
                      "action.gripper": pa.array(list(grip.astype(np.float32)), pa.list_(pa.float32(), 1))})
    pq.write_table(table, tmp_path / "data" / "chunk-000" / "episode_000000.parquet")
    return tmp_path


def test_load_episode_reads_actions(tmp_path):
    poses = np.tile(np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0]), (5, 1))
    poses[:, 0] += np.arange(5) * 0.01
    ep = load_episode(_root(tmp_path, poses, np.full((5, 1), 0.05)), 0)
    assert ep.poses.shape == (5, 7) and ep.fps == 10
    np.testing.assert_allclose(ep.poses[:, 0], poses[:, 0], atol=1e-6)
    np.testing.assert_allclose(ep.t, np.arange(5) / 10, atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        load_episode(tmp_path, 3)


def test_load_episode_refuses_non_finite(tmp_path):
    poses = np.tile(np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0]), (3, 1))
    poses[1, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        load_episode(_root(tmp_path, poses, np.zeros((3, 1))), 0)

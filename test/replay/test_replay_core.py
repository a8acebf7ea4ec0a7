"""Replay core: episode loading, the slow approach, playback timing, tracking statistics and the player
(the state machine: when the arm may move on its feedback).
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from piper_recorder.replay.episode import ArmTrack, ReplayEpisode, load_episode
from piper_recorder.replay.motion import Approach, TrackingStats, angle_between, row_at
from piper_recorder.replay.player import ReplayConfig, ReplayPlayer


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
        s.add(ti, np.concatenate([c, [1, 0, 0, 0]]), m + [0.001, 0, 0])  # 150 ms late, 1 mm off
    out = s.summary()
    assert out["samples"] == len(t)
    assert out["rms_m"] > 0.005  # the raw error includes the lag
    assert out["lag_s"] == pytest.approx(0.15, abs=0.006)
    assert out["lag_rms_m"] == pytest.approx(0.001, abs=3e-4)
    assert TrackingStats().summary() == {"samples": 0}


def _root(tmp_path, poses, grip):
    (tmp_path / "meta").mkdir()
    (tmp_path / "data" / "chunk-000").mkdir(parents=True)
    info = {
        "fps": 10,
        "total_episodes": 1,
        "chunks_size": 1000,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "features": {
            "action.arm_eef": {"dtype": "float32", "shape": [7]},
            "action.gripper": {"dtype": "float32", "shape": [1]},
        },
    }
    (tmp_path / "meta" / "info.json").write_text(json.dumps(info))
    n = len(poses)
    table = pa.table(
        {
            "timestamp": pa.array(np.arange(n, dtype=np.float32) / 10),
            "action.arm_eef": pa.array(list(poses.astype(np.float32)), pa.list_(pa.float32(), 7)),
            "action.gripper": pa.array(list(grip.astype(np.float32)), pa.list_(pa.float32(), 1)),
        }
    )
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


# -- the player: the state machine on a fake clock ---------------------------------------------------
START = np.array([0.30, 0.0, 0.20, 1.0, 0.0, 0.0, 0.0])
TICK = 0.01  # the node's 100 Hz playback loop


def _episode(n: int = 30, fps: float = 30.0) -> ReplayEpisode:
    poses = np.tile(np.array([0.40, 0.0, 0.20, 1.0, 0.0, 0.0, 0.0]), (n, 1))  # 0.1 m away: a 1 s approach
    poses[:, 1] = np.linspace(0.0, 0.02, n)
    return ReplayEpisode.one_arm(0, np.arange(n) / fps, poses, np.full(n, 0.04), fps)


class Sim:
    """A fake clock, an arm that follows every target at once, and feedback at 100 Hz except in ``gaps``
    (``(t0, t1)`` intervals without any); records every target with the age of the feedback it saw.
    """

    def __init__(self, gaps=(), **cfg):
        self.player = ReplayPlayer(ReplayConfig(**{"approach_linear_speed": 0.15, **cfg}))
        self.gaps, self.now, self.pose = gaps, 0.0, START.copy()
        self.last_fb: float | None = None
        self.targets: list[tuple[float, float, np.ndarray]] = []  # (time, feedback age, pose)
        self.result: dict | None = None

    def feedback_due(self) -> bool:
        return not any(t0 <= self.now < t1 for t0, t1 in self.gaps)

    def run(self, until: float) -> None:
        while self.now < until and self.result is None:
            if self.feedback_due():
                self.player.on_feedback(self.pose, self.now)
                self.last_fb = self.now
            step = self.player.tick(self.now)
            if step.target is not None:
                assert self.last_fb is not None
                self.targets.append((self.now, self.now - self.last_fb, step.target.pose))
                self.pose = step.target.pose.copy()
            self.result = step.result
            self.now = round(self.now + TICK, 9)


def test_player_start_hiccup_holds_then_plays():
    """One feedback message, then a pause longer than ``stale_feedback_s`` (a starting arm node, a loaded
    machine): the run waits without moving, then plays the whole episode.
    """
    sim = Sim(gaps=[(0.001, 0.6)])
    sim.run(0.0)
    sim.player.on_feedback(sim.pose, 0.0)
    ok, msg = sim.player.start(_episode(), 0.0)
    assert ok, msg
    sim.now = TICK
    sim.run(30.0)
    assert sim.result is not None and sim.result["state"] == "done", sim.result
    assert sim.result["samples"] > 0
    assert sim.targets[0][0] >= 0.6 + 0.5 - 1e-9  # after the gap, once steady for steady_feedback_s
    assert max(age for _, age, _ in sim.targets) <= 0.3


def test_player_stale_during_approach_holds_and_plans_anew_from_the_measured_pose():
    sim = Sim()
    sim.player.on_feedback(START, 0.0)
    sim.player.start(_episode(), 0.0)
    sim.run(0.8)  # steady at 0.5 s, 0.3 s into a 1 s approach
    assert sim.player.state == "approach"
    t_gap = sim.now
    sim.gaps = [(t_gap, t_gap + 0.5)]
    sim.run(30.0)
    assert sim.result is not None and sim.result["state"] == "done", sim.result
    assert sim.result["feedback_holds"] == 1
    before = [t for t in sim.targets if t[0] < t_gap + 0.5]
    after = [t for t in sim.targets if t[0] >= t_gap + 0.5]
    assert before[-1][0] <= t_gap + 0.3 + 1e-9  # targets stop once feedback is stale
    assert after[0][0] >= t_gap + 0.5 + 0.5 - 1e-9  # and resume once it is steady again
    np.testing.assert_allclose(after[0][2], before[-1][2])  # from where the arm held: no jump
    assert max(age for _, age, _ in sim.targets) <= 0.3


def test_player_gives_up_when_feedback_stays_stale_before_playback():
    sim = Sim(feedback_wait_s=2.0)
    sim.player.on_feedback(START, 0.0)
    sim.player.start(_episode(), 0.0)
    sim.run(0.8)
    assert sim.player.state == "approach"
    t_gap = sim.now
    sim.gaps = [(t_gap, 1e9)]
    sim.run(30.0)
    assert sim.result is not None and sim.result["state"] == "aborted", sim.result
    assert "stale" in sim.result["reason"]
    assert sim.targets[-1][0] <= t_gap + 0.3 + 1e-9  # not one target on stale feedback
    assert sim.now - t_gap < 0.3 + 2.0 + 3 * TICK


def _until_playing(sim: Sim, seconds: float) -> float:
    while sim.player.state != "play" and sim.result is None:
        sim.run(sim.now + TICK)
    t_play = sim.now
    sim.run(sim.now + seconds)
    return t_play


def test_player_stale_during_playback_holds_then_goes_on_from_that_row():
    episode = _episode(n=90)  # 3 s
    sim = Sim()
    sim.player.on_feedback(START, 0.0)
    sim.player.start(episode, 0.0)
    _until_playing(sim, 1.0)
    t_gap = sim.now
    sim.gaps = [(t_gap, t_gap + 0.6)]
    sim.run(60.0)
    assert sim.result is not None and sim.result["state"] == "done", sim.result
    assert sim.result["feedback_holds"] == 1 and sim.result["samples"] > 0
    before = [t for t in sim.targets if t[0] < t_gap + 0.6]
    after = [t for t in sim.targets if t[0] >= t_gap + 0.6]
    assert before[-1][0] <= t_gap + 0.3 + 1e-9  # no target on stale feedback
    assert after[0][0] >= t_gap + 0.6 + 0.5 - 1e-9  # steady again before moving again
    np.testing.assert_allclose(after[0][2], before[-1][2])  # from where the arm held
    rows = [int(np.argmin(np.linalg.norm(episode.poses - p, axis=1))) for _, _, p in after]
    k_held = int(np.argmin(np.linalg.norm(episode.poses - before[-1][2], axis=1)))
    assert rows[-1] == len(episode.t) - 1 and min(rows) >= k_held - 1  # goes on from there to the end


def test_player_aborts_when_feedback_stays_stale_during_playback():
    sim = Sim(feedback_wait_s=2.0)
    sim.player.on_feedback(START, 0.0)
    sim.player.start(_episode(n=90), 0.0)
    _until_playing(sim, 0.5)
    t_gap = sim.now
    sim.gaps = [(t_gap, 1e9)]
    sim.run(30.0)
    assert sim.result is not None and sim.result["state"] == "aborted", sim.result
    assert "stale" in sim.result["reason"] and sim.result["samples"] > 0
    assert sim.targets[-1][0] <= t_gap + 0.3 + 1e-9
    assert sim.now - t_gap < 0.3 + 2.0 - 0.5 + 3 * TICK  # 0.5 s of the 2 s went on the start


def test_player_never_targets_on_stale_feedback_whatever_the_gaps():
    rng = np.random.default_rng(7)
    for _ in range(6):
        starts = np.sort(rng.uniform(0.0, 4.0, 5))
        gaps = [(float(t), float(t + rng.uniform(0.05, 0.8))) for t in starts]
        sim = Sim(gaps=gaps)
        sim.player.on_feedback(START, 0.0)
        assert sim.player.start(_episode(), 0.0)[0]
        sim.run(20.0)
        assert sim.result is not None
        assert all(age <= 0.3 for _, age, _ in sim.targets), gaps


def test_player_refuses_without_fresh_feedback_and_while_active():
    player = ReplayPlayer(ReplayConfig())
    assert player.start(_episode(), 0.0) == (False, "no fresh arm feedback on /arm/eef_pose: is piper_arm running?")
    player.on_feedback(START, 0.0)
    assert not player.start(_episode(), 0.5)[0]  # 0.5 s old: stale
    player.on_feedback(START, 1.0)
    ok, msg = player.start(_episode(), 1.0)
    assert ok and "waiting for steady arm feedback" in msg
    assert player.start(_episode(), 1.0) == (False, "already playing (state waiting)")
    result = player.stop("operator")
    assert result is not None and result["state"] == "stopped" and player.stop() is None


# -- two arms -----------------------------------------------------------------------------------------------
ARMS = ("left", "right")


def test_load_episode_gives_each_arm_its_own_columns(bimanual_training_root):
    ep = load_episode(bimanual_training_root, 0)
    t = pq.read_table(bimanual_training_root / "data/chunk-000/episode_000000.parquet")
    assert ep.arms == ARMS and len(ep.t) == t.num_rows and ep.fps == 30
    for arm in ARMS:
        poses = np.asarray(t[f"action.{arm}_arm_eef"].to_pylist(), dtype=np.float64)
        poses[:, 3:] /= np.linalg.norm(poses[:, 3:], axis=1, keepdims=True)
        np.testing.assert_allclose(ep.tracks[arm].poses, poses, atol=1e-7)
        grip = np.asarray(t[f"action.{arm}_gripper"].to_pylist(), dtype=np.float64).reshape(-1)
        np.testing.assert_array_equal(ep.tracks[arm].gripper, grip)
    assert not np.allclose(ep.tracks["left"].poses, ep.tracks["right"].poses)  # the synthetic arms stand apart
    with pytest.raises(ValueError, match="has arms left, right"):
        ep.poses  # noqa: B018 - one arm's view of a two-arm episode


START2 = {
    "left": np.array([0.30, 0.05, 0.20, 1.0, 0.0, 0.0, 0.0]),
    "right": np.array([0.30, -0.05, 0.20, 0, 0, 0, 1.0]),
}


def _two_arm_episode(n: int = 60, fps: float = 30.0) -> ReplayEpisode:
    tracks = {}
    for arm, (y0, dy, far) in {"left": (0.10, 0.02, 0.05), "right": (-0.10, -0.03, 0.15)}.items():
        poses = np.tile(START2[arm], (n, 1))
        poses[:, 0] += far  # the right arm's first pose is 3x further: its approach takes longer
        poses[:, 1] = y0 + np.linspace(0.0, dy, n)
        tracks[arm] = ArmTrack(poses, np.full(n, 0.03 if arm == "left" else 0.06))
    return ReplayEpisode(0, np.arange(n) / fps, tracks, fps)


class Sim2:
    """Two arms on a fake clock, each following its targets at once; ``offset`` shifts an arm's measured pose
    from its target (a constant tracking error); ``gaps`` silence one arm's feedback.
    """

    def __init__(self, offset=None, gaps=None, **cfg):
        self.player = ReplayPlayer(ReplayConfig(arms=list(ARMS), approach_linear_speed=0.15, **cfg))
        self.now, self.pose = 0.0, {a: START2[a].copy() for a in ARMS}
        self.offset = offset or {}
        self.gaps = gaps or {}
        self.steps: list[tuple[float, dict]] = []
        self.result: dict | None = None

    def run(self, until: float) -> None:
        while self.now < until and self.result is None:
            for arm in ARMS:
                if not any(t0 <= self.now < t1 for t0, t1 in self.gaps.get(arm, ())):
                    measured = self.pose[arm].copy()
                    measured[:3] += self.offset.get(arm, 0.0)
                    self.player.on_feedback(measured, self.now, arm=arm)
            step = self.player.tick(self.now)
            if step.targets:
                self.steps.append((self.now, {a: t.pose.copy() for a, t in step.targets.items()}))
                self.pose = {a: t.pose.copy() for a, t in step.targets.items()}
            self.result = step.result
            self.now = round(self.now + TICK, 9)


def test_two_arms_approach_their_own_first_poses_then_play_and_report_tracking_per_arm():
    episode = _two_arm_episode()
    sim = Sim2(offset={"right": np.array([0.0, 0.0, 0.004])})  # the right arm tracks 4 mm low (z: off its path)
    for arm in ARMS:
        sim.player.on_feedback(START2[arm], 0.0, arm=arm)
    ok, msg = sim.player.start(episode, 0.0)
    assert ok, msg
    sim.run(30.0)
    assert sim.result is not None and sim.result["state"] == "done", sim.result
    assert all(set(targets) == set(ARMS) for _, targets in sim.steps)
    for arm in ARMS:  # each arm ended the approach on its own first pose, and played its own track to the end
        firsts = [i for i, (_, t) in enumerate(sim.steps) if np.allclose(t[arm], episode.tracks[arm].poses[0])]
        assert firsts, arm
        np.testing.assert_allclose(sim.steps[-1][1][arm], episode.tracks[arm].poses[-1])
    # the left arm waits at its goal while the slower right arm still approaches
    left_done = next(i for i, (_, t) in enumerate(sim.steps) if np.allclose(t["left"], episode.tracks["left"].poses[0]))
    right_done = next(
        i for i, (_, t) in enumerate(sim.steps) if np.allclose(t["right"], episode.tracks["right"].poses[0])
    )
    assert left_done < right_done
    arms = sim.result["arms"]
    assert set(arms) == set(ARMS) and arms["left"]["samples"] == arms["right"]["samples"] > 0
    assert arms["right"]["lag_rms_m"] == pytest.approx(0.004, abs=5e-4)
    assert arms["right"]["rms_m"] >= arms["right"]["lag_rms_m"] and arms["left"]["lag_rms_m"] < 5e-4
    assert "rms_m" not in sim.result  # no one-arm summary that would mix the two


def test_one_arms_stale_feedback_holds_both_arms():
    sim = Sim2()
    sim.player.on_feedback(START2["left"], 0.0, arm="left")
    sim.player.on_feedback(START2["right"], 0.0, arm="right")
    assert sim.player.start(_two_arm_episode(n=90), 0.0)[0]
    while sim.player.state != "play":
        sim.run(sim.now + TICK)
    t_gap = sim.now + 0.5
    sim.gaps = {"right": [(t_gap, t_gap + 0.6)]}
    sim.run(60.0)
    assert sim.result is not None and sim.result["state"] == "done" and sim.result["feedback_holds"] == 1
    silent = [t for t, _ in sim.steps if t_gap + 0.3 + 1e-9 < t < t_gap + 0.6]
    assert silent == []  # no target for either arm while the right arm's feedback is stale


def test_the_arms_of_the_episode_must_be_the_nodes():
    one = ReplayPlayer(ReplayConfig())
    one.on_feedback(START, 0.0)
    assert one.start(_two_arm_episode(), 0.0) == (
        False,
        "episode 0 was recorded with two arms (left, right), this replay drives one arm (set arms:=left,right)",
    )
    two = ReplayPlayer(ReplayConfig(arms=list(ARMS)))
    two.on_feedback(START2["left"], 0.0, arm="left")
    assert two.start(_episode(), 0.0) == (
        False,
        "episode 0 was recorded with one arm, this replay drives two arms (left, right) (run it without arms)",
    )
    assert two.start(_two_arm_episode(), 0.0) == (
        False,
        "no fresh arm feedback on /right/arm/eef_pose: is piper_arm running?",
    )
    two.on_feedback(START, 0.1)  # an unnamed arm's feedback (the one-arm topic): no arm's, ignored and counted
    assert two.foreign_feedback == 1 and not two.fresh(0.1)

"""The replay state machine on an injected clock: wait for steady arm feedback, approach, settle, play.

The one safety rule: a target is produced only while the newest arm feedback is younger than
``stale_feedback_s``; without a target the arm holds its last one (its own stale-target rule).

A start needs *steady* feedback (no gap longer than ``stale_feedback_s`` for ``steady_feedback_s``):
the approach is planned from the measured pose, and a stream that has just appeared may pause again.
Stale feedback holds instead of aborting (a loaded machine starves it now and then): once steady again
the arm approaches, slowly and from the pose then measured, the row where it stopped, settles, and
playback goes on from that row, never with a jump. The result counts the holds (``feedback_holds``,
``held_s``); holding longer than ``feedback_wait_s`` in all aborts (the arm keeps holding).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from piper_recorder.names import EEF_POSE
from piper_recorder.replay.episode import ReplayEpisode
from piper_recorder.replay.motion import Approach, TrackingStats, row_at

ACTIVE = ("waiting", "approach", "settle", "play")


@dataclass
class ReplayConfig:
    """The replay node's parameters (speeds in m/s and rad/s, times in s)."""

    root: str = ""
    episode: int = 0
    speed: float = 1.0
    rate_hz: float = 100.0
    approach_linear_speed: float = 0.05
    approach_angular_speed: float = 0.5
    settle_tolerance_m: float = 0.01
    settle_timeout_s: float = 5.0
    stale_feedback_s: float = 0.3  # older arm feedback: no target, the arm holds
    steady_feedback_s: float = 0.5  # feedback without a stale gap this long before the arm moves
    feedback_wait_s: float = 5.0  # total time held on stale or unsteady feedback, then abort
    frame_id: str = "arm_base"
    autoplay: bool = False

    def validate(self) -> None:
        """ValueError naming the first parameter out of range."""
        if self.speed <= 0 or self.rate_hz <= 0:
            raise ValueError("parameters 'speed' and 'rate_hz' must be > 0")
        if self.approach_linear_speed <= 0 or self.approach_angular_speed <= 0:
            raise ValueError("approach speeds must be > 0")
        if self.stale_feedback_s <= 0:
            raise ValueError("parameter 'stale_feedback_s' must be > 0")
        if self.steady_feedback_s < 0 or self.feedback_wait_s < 0:
            raise ValueError("parameters 'steady_feedback_s' and 'feedback_wait_s' must be >= 0")


@dataclass(frozen=True)
class Target:
    """One arm target to publish: xyz + quat wxyz (m), gripper width (m)."""

    pose: np.ndarray
    gripper: float


@dataclass(frozen=True)
class Step:
    """What one tick asks of the node: a target to publish, and/or the final result to report."""

    target: Target | None = None
    result: dict | None = None


class ReplayPlayer:
    """One replay run at a time, from start to its result.

    Thread-safe: feedback arrives on the executor, ticks on the playback thread, starts and stops on
    service callbacks; every method takes the monotonic time ``now`` (s) from its caller.
    """

    def __init__(self, cfg: ReplayConfig) -> None:
        self.cfg = cfg
        self.state = "idle"
        self._lock = threading.Lock()
        self._measured: np.ndarray | None = None
        self._measured_at: float | None = None
        self._steady_since = 0.0
        self._episode: ReplayEpisode | None = None
        self._approach: Approach | None = None
        self._phase_t0 = 0.0
        self._held_s = 0.0  # this run: time spent waiting for steady feedback without a target
        self._holds = 0  # this run: how often feedback went stale after the arm started moving
        self._resume_at = 0.0  # playback time (s) where play starts or goes on after a hold
        self._stats = TrackingStats()

    # -- feedback -----------------------------------------------------------------------------
    def on_feedback(self, pose: np.ndarray, now: float) -> None:
        """A measured EEF pose (xyz + quat wxyz) arrived at ``now``."""
        with self._lock:
            if self._measured_at is None or now - self._measured_at > self.cfg.stale_feedback_s:
                self._steady_since = now  # a gap: steadiness starts over
            self._measured, self._measured_at = np.asarray(pose, dtype=np.float64).copy(), now

    def _fresh(self, now: float) -> np.ndarray | None:
        if self._measured_at is None or now - self._measured_at > self.cfg.stale_feedback_s:
            return None
        return self._measured

    def _steady(self, now: float) -> bool:
        return self._fresh(now) is not None and now - self._steady_since >= self.cfg.steady_feedback_s

    def fresh(self, now: float) -> bool:
        """Whether the newest arm feedback is younger than ``stale_feedback_s`` at ``now``."""
        with self._lock:
            return self._fresh(now) is not None

    # -- start / stop -------------------------------------------------------------------------
    def start(self, episode: ReplayEpisode, now: float) -> tuple[bool, str]:
        """Begin a run: waiting for steady feedback, then the approach.

        Refused without any fresh feedback (nothing to plan from: the arm node is not running).
        """
        with self._lock:
            if self.state in ACTIVE:
                return False, f"already playing (state {self.state})"
            if self._fresh(now) is None:
                return False, f"no fresh arm feedback on {EEF_POSE}: is piper_arm running?"
            self._episode, self._stats = episode, TrackingStats()
            self._held_s, self._holds, self._resume_at = 0.0, 0, 0.0
            self.state, self._phase_t0 = "waiting", now
            self._leave_waiting_if_steady(now)
            play = f"{len(episode.t)} rows ({episode.duration / self.cfg.speed:.1f} s)"
            if self.state == "waiting":
                return True, (
                    f"waiting for steady arm feedback ({self.cfg.steady_feedback_s:.1f} s), then "
                    f"approaching the first pose and playing {play}"
                )
            assert self._approach is not None
            return True, f"approaching the first pose ({self._approach.duration:.1f} s), then playing {play}"

    def stop(self, reason: str = "") -> dict | None:
        """End an active run (the arm holds its last target); its result, or None when none was active."""
        with self._lock:
            if self.state not in ACTIVE:
                return None
            return self._finish("stopped", reason)

    # -- ticks --------------------------------------------------------------------------------
    def tick(self, now: float) -> Step:
        """Advance the run to ``now``: the target to publish, or the result when it ended."""
        with self._lock:
            state = self.state
            if state not in ACTIVE:
                return Step()
            episode = self._episode
            assert episode is not None
            measured = self._fresh(now)
            if measured is None and state != "waiting":  # hold; approach anew once steady
                self.state, self._phase_t0 = "waiting", now
                self._holds += 1
            if self.state == "waiting":
                if self._held_s + (now - self._phase_t0) > self.cfg.feedback_wait_s:
                    return Step(
                        result=self._finish(
                            "aborted", f"arm feedback stale or unsteady for {self.cfg.feedback_wait_s:.1f} s; holding"
                        )
                    )
                if not self._leave_waiting_if_steady(now):
                    return Step()
            assert measured is not None
            approach = self._approach
            assert approach is not None
            k0 = self._resume_row()
            elapsed = now - self._phase_t0
            if self.state == "approach":
                target = Target(approach.pose_at(elapsed), float(episode.gripper[k0]))
                if elapsed >= approach.duration:
                    self.state, self._phase_t0 = "settle", now
                return Step(target)
            if self.state == "settle":
                close = np.linalg.norm(measured[:3] - episode.poses[k0, :3]) <= self.cfg.settle_tolerance_m
                if close or elapsed >= self.cfg.settle_timeout_s:
                    self.state, self._phase_t0 = "play", now - self._resume_at / self.cfg.speed
                return Step(Target(episode.poses[k0], float(episode.gripper[k0])))
            k = row_at(episode.t, elapsed, self.cfg.speed)
            if k >= len(episode.t) - 1 and elapsed * self.cfg.speed > episode.duration + 1.0 / episode.fps:
                return Step(result=self._finish("done"))
            k = max(0, min(k, len(episode.t) - 1))
            self._resume_at = elapsed * self.cfg.speed  # a hold from here goes on from this row
            self._stats.add(elapsed, episode.poses[k], measured)
            return Step(Target(episode.poses[k], float(episode.gripper[k])))

    def _resume_row(self) -> int:
        assert self._episode is not None
        return max(0, min(row_at(self._episode.t, self._resume_at, 1.0), len(self._episode.t) - 1))

    def _leave_waiting_if_steady(self, now: float) -> bool:
        """From waiting to the approach, once feedback is steady.

        The approach runs from the pose measured now to the row play starts or goes on from.
        """
        if not self._steady(now):
            return False
        assert self._episode is not None and self._measured is not None
        self._held_s += now - self._phase_t0
        self._approach = Approach(
            self._measured.copy(),
            self._episode.poses[self._resume_row()],
            self.cfg.approach_linear_speed,
            self.cfg.approach_angular_speed,
        )
        self.state, self._phase_t0 = "approach", now
        return True

    def _finish(self, state: str, reason: str = "") -> dict:
        self.state = state
        episode = self._episode.episode_index if self._episode is not None else self.cfg.episode
        return {
            "state": state,
            "episode": episode,
            "reason": reason,
            "feedback_holds": self._holds,
            "held_s": round(self._held_s, 3),
            **self._stats.summary(),
        }

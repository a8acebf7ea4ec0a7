"""The replay state machine on an injected clock: wait for steady arm feedback, approach, settle, play.

The one safety rule: a target is produced only while the newest arm feedback is younger than
``stale_feedback_s``; without a target the arm holds its last one (its own stale-target rule).

A start needs *steady* feedback (no gap longer than ``stale_feedback_s`` for ``steady_feedback_s``):
the approach is planned from the measured pose, and a stream that has just appeared may pause again.
Stale feedback holds instead of aborting (a loaded machine starves it now and then): once steady again
the arm approaches, slowly and from the pose then measured, the row where it stopped, settles, and
playback goes on from that row, never with a jump. The result counts the holds (``feedback_holds``,
``held_s``); holding longer than ``feedback_wait_s`` in all aborts (the arm keeps holding).

Two arms (``ReplayConfig.arms``, an episode of a two-arm root): every rule above holds for the arms
together, on the episode's one time line. Each arm approaches its own first pose from its own measured
pose (the approach lasts as long as the slower arm needs; the faster waits at its goal), playback starts
once both have settled, and one arm's stale feedback holds both (they replay one recorded motion: one
going on alone would pull apart what both hands held). The result reports each arm's tracking error
under ``arms``. An episode of another number of arms than the node drives is refused in one line.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from piper_recorder.names import EEF_POSE, arm_topic, parse_arms
from piper_recorder.replay.episode import ReplayEpisode
from piper_recorder.replay.motion import Approach, TrackingStats, row_at

ACTIVE = ("waiting", "approach", "settle", "play")
Arm = str | None  # an arm's name, None for one arm


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
    arms: list[str] = field(default_factory=list)  # [] one arm; [left, right]: each arm's topics under its namespace

    def arm_names(self) -> tuple[str, ...]:
        """The live arms' names (``names.parse_arms``): () for one arm."""
        return parse_arms(self.arms)

    def validate(self) -> None:
        """ValueError naming the first parameter out of range."""
        self.arm_names()
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
    """What one tick asks of the node: each arm's target to publish (key None for one arm), and/or the result."""

    targets: dict[Arm, Target] = field(default_factory=dict)
    result: dict | None = None

    @property
    def target(self) -> Target | None:
        """One arm's target (always None for several arms: use ``targets``)."""
        return self.targets.get(None)


@dataclass
class _Feedback:
    """One arm's newest measured pose, when it came, and since when it came without a stale gap."""

    pose: np.ndarray | None = None
    at: float | None = None
    steady_since: float = 0.0


def _arms_text(arms: tuple[str, ...]) -> str:
    return f"two arms ({', '.join(arms)})" if len(arms) == 2 else (f"arms {', '.join(arms)}" if arms else "one arm")


class ReplayPlayer:
    """One replay run at a time, from start to its result.

    Thread-safe: feedback arrives on the executor, ticks on the playback thread, starts and stops on
    service callbacks; every method takes the monotonic time ``now`` (s) from its caller.
    """

    def __init__(self, cfg: ReplayConfig) -> None:
        self.cfg = cfg
        self.state = "idle"
        self._lock = threading.Lock()
        self.arms: tuple[Arm, ...] = cfg.arm_names() or (None,)
        self._feedback = {a: _Feedback() for a in self.arms}
        self._episode: ReplayEpisode | None = None
        self._approach: dict[Arm, Approach] = {}
        self._phase_t0 = 0.0
        self._held_s = 0.0  # this run: time spent waiting for steady feedback without a target
        self._holds = 0  # this run: how often feedback went stale after the arm started moving
        self._resume_at = 0.0  # playback time (s) where play starts or goes on after a hold
        self._stats = {a: TrackingStats() for a in self.arms}
        self.foreign_feedback = 0  # feedback of an arm this replay does not drive, ignored

    # -- feedback -----------------------------------------------------------------------------
    def on_feedback(self, pose: np.ndarray, now: float, arm: Arm = None) -> None:
        """A measured EEF pose (xyz + quat wxyz) of ``arm`` (None: the one arm) arrived at ``now``."""
        with self._lock:
            fb = self._feedback.get(arm)
            if fb is None:  # an arm this replay does not drive (a graph of other arms): never a plan's start
                self.foreign_feedback += 1
                return
            if fb.at is None or now - fb.at > self.cfg.stale_feedback_s:
                fb.steady_since = now  # a gap: steadiness starts over
            fb.pose, fb.at = np.asarray(pose, dtype=np.float64).copy(), now

    def _stale_arms(self, now: float) -> list[Arm]:
        return [a for a, fb in self._feedback.items() if fb.at is None or now - fb.at > self.cfg.stale_feedback_s]

    def _fresh(self, now: float) -> dict[Arm, np.ndarray] | None:
        """Every arm's measured pose, or None when any arm's feedback is stale (every arm holds)."""
        if self._stale_arms(now):
            return None
        return {a: fb.pose for a, fb in self._feedback.items() if fb.pose is not None}

    def _steady(self, now: float) -> bool:
        return self._fresh(now) is not None and all(
            now - fb.steady_since >= self.cfg.steady_feedback_s for fb in self._feedback.values()
        )

    def fresh(self, now: float) -> bool:
        """Whether every arm's newest feedback is younger than ``stale_feedback_s`` at ``now``."""
        with self._lock:
            return self._fresh(now) is not None

    # -- start / stop -------------------------------------------------------------------------
    def start(self, episode: ReplayEpisode, now: float) -> tuple[bool, str]:
        """Begin a run: waiting for steady feedback, then the approach.

        Refused for an episode of other arms than the node drives, and without any fresh feedback (nothing to plan
        from: the arm node is not running).
        """
        with self._lock:
            if self.state in ACTIVE:
                return False, f"already playing (state {self.state})"
            live = self.cfg.arm_names()
            if set(episode.arms) != set(live):
                return False, (
                    f"episode {episode.episode_index} was recorded with {_arms_text(episode.arms)}, this replay "
                    f"drives {_arms_text(live)} (set arms:={','.join(episode.arms)})"
                    if episode.arms
                    else f"episode {episode.episode_index} was recorded with one arm, this replay drives "
                    f"{_arms_text(live)} (run it without arms)"
                )
            stale = self._stale_arms(now)
            if stale:
                topics = ", ".join(arm_topic(a, EEF_POSE) for a in stale)
                return False, f"no fresh arm feedback on {topics}: is piper_arm running?"
            self._episode, self._stats = episode, {a: TrackingStats() for a in self.arms}
            self._held_s, self._holds, self._resume_at = 0.0, 0, 0.0
            self.state, self._phase_t0 = "waiting", now
            self._leave_waiting_if_steady(now)
            play = f"{len(episode.t)} rows ({episode.duration / self.cfg.speed:.1f} s)"
            if self.state == "waiting":
                return True, (
                    f"waiting for steady arm feedback ({self.cfg.steady_feedback_s:.1f} s), then "
                    f"approaching the first pose and playing {play}"
                )
            return True, f"approaching the first pose ({self._approach_s():.1f} s), then playing {play}"

    def stop(self, reason: str = "") -> dict | None:
        """End an active run (the arms hold their last targets); its result, or None when none was active."""
        with self._lock:
            if self.state not in ACTIVE:
                return None
            return self._finish("stopped", reason)

    # -- ticks --------------------------------------------------------------------------------
    def tick(self, now: float) -> Step:
        """Advance the run to ``now``: each arm's target to publish, or the result when it ended."""
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
            k0 = self._resume_row()
            elapsed = now - self._phase_t0
            tracks = episode.tracks
            if self.state == "approach":
                targets = {
                    a: Target(ap.pose_at(elapsed), float(tracks[a].gripper[k0])) for a, ap in self._approach.items()
                }
                if elapsed >= self._approach_s():
                    self.state, self._phase_t0 = "settle", now
                return Step(targets)
            if self.state == "settle":
                close = all(
                    np.linalg.norm(measured[a][:3] - tracks[a].poses[k0, :3]) <= self.cfg.settle_tolerance_m
                    for a in self.arms
                )
                if close or elapsed >= self.cfg.settle_timeout_s:
                    self.state, self._phase_t0 = "play", now - self._resume_at / self.cfg.speed
                return Step({a: Target(tracks[a].poses[k0], float(tracks[a].gripper[k0])) for a in self.arms})
            k = row_at(episode.t, elapsed, self.cfg.speed)
            if k >= len(episode.t) - 1 and elapsed * self.cfg.speed > episode.duration + 1.0 / episode.fps:
                return Step(result=self._finish("done"))
            k = max(0, min(k, len(episode.t) - 1))
            self._resume_at = elapsed * self.cfg.speed  # a hold from here goes on from this row
            for a in self.arms:
                self._stats[a].add(elapsed, tracks[a].poses[k], measured[a])
            return Step({a: Target(tracks[a].poses[k], float(tracks[a].gripper[k])) for a in self.arms})

    def _approach_s(self) -> float:
        return max(ap.duration for ap in self._approach.values())

    def _resume_row(self) -> int:
        assert self._episode is not None
        return max(0, min(row_at(self._episode.t, self._resume_at, 1.0), len(self._episode.t) - 1))

    def _leave_waiting_if_steady(self, now: float) -> bool:
        """From waiting to the approach, once every arm's feedback is steady.

        Each arm's approach runs from its pose measured now to its row where play starts or goes on.
        """
        if not self._steady(now):
            return False
        assert self._episode is not None
        self._held_s += now - self._phase_t0
        k0 = self._resume_row()
        self._approach = {}
        for a, fb in self._feedback.items():
            assert fb.pose is not None
            self._approach[a] = Approach(
                fb.pose.copy(),
                self._episode.tracks[a].poses[k0],
                self.cfg.approach_linear_speed,
                self.cfg.approach_angular_speed,
            )
        self.state, self._phase_t0 = "approach", now
        return True

    def _finish(self, state: str, reason: str = "") -> dict:
        self.state = state
        episode = self._episode.episode_index if self._episode is not None else self.cfg.episode
        out = {
            "state": state,
            "episode": episode,
            "reason": reason,
            "feedback_holds": self._holds,
            "held_s": round(self._held_s, 3),
        }
        if self.arms == (None,):
            return {**out, **self._stats[None].summary()}
        return {**out, "arms": {str(a): s.summary() for a, s in self._stats.items()}}

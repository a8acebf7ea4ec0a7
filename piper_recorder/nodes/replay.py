"""replay node: play one recorded episode's absolute actions back into the arm.

It first moves slowly from the measured pose to the episode's first commanded pose, then publishes
``action.arm_eef`` / ``action.gripper`` on /arm/target_pose and /arm/target_gripper at the recorded
timestamps (scaled by ``speed``). Stale arm feedback aborts playback: the node stops publishing and
the arm's own stale-target rule makes it hold. When done it reports the commanded-vs-measured
tracking error on ``~/result`` (JSON, transient local) and in the log: the raw commanded-vs-measured
RMS (which includes the arm's lag) and the RMS after removing the best constant lag.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.nodes.common import declare_config, ns_to_stamp, run_in_thread, run_node
from piper_recorder.replay.episode import ReplayEpisode, load_episode
from piper_recorder.replay.motion import Approach, TrackingStats, row_at
from piper_recorder.names import EEF_POSE, REPLAY_SERVICES, TARGET_GRIPPER, TARGET_POSE


@dataclass
class ReplayConfig:
    root: str = ""
    episode: int = 0
    speed: float = 1.0
    rate_hz: float = 100.0
    approach_linear_speed: float = 0.05
    approach_angular_speed: float = 0.5
    settle_tolerance_m: float = 0.01
    settle_timeout_s: float = 5.0
    stale_feedback_s: float = 0.3
    frame_id: str = "arm_base"
    autoplay: bool = False

    def validate(self) -> None:
        if self.speed <= 0 or self.rate_hz <= 0:
            raise ValueError("parameters 'speed' and 'rate_hz' must be > 0")
        if self.approach_linear_speed <= 0 or self.approach_angular_speed <= 0:
            raise ValueError("approach speeds must be > 0")


class ReplayNode(Node):
    def __init__(self) -> None:
        super().__init__("replay")
        self.cfg = declare_config(self, ReplayConfig)
        self._lock = threading.Lock()
        self._measured: np.ndarray | None = None
        self._measured_at = 0.0
        self._state = "idle"
        self._episode: ReplayEpisode | None = None
        self._approach: Approach | None = None
        self._phase_t0 = 0.0
        self._stats = TrackingStats()
        self._pub_pose = self.create_publisher(PoseStamped, TARGET_POSE, 10)
        self._pub_grip = self.create_publisher(JointState, TARGET_GRIPPER, 10)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self._pub_result = self.create_publisher(String, "~/result", latched)
        self.create_subscription(PoseStamped, EEF_POSE, self._on_eef, 10)
        for name, fn in zip(REPLAY_SERVICES, (self._srv_play, self._srv_stop), strict=True):
            self.create_service(Trigger, f"~/{name}", fn)
        self._loaded: ReplayEpisode | None = None
        self._load_error = ""
        self._loading = threading.Lock()
        self._load()
        if self._load_error:
            self.get_logger().error(self._load_error)
        if self.cfg.autoplay:
            self.create_timer(0.5, self._autoplay_once)
        # Playback runs in its own thread on absolute deadlines: a ROS timer in a busy executor
        # wakes irregularly, and every late wake-up would stretch the replayed motion.
        self._stop = threading.Event()
        self._player = threading.Thread(target=self._play_loop, name="replay", daemon=True)
        self._player.start()

    # -- inputs -------------------------------------------------------------------------------
    def _on_eef(self, msg: PoseStamped) -> None:
        p, q = msg.pose.position, msg.pose.orientation
        with self._lock:
            self._measured = np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z])
            self._measured_at = time.monotonic()

    def _feedback(self) -> np.ndarray | None:
        with self._lock:
            if self._measured is None or time.monotonic() - self._measured_at > self.cfg.stale_feedback_s:
                return None
            return self._measured.copy()

    # -- services -----------------------------------------------------------------------------
    def _autoplay_once(self) -> None:
        if self._state != "idle":
            return
        if self._loaded is None:  # e.g. the episode is saved after this node started: retry off the executor
            threading.Thread(target=self._load, name="replay-load", daemon=True).start()
        elif self._feedback() is not None:
            ok, msg = self._start()
            self.get_logger().info(f"autoplay: {msg}")
            if ok:
                self.cfg.autoplay = False

    def _load(self) -> None:
        """Read the episode: before spinning, or on a thread (a read inside a callback of this
        single-threaded executor would hold back /arm/eef_pose, and playback would start on stale feedback)."""
        if not self._loading.acquire(blocking=False):
            return  # a load is already running
        try:
            self._loaded, self._load_error = load_episode(self.cfg.root, self.cfg.episode), ""
        except (OSError, ValueError, KeyError) as exc:
            self._load_error = f"cannot load episode {self.cfg.episode} from '{self.cfg.root}': {exc}"
        finally:
            self._loading.release()

    def _start(self) -> tuple[bool, str]:
        if self._state in ("approach", "settle", "play"):
            return False, f"already playing (state {self._state})"
        episode = self._loaded
        if episode is None:
            return False, self._load_error or f"episode {self.cfg.episode} is still loading"
        current = self._feedback()
        if current is None:
            return False, f"no fresh arm feedback on {EEF_POSE}: is piper_arm running?"
        with self._lock:
            self._episode = episode
            self._approach = Approach(current, episode.poses[0], self.cfg.approach_linear_speed,
                                      self.cfg.approach_angular_speed)
            self._stats = TrackingStats()
            self._phase_t0 = time.monotonic()
            self._state = "approach"
        return True, (f"approaching the first pose ({self._approach.duration:.1f} s), then playing "
                      f"{len(episode.t)} rows ({episode.duration / self.cfg.speed:.1f} s)")

    async def _srv_play(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if self._loaded is None:
            await run_in_thread(self._load)
        res.success, res.message = self._start()
        return res

    def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if self._state not in ("approach", "settle", "play"):
            res.success, res.message = False, f"not playing (state {self._state})"
            return res
        self._finish("stopped")
        res.success, res.message = True, "stopped; the arm holds its last target"
        return res

    # -- playback -----------------------------------------------------------------------------
    def _play_loop(self) -> None:
        period = 1.0 / self.cfg.rate_hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._tick()
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -period:          # fell behind (machine stall): resynchronise, don't burst
                next_t, delay = time.monotonic(), 0.0
            self._stop.wait(max(0.0, delay))

    def _publish(self, pose: np.ndarray, gripper: float | None) -> None:
        stamp = ns_to_stamp(self.get_clock().now().nanoseconds)
        msg = PoseStamped()
        msg.header.stamp, msg.header.frame_id = stamp, self.cfg.frame_id
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in pose[:3])
        w, x, y, z = (float(v) for v in pose[3:])
        msg.pose.orientation.w, msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z = w, x, y, z
        self._pub_pose.publish(msg)
        if gripper is not None:
            js = JointState(name=["gripper"], position=[float(gripper)])
            js.header.stamp = stamp
            self._pub_grip.publish(js)

    def _finish(self, state: str, reason: str = "") -> None:
        with self._lock:
            self._state = state
            summary = {"state": state, "episode": self.cfg.episode, "reason": reason, **self._stats.summary()}
        self._pub_result.publish(String(data=json.dumps(summary)))
        log = self.get_logger().warning if state == "aborted" else self.get_logger().info
        log(f"replay {state}: {json.dumps(summary)}")

    def _tick(self) -> None:
        state = self._state
        if state not in ("approach", "settle", "play"):
            return
        measured = self._feedback()
        if measured is None:
            self._finish("aborted", "arm feedback stale; holding")
            return
        episode, approach = self._episode, self._approach
        assert episode is not None and approach is not None
        elapsed = time.monotonic() - self._phase_t0
        if state == "approach":
            self._publish(approach.pose_at(elapsed), episode.gripper[0])
            if elapsed >= approach.duration:
                self._state, self._phase_t0 = "settle", time.monotonic()
        elif state == "settle":
            self._publish(episode.poses[0], episode.gripper[0])
            close = np.linalg.norm(measured[:3] - episode.poses[0, :3]) <= self.cfg.settle_tolerance_m
            if close or elapsed >= self.cfg.settle_timeout_s:
                self._state, self._phase_t0 = "play", time.monotonic()
        else:
            k = row_at(episode.t, elapsed, self.cfg.speed)
            if k >= len(episode.t) - 1 and elapsed * self.cfg.speed > episode.duration + 1.0 / episode.fps:
                self._finish("done")
                return
            k = max(0, min(k, len(episode.t) - 1))
            self._publish(episode.poses[k], episode.gripper[k])
            self._stats.add(elapsed, episode.poses[k], measured)

    def on_shutdown(self) -> None:
        self._stop.set()
        self._player.join(2.0)
        if self._state in ("approach", "settle", "play"):
            self._finish("stopped", "shutdown")


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(ReplayNode, args))


if __name__ == "__main__":
    main()

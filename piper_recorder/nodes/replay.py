"""replay node: play one recorded episode's absolute actions back into the arm.

It moves slowly from the measured pose to the episode's first commanded pose, then publishes
``action.arm_eef`` / ``action.gripper`` as targets at the recorded times (scaled by ``speed``). It moves
only on fresh, steady arm feedback (``replay.player.ReplayPlayer``). When done it reports the
commanded-vs-measured tracking error, raw and after removing the best constant lag, on ``~/result``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.names import EEF_POSE, REPLAY_NODE, REPLAY_SERVICES, TARGET_GRIPPER, TARGET_POSE, arm_topic
from piper_recorder.nodes.plumbing.executors import run_in_thread
from piper_recorder.nodes.plumbing.parameters import ParameterError, declare_config
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.plumbing.stamps import ns_to_stamp
from piper_recorder.replay.episode import ReplayEpisode, load_episode
from piper_recorder.replay.player import ReplayConfig, ReplayPlayer, Target


class ReplayNode(Node):
    """The replay node: the player's targets out on a thread of their own, arm feedback in."""

    def __init__(self) -> None:
        super().__init__(REPLAY_NODE)
        self.cfg = declare_config(self, ReplayConfig)
        root = Path(self.cfg.root)
        if not self.cfg.root or not root.is_dir():  # an episode may be saved later, never a root created
            why = (
                "is not set"
                if not self.cfg.root
                else f"{self.cfg.root!r} {'is not a directory' if root.exists() else 'does not exist'}"
            )
            raise ParameterError(f"replay: parameter 'root' {why} (the LeRobot root to replay)")
        self._player = ReplayPlayer(self.cfg)
        arms: tuple[str | None, ...] = self.cfg.arm_names() or (None,)  # two arms: each under its namespace
        self._pubs = {
            arm: (
                self.create_publisher(PoseStamped, arm_topic(arm, TARGET_POSE), 10),
                self.create_publisher(JointState, arm_topic(arm, TARGET_GRIPPER), 10),
            )
            for arm in arms
        }
        latched = QoSProfile(
            depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
        )
        self._pub_result = self.create_publisher(String, "~/result", latched)
        for arm in arms:
            self.create_subscription(PoseStamped, arm_topic(arm, EEF_POSE), partial(self._on_eef, arm), 10)
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
        self._play_thread = threading.Thread(target=self._play_loop, name="replay", daemon=True)
        self._play_thread.start()

    # -- inputs -------------------------------------------------------------------------------
    def _on_eef(self, arm: str | None, msg: PoseStamped) -> None:
        p, q = msg.pose.position, msg.pose.orientation
        self._player.on_feedback(np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z]), time.monotonic(), arm)

    # -- services -----------------------------------------------------------------------------
    def _autoplay_once(self) -> None:
        if self._player.state != "idle":
            return
        if self._loaded is None:  # e.g. the episode is saved after this node started: retry off the executor
            threading.Thread(target=self._load, name="replay-load", daemon=True).start()
        elif self._player.fresh(time.monotonic()):
            ok, msg = self._start()
            self.get_logger().info(f"autoplay: {msg}")
            if ok:
                self.cfg.autoplay = False

    def _load(self) -> None:
        """Read the episode: before spinning, or on a thread.

        A read inside a callback of this single-threaded executor would hold back /arm/eef_pose, and
        playback would start on stale feedback.
        """
        if not self._loading.acquire(blocking=False):
            return  # a load is already running
        try:
            self._loaded, self._load_error = load_episode(self.cfg.root, self.cfg.episode), ""
        except (OSError, ValueError, KeyError) as exc:
            self._load_error = f"cannot load episode {self.cfg.episode} from '{self.cfg.root}': {exc}"
        finally:
            self._loading.release()

    def _start(self) -> tuple[bool, str]:
        episode = self._loaded
        if episode is None:
            return False, self._load_error or f"episode {self.cfg.episode} is still loading"
        return self._player.start(episode, time.monotonic())

    async def _srv_play(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if self._loaded is None:
            await run_in_thread(self._load)
        res.success, res.message = self._start()
        return res

    def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        result = self._player.stop()
        if result is None:
            res.success, res.message = False, f"not playing (state {self._player.state})"
            return res
        self._report(result)
        res.success, res.message = True, "stopped; the arm holds its last target"
        return res

    # -- playback -----------------------------------------------------------------------------
    def _play_loop(self) -> None:
        period = 1.0 / self.cfg.rate_hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            step = self._player.tick(time.monotonic())
            for arm, target in step.targets.items():
                self._publish(arm, target)
            if step.result is not None:
                self._report(step.result)
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -period:  # fell behind (machine stall): resynchronise, don't burst
                next_t, delay = time.monotonic(), 0.0
            self._stop.wait(max(0.0, delay))

    def _publish(self, arm: str | None, target: Target) -> None:
        stamp = ns_to_stamp(self.get_clock().now().nanoseconds)
        pose = target.pose
        msg = PoseStamped()
        msg.header.stamp, msg.header.frame_id = stamp, self.cfg.frame_id
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in pose[:3])
        w, x, y, z = (float(v) for v in pose[3:])
        msg.pose.orientation.w, msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z = w, x, y, z
        pub_pose, pub_grip = self._pubs[arm]
        pub_pose.publish(msg)
        js = JointState(name=["gripper"], position=[float(target.gripper)])
        js.header.stamp = stamp
        pub_grip.publish(js)

    def _report(self, result: dict) -> None:
        self._pub_result.publish(String(data=json.dumps(result)))
        log = self.get_logger().warning if result["state"] == "aborted" else self.get_logger().info
        log(f"replay {result['state']}: {json.dumps(result)}")

    def on_shutdown(self) -> None:
        """Stop playback and report the result so far."""
        self._stop.set()
        self._play_thread.join(2.0)
        result = self._player.stop("shutdown")
        if result is not None:
            self._report(result)


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-replay``)."""
    sys.exit(run_node(ReplayNode, args))


if __name__ == "__main__":
    main()

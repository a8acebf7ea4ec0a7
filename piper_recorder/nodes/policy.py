"""policy: a trained policy drives /arm/target_pose and /arm/target_gripper, safely, through the graph.

A thin adapter over ``piper_recorder.policy`` (no torch here: servers run out of process). Camera and arm
messages feed the ``ObservationBuilder`` with their capture stamps; a control thread at ``control_rate_hz``
(not a ROS timer, which would wait behind image callbacks) asks the ``PolicyRuntime`` for the next target.
Takeover: the operator's grip on ``/quest/<hand>/joy`` or teleop reporting ``engaged`` stops the policy's
targets at once; only ``~/resume`` hands the arm back, refused while the grip is held (``policy.operator``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from functools import partial
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState, Joy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.assembly.messages import image_to_numpy, joint_positions, pose, stamp_ns
from piper_recorder.names import (
    ARM_PROVENANCE,
    EEF_POSE,
    JOINT_STATES,
    POLICY_ACTOR,
    POLICY_NODE,
    POLICY_PROVENANCE,
    POLICY_SERVICES,
    QUEST_JOY_PATTERN,
    STATUS,
    TARGET_GRIPPER,
    TARGET_POSE,
    TELEOP_STATUS,
    camera_topic,
    quest_topic,
)
from piper_recorder.nodes.plumbing.callbacks import message_callback
from piper_recorder.nodes.plumbing.executors import run_in_thread
from piper_recorder.nodes.plumbing.fixed_rate_loop import FixedRateLoop
from piper_recorder.nodes.plumbing.parameters import ParameterError, declare_config
from piper_recorder.nodes.plumbing.qos import live_image_qos
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.plumbing.stamps import now_ns, ns_to_stamp
from piper_recorder.policy.config import PolicyConfig
from piper_recorder.policy.observation import MetaError, ObservationBuilder, TrainingMeta
from piper_recorder.policy.operator import engaged_by_arm
from piper_recorder.policy.runtime import PolicyRuntime
from piper_recorder.policy.safety import Target
from piper_recorder.policy.spec import make_backend
from piper_recorder.process.delivery import ImageCounts
from piper_recorder.teleop.limits import LimitsConfig

STATUS_HZ = 2.0
ACTOR_POLL_HZ = 50.0  # a change of the acting source reaches /policy/actor within 20 ms


def training_root(cfg: PolicyConfig) -> str:
    """``root``, or the replayed root of a ``replay:<root>:<episode>`` spec."""
    if cfg.root:
        return cfg.root
    if cfg.policy.startswith("replay:"):
        return cfg.policy[len("replay:") :].rpartition(":")[0]
    raise ParameterError("policy: parameter 'root' (the training root) is required")


class PolicyNode(Node):
    """The policy's node: observations in, targets out on a control thread, the four Trigger services."""

    def __init__(self) -> None:
        super().__init__(POLICY_NODE)
        cfg = declare_config(self, PolicyConfig)
        cfg.limits = declare_config(self, LimitsConfig, "limits.")
        try:
            cfg.validate()
            self.root = training_root(cfg)
            meta = TrainingMeta.load(self.root)
            backend = make_backend(cfg.policy, timeout_s=cfg.timeout_s, root=self.root)
        except (ValueError, MetaError, OSError) as exc:
            raise ParameterError(f"policy: {exc}") from exc
        self.cfg = cfg
        task = cfg.task or (meta.tasks[0] if meta.tasks else "")
        self.builder = ObservationBuilder(meta, task, cfg.fps, cfg.lateness_s)
        self.runtime = PolicyRuntime(cfg, self.builder, backend, log=self._warn)
        self._lock = threading.Lock()
        # each arm's /arm/provenance JSON (key None for one arm)
        self._arm_provenance: dict[str | None, dict[str, Any]] = {}
        self.arms = cfg.arm_names()
        self._joint_cache: dict[tuple[str, ...], list[int]] = {}
        self._actor = ""
        self._state = ""

        g = ReentrantCallbackGroup()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        images = live_image_qos()
        self.pub_targets = {
            arm: (
                self.create_publisher(PoseStamped, topic, reliable),
                self.create_publisher(JointState, cfg.arm_topics(TARGET_GRIPPER)[arm], reliable),
            )
            for arm, topic in cfg.arm_topics(TARGET_POSE).items()
        }
        self.pub_status = self.create_publisher(String, STATUS, reliable)
        self.pub_provenance = self.create_publisher(String, POLICY_PROVENANCE, latched)
        self.pub_actor = self.create_publisher(String, POLICY_ACTOR, latched)
        sensor = qos_profile_sensor_data
        for arm, topic in cfg.arm_topics(JOINT_STATES).items():
            self.create_subscription(JointState, topic, partial(self._on_joints, arm), sensor, callback_group=g)
        for arm, topic in cfg.arm_topics(EEF_POSE).items():
            self.create_subscription(PoseStamped, topic, partial(self._on_eef, arm), sensor, callback_group=g)
        for arm, topic in cfg.arm_topics(ARM_PROVENANCE).items():
            self.create_subscription(String, topic, partial(self._on_arm_provenance, arm), latched, callback_group=g)
        # frames received per camera against the observation grid's rate (delivery health, piper_recorder.process.delivery)
        self.image_counts = ImageCounts(list(meta.cameras))
        self.input_fps = cfg.fps or meta.fps
        for i, cam in enumerate(meta.cameras):
            self.create_subscription(
                Image,
                camera_topic(cfg.image_topic_pattern, cam),
                message_callback(lambda m, c=cam, i=i: self._on_image(c, i, m)),
                images,
                callback_group=g,
            )
        for hand in self.arms or (cfg.hand,):  # two arms: each hand takes over the arm of its name
            joy = partial(self._on_joy, hand if self.arms else None)
            self.create_subscription(Joy, quest_topic(QUEST_JOY_PATTERN, hand), joy, sensor, callback_group=g)
        self.create_subscription(String, TELEOP_STATUS, self._on_teleop_status, reliable, callback_group=g)
        for name, fn in zip(
            POLICY_SERVICES, (self._srv_start, self._srv_stop, self._srv_pause, self._srv_resume), strict=True
        ):
            self.create_service(Trigger, f"~/{name}", fn, callback_group=g)
        self.create_timer(1.0 / STATUS_HZ, self._publish_status, callback_group=g)
        # The latched topics are published on the executor thread only (the control thread publishes just
        # the targets, as teleop does): publishing them from the control thread can crash the EventsExecutor.
        self._actor_pub = ""
        self.create_timer(1.0 / ACTOR_POLL_HZ, self._publish_actor, callback_group=g)
        self._actor = "none"
        self._loop = FixedRateLoop(cfg.period_s, self._tick, "policy-control", self._tick_failed)
        self.get_logger().info(
            f"policy: {cfg.policy} trained on {self.root} ({meta.fps:g} fps, cameras "
            f"{sorted(meta.cameras)}), task '{task}'; call ~/start"
        )

    def _warn(self, message: str) -> None:
        self.get_logger().warning(message)

    # ---- inputs -------------------------------------------------------------------------------
    def _on_joints(self, arm: str | None, msg: JointState) -> None:
        pos = joint_positions(msg, self._joint_cache)
        if pos is not None:
            with self._lock:
                self.builder.add_joint_state(stamp_ns(msg), pos, arm)

    def _on_eef(self, arm: str | None, msg: PoseStamped) -> None:
        p, q = pose(msg)
        with self._lock:
            self.builder.add_eef_pose(stamp_ns(msg), p, q, arm)

    def _on_image(self, cam: str, i: int, msg: Image) -> None:
        self.image_counts.on_image(i, msg.header)  # a counter bump per frame (the executor's one thread)
        try:
            rgb = image_to_numpy(msg)
        except ValueError:
            return
        with self._lock:
            self.builder.add_frame(cam, stamp_ns(msg), rgb)

    def _on_arm_provenance(self, arm: str | None, msg: String) -> None:
        try:
            prov = json.loads(msg.data)
        except ValueError:
            return
        with self._lock:
            if isinstance(prov, dict):
                self._arm_provenance[arm] = prov
            else:
                self._arm_provenance.pop(arm, None)

    def _on_joy(self, hand: str | None, msg: Joy) -> None:
        """Feed every joy message of the hand to the operator gate (grip held or open), not only grips.

        ~/start and ~/resume are refused while the headset says the grip is held.
        """
        if len(msg.axes) < 2:
            return
        with self._lock:
            changed = self.runtime.on_joy(now_ns(self), float(msg.axes[1]), hand)
            why = self.runtime.reason
        if changed:
            self._took_over(why)

    def _on_teleop_status(self, msg: String) -> None:
        try:
            doc = json.loads(msg.data)
        except ValueError:
            return
        if not isinstance(doc, dict):
            return
        changed = False
        with self._lock:
            for arm, engaged in engaged_by_arm(doc, self.arms).items():
                changed = self.runtime.on_teleop_status(now_ns(self), engaged, arm) or changed
            why = self.runtime.reason
        if changed:
            self._took_over(why)

    def _took_over(self, why: str) -> None:
        self._actor = "operator"
        self._publish_actor()
        self.get_logger().warning(f"takeover: {why}; the policy resumes only on ~/resume")

    # ---- control loop -------------------------------------------------------------------------
    def _tick_failed(self, exc: Exception) -> None:
        """Pause and hold; never let the loop die silently."""
        self.get_logger().error(f"tick failed: {type(exc).__name__}: {exc}")
        with self._lock:
            self.runtime.pause(f"internal error: {type(exc).__name__}: {exc}")

    def _tick(self) -> None:
        # The target is published under the lock the joy callback takes: a grip that arrives after the
        # tick was computed cannot see a policy target published after it.
        with self._lock:
            tick = self.runtime.tick(now_ns(self))
            state, reason = self.runtime.state, self.runtime.reason
            for arm, target in tick.targets.items():
                self._publish_target(arm, target)
        if state != self._state:
            self._state = state
            self.get_logger().info(f"state: {state}" + (f" ({reason})" if reason else ""))
        self._actor = tick.actor

    def _publish_target(self, arm: str | None, t: Target) -> None:
        if not t.finite():  # the runtime guarantees it; this is the last gate before the arm
            return
        stamp = ns_to_stamp(now_ns(self))
        msg = PoseStamped()
        msg.header.stamp, msg.header.frame_id = stamp, self.cfg.arm_frame
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in t.p)
        (msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z, msg.pose.orientation.w) = (
            float(v) for v in t.q
        )
        pub_target, pub_gripper = self.pub_targets[arm]
        pub_target.publish(msg)
        grip = JointState()
        grip.header.stamp = stamp
        grip.name, grip.position = ["gripper"], [float(t.gripper)]
        pub_gripper.publish(grip)

    def _publish_actor(self) -> None:
        actor = self._actor
        if actor != self._actor_pub:
            self._actor_pub = actor
            self.pub_actor.publish(String(data=actor))

    def _provenance(self, active: bool) -> str:
        """May ask the server for its hash (blocking): call it off the executor thread."""
        prov = {**self.runtime.provenance(), "active": active, "node": self.get_fully_qualified_name()}
        return json.dumps(prov, default=str)

    def _publish_status(self) -> None:
        with self._lock:
            st = {
                **self.runtime.status(),
                "actor": self._actor,
                "policy": self.cfg.policy,
                "input_age_s": self.runtime.ages(now_ns(self)),
                "images_received": self.image_counts.snapshot(time.monotonic()),
                "images_required": {"min_fps": self.input_fps},
            }
        self.pub_status.publish(String(data=json.dumps(st, default=str)))

    # ---- services ---------------------------------------------------------------------------
    def _reload_meta(self) -> str | None:
        """Re-read the training root (its provenance may have changed); refuse another camera set or fps."""
        try:
            meta = TrainingMeta.load(self.root)
        except MetaError as exc:
            return str(exc)
        old = self.builder.meta
        if meta.cameras != old.cameras or meta.fps != old.fps or meta.layout != old.layout:
            return (
                f"the training root changed (cameras {old.cameras} -> {meta.cameras}, fps {old.fps} -> "
                f"{meta.fps}, arms {old.arms} -> {meta.arms}); restart the node"
            )
        self.builder.meta = meta
        return None

    async def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        def start() -> tuple[bool, str, str]:
            with self._lock:
                problem = self._reload_meta()
                if problem:
                    return False, f"refused: {problem}", ""
                prov = dict(self._arm_provenance)
                arm_prov = {a: p for a, p in prov.items() if a is not None} if self.arms else prov.get(None)
                ok, msg = self.runtime.start(now_ns(self), arm_prov)
            return ok, msg, self._provenance(True) if ok else ""  # outside the lock

        ok, msg, prov = await run_in_thread(start)
        if ok:
            self.pub_provenance.publish(String(data=prov))
        return self._answer(res, ok, msg)

    async def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        with self._lock:
            ok, msg = self.runtime.stop("stopped by ~/stop")
        if ok:
            self.pub_provenance.publish(String(data=await run_in_thread(lambda: self._provenance(False))))
        return self._answer(res, ok, msg)

    def _srv_pause(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        with self._lock:
            ok, msg = self.runtime.pause("paused by ~/pause")
        return self._answer(res, ok, msg)

    def _srv_resume(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        with self._lock:
            ok, msg = self.runtime.resume(now_ns(self))
        return self._answer(res, ok, msg)

    def _answer(self, res: Trigger.Response, ok: bool, msg: str) -> Trigger.Response:
        res.success, res.message = bool(ok), msg
        # one call site per severity: rclpy refuses a call site whose severity changes
        if ok:
            self.get_logger().info(msg)
        else:
            self.get_logger().warning(msg)
        return res

    def on_shutdown(self) -> None:
        """Stop the control thread and the runtime, close the backend."""
        self._loop.stop()
        with self._lock:
            self.runtime.stop("shutdown")
        self.runtime.backend.close()


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-policy``)."""
    sys.exit(run_node(PolicyNode, args))

"""Shared rclpy shell of both recorders: subscriptions, the four Trigger services, status, events, provenance.

Threads (why encoding never blocks a message callback):
- ``run_node``'s EventsExecutor (one thread, the cheapest per message: a recorder takes ~1,000
  messages/s, which rclpy's MultiThreadedExecutor could not keep up with, see
  bench/executor_overhead.py). A subscription callback only wraps the message buffer with numpy (no
  copy for rgb8/16UC1) and inserts it into the assembler under a short lock. Services are coroutines
  that run their transition (which may wait for the lateness allowance and a save) on a worker thread
  and await it, so the executor keeps taking messages meanwhile; the controller serialises transitions.
- A tick thread sleeps until the next grid tick plus the lateness allowance (computed from the grid,
  not a periodic timer, so late wake-ups never shift rows) and calls ``controller.tick(now)``.
- One writer thread (``WriterWorker``) owns every writer call; the writers encode in their own threads.
Images: QoS reliable, keep-last 10 by default (``image_reliability``: reliable | best_effort), so a
briefly busy process loses no frames; DDS absorbs short stalls in its history.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.assembly.messages import gripper_width, joint_positions, pose, stamp_ns
from piper_recorder.recording.config import RecorderConfig, session_record, task_problem
from piper_recorder.recording.controller import Answer, EpisodeController
from piper_recorder.recording.targets import EpisodeTarget

from piper_recorder.errors import INPUT_ERRORS, describe

from .common import ParameterError, declare_config, now_ns, run_in_thread


class RecorderNode(Node):
    """Base node; subclasses name their config class, build the writer target and subscribe cameras."""

    config_class: type[RecorderConfig]

    def make_target(self) -> EpisodeTarget:
        raise NotImplementedError

    def subscribe_cameras(self) -> None:
        raise NotImplementedError

    def __init__(self, name: str):
        super().__init__(name)
        self.cfg = cfg = declare_config(self, self.config_class)
        try:
            target = self.make_target()
        except INPUT_ERRORS as exc:   # unwritable path, another writer holds it, a damaged root, ...
            raise ParameterError(f"{name}: cannot open the dataset: {describe(exc)}") from exc
        self._arm_provenance: dict[str, Any] | None = None
        self._hello: dict[str, Any] | None = None
        self._prov_event = threading.Event()
        self._prov_waited = False
        self._joint_cache: dict[tuple[str, ...], list[int]] = {}
        self.frames_rejected: dict[str, int] = {}
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.image_qos = QoSProfile(
            depth=10, history=HistoryPolicy.KEEP_LAST,
            reliability=ReliabilityPolicy.RELIABLE if cfg.image_reliability == "reliable"
            else ReliabilityPolicy.BEST_EFFORT)
        self.pub_status = self.create_publisher(String, "~/status", 10)
        self.pub_events = self.create_publisher(String, "/episode_events", reliable)
        self.controller = EpisodeController(
            target, cfg.assembly(), recorder=self.get_name(), max_episode_s=cfg.max_episode_s,
            publish_event=self._publish_event, session_record=self._session_record,
            on_change=self._publish_status, log=lambda m: self.get_logger().info(m))
        c = self.controller
        arm_qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(JointState, cfg.joint_states_topic, self._on_joints, arm_qos)
        self.create_subscription(PoseStamped, cfg.eef_topic,
                                 lambda m: c.add_eef_pose(stamp_ns(m), *pose(m)), arm_qos)
        self.create_subscription(PoseStamped, cfg.commanded_pose_topic,
                                 lambda m: c.add_commanded_pose(stamp_ns(m), *pose(m)), arm_qos)
        self.create_subscription(JointState, cfg.commanded_gripper_topic, self._on_cmd_gripper, arm_qos)
        self.create_subscription(String, cfg.provenance_topic, self._on_provenance, latched)
        self.create_subscription(String, cfg.hello_topic, self._on_hello, latched)
        self._policy: dict[str, Any] | None = None   # the running policy (policy node), named in the provenance
        self.create_subscription(String, "/policy/provenance", self._on_policy, latched)
        for srv, fn in (("start_episode", self._srv_start), ("stop_episode", self._srv_stop),
                        ("discard_episode", self._srv_discard), ("delete_last_episode", self._srv_delete)):
            self.create_service(Trigger, f"~/{srv}", fn)
        self.subscribe_cameras()
        self.create_timer(1.0 / cfg.status_hz, self._publish_status)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="tick", daemon=True)
        self._ticker.start()
        self._shutdown_done = False

    # ---- inputs -----------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        pos = joint_positions(msg, self._joint_cache)
        if pos is not None:
            self.controller.add_joint_state(stamp_ns(msg), pos)

    def _on_cmd_gripper(self, msg: JointState) -> None:
        width = gripper_width(msg)
        if width is not None:
            self.controller.add_commanded_gripper(stamp_ns(msg), width)

    def _on_provenance(self, msg: String) -> None:
        try:
            self._arm_provenance = json.loads(msg.data)
        except ValueError:
            self.get_logger().warning(f"ignoring non-JSON {self.cfg.provenance_topic}: {msg.data[:80]!r}")
            return
        self._prov_event.set()

    def _on_hello(self, msg: String) -> None:
        try:
            self._hello = json.loads(msg.data)
        except ValueError:
            self._hello = {"raw": msg.data}

    def _on_policy(self, msg: String) -> None:
        try:
            prov = json.loads(msg.data)
        except ValueError:
            return
        self._policy = prov if isinstance(prov, dict) and prov.get("active") else None

    def check_image(self, camera: str, img: np.ndarray, depth: bool = False) -> bool:
        """Reject (count, warn once) frames whose size does not match the configured camera."""
        h, w = self.cfg.camera_size(camera)
        if img.shape[:2] == (h, w) and (depth or img.ndim == 3):
            return True
        n = self.frames_rejected.get(camera, 0) + 1
        self.frames_rejected[camera] = n
        if n == 1:
            self.get_logger().error(f"{camera}: got {img.shape} frames, configured {h}x{w}; dropping them")
        return False

    # ---- provenance -------------------------------------------------------------------------
    def _session_record(self) -> dict[str, Any]:
        """The shared session record (recording.config), once /arm/provenance arrived or the wait ran out."""
        if not self._prov_event.wait(0.0 if self._prov_waited else self.cfg.provenance_wait_s):
            self._prov_waited = True   # wait once per process, not at every start
            self.get_logger().warning(f"no {self.cfg.provenance_topic} within {self.cfg.provenance_wait_s} s; "
                                      "recording control/arm provenance as 'unknown'")
        record = session_record(self.cfg, self.get_name(), self._arm_provenance, self._hello)
        if self._policy is not None:   # a rollout: the episode names the policy that drove the arm
            record["policy"] = self._policy
        return record

    # ---- services ---------------------------------------------------------------------------
    def _answer(self, response: Trigger.Response, ans: Any) -> Trigger.Response:
        response.success, response.message = bool(ans.ok), ans.message
        if not ans.ok:
            self.get_logger().warning(ans.message)
        return response

    async def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        task = self.get_parameter("task").value
        problem = task_problem(task)
        if problem:
            return self._answer(res, Answer(False, f"parameter {problem}; set it first: ros2 param set "
                                                   f"{self.get_fully_qualified_name()} task '...'"))
        return self._answer(res, await run_in_thread(lambda: self.controller.start(task, lambda: now_ns(self))))

    async def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        end = now_ns(self)   # the episode ends when the request arrives, not when the worker runs
        return self._answer(res, await run_in_thread(lambda: self.controller.stop(end)))

    async def _srv_discard(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        return self._answer(res, await run_in_thread(self.controller.discard))

    async def _srv_delete(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        return self._answer(res, await run_in_thread(self.controller.delete_last))

    # ---- status / events --------------------------------------------------------------------
    def _publish_event(self, event: dict[str, Any]) -> None:
        self.pub_events.publish(String(data=json.dumps(event)))

    def _publish_status(self) -> None:
        st = self.controller.status(now_ns(self))
        if self.frames_rejected:
            st["frames_wrong_size"] = dict(self.frames_rejected)
        try:
            self.pub_status.publish(String(data=json.dumps(st, default=str)))
        except Exception:  # noqa: BLE001 - publisher gone during shutdown
            pass

    # ---- tick thread / shutdown -------------------------------------------------------------
    def _tick_loop(self) -> None:
        c = self.controller
        while not self._stop.is_set():
            due = c.next_tick_ns()
            if due is None:
                self._stop.wait(0.02)
                continue
            delay = (due - time.time_ns()) / 1e9
            if delay > 0:
                self._stop.wait(min(delay, 0.05))
                continue
            try:
                c.tick(now_ns(self))
            except Exception as exc:  # noqa: BLE001 - keep ticking; the save reports writer errors
                self.get_logger().error(f"tick failed: {type(exc).__name__}: {exc}")
                self._stop.wait(0.01)

    def on_shutdown(self) -> None:
        if self._shutdown_done:
            return
        self._shutdown_done = True
        self._stop.set()
        self._ticker.join(2.0)
        ans = self.controller.shutdown(save=self.cfg.on_shutdown == "save")
        self.get_logger().info(f"shutdown: {ans.message}")

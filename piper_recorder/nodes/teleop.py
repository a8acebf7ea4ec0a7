"""teleop: Quest controller -> /arm/target_pose and /arm/target_gripper, and buttons -> recorder services.

A thin adapter around ``piper_recorder.teleop.mapper.TeleopCore``: every message is fed to the core
with its arrival time (monotonic), and a dedicated control thread at ``control_rate_hz`` asks the
core for the next target. (Not a ROS timer: in a shared Python executor a 100 Hz timer starved
the subscriptions for 250 ms at a time, which tripped the stale-stream watchdog; the executor is
single-threaded because the callbacks only store data under one lock.) Targets are published only
while the clutch is engaged; when it releases (grip open, menu, stale headset stream, lost arm
feedback, arm fault) publishing stops and the arm holds.

Parameters: the fields of ``TeleopConfig`` (``hand``, ``control_rate_hz``, ``pos_scale``, ...), its
sub-configs under ``clutch.``, ``frame.``, ``filter.``, ``limits.``, and ``TeleopNodeConfig`` below.
Buttons call ``/<recorder>/{start,stop,discard,delete_last}_episode`` asynchronously on every
recorder in ``recorders``; ``/episode_events`` keeps the start/stop toggle in step with the
recorders. ``/teleop/status`` (String JSON, 1 Hz) carries the counters.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState, Joy as JoyMsg
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.nodes.common import declare_config, now_ns, ns_to_stamp, run_node
from piper_recorder.teleop.clutch import ClutchConfig, ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.frames import FrameConfig
from piper_recorder.teleop.limits import LimitsConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig, TeleopCore


@dataclass
class TeleopNodeConfig:
    recorders: list[str] = field(default_factory=lambda: ["lerobot_recorder", "rgbd_recorder"])
    haptic_amp: float = 0.6
    haptic_ms: int = 40
    fault_on_arm_error: bool = True   # an ERROR level in /arm/status refuses / releases the clutch
    arm_frame: str = "arm_base"

    def validate(self) -> None:
        if not 0.0 <= self.haptic_amp <= 1.0 or not 0 <= self.haptic_ms <= 2000:
            raise ValueError("haptic_amp must be in [0, 1] and haptic_ms in [0, 2000]")
        if any(not r or "/" in r for r in self.recorders):
            raise ValueError(f"recorders must be plain node names, got {self.recorders}")


def _pose_arrays(msg: PoseStamped) -> tuple[list[float], list[float]]:
    p, q = msg.pose.position, msg.pose.orientation
    return [p.x, p.y, p.z], [q.x, q.y, q.z, q.w]


def _joy(msg: JoyMsg) -> Joy | None:
    a, b = list(msg.axes), list(msg.buttons)
    if len(a) < 2 or len(b) < 4:
        return None
    return Joy(trigger=float(a[0]), squeeze=float(a[1]), primary=bool(b[0]), secondary=bool(b[1]),
               menu=bool(b[3]))


class TeleopNode(Node):
    def __init__(self) -> None:
        super().__init__("teleop")
        cfg = declare_config(self, TeleopConfig)
        cfg.clutch = declare_config(self, ClutchConfig, "clutch.")
        cfg.frame = declare_config(self, FrameConfig, "frame.")
        cfg.filter = declare_config(self, FilterConfig, "filter.")
        cfg.limits = declare_config(self, LimitsConfig, "limits.")
        self.ncfg = declare_config(self, TeleopNodeConfig)
        self.core = TeleopCore(cfg)  # validates the assembled config
        self.cfg = cfg

        self._lock = threading.Lock()  # the core is single-threaded: callbacks and the control thread share it
        g, sensor = ReentrantCallbackGroup(), qos_profile_sensor_data
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_target = self.create_publisher(PoseStamped, "/arm/target_pose", reliable)
        self.pub_gripper = self.create_publisher(JointState, "/arm/target_gripper", reliable)
        self.pub_haptic = self.create_publisher(String, "/quest/haptic", reliable)
        self.pub_status = self.create_publisher(String, "~/status", reliable)

        self.create_subscription(PoseStamped, f"/quest/{cfg.hand}/pose", self._on_hand_pose, sensor,
                                 callback_group=g)
        for hand in ("left", "right"):
            self.create_subscription(JoyMsg, f"/quest/{hand}/joy", lambda m, h=hand: self._on_joy(h, m), sensor,
                                     callback_group=g)
        self.create_subscription(PoseStamped, "/arm/eef_pose", self._on_arm_pose, sensor, callback_group=g)
        self.create_subscription(JointState, "/arm/joint_states", self._on_joints, sensor, callback_group=g)
        self.create_subscription(DiagnosticArray, "/arm/status", self._on_arm_status, reliable, callback_group=g)
        self.create_subscription(String, "/episode_events", self._on_episode_event, reliable, callback_group=g)

        services = ReentrantCallbackGroup()
        self.clients_by_action = {
            action: [self.create_client(Trigger, f"/{rec}/{action.value}", callback_group=services)
                     for rec in self.ncfg.recorders]
            for action in Action
        }
        self.create_timer(1.0, self._publish_status, callback_group=g)
        self._last_refusal_log = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._control_loop, name="teleop-control", daemon=True)
        self._thread.start()
        self.get_logger().info(f"teleop: hand={cfg.hand} rate={cfg.control_rate_hz} Hz "
                               f"recorders={self.ncfg.recorders}")

    # ---- inputs -------------------------------------------------------------------------------
    def _on_hand_pose(self, msg: PoseStamped) -> None:
        p, q = _pose_arrays(msg)
        with self._lock:
            self.core.on_hand_pose(time.monotonic(), p, q)

    def _on_joy(self, hand: str, msg: JoyMsg) -> None:
        joy = _joy(msg)
        with self._lock:
            if joy is None:
                self.core.counters.rejected_inputs += 1
                return
            self.core.on_joy(time.monotonic(), hand, joy)

    def _on_arm_pose(self, msg: PoseStamped) -> None:
        p, q = _pose_arrays(msg)
        with self._lock:
            self.core.on_arm_pose(time.monotonic(), p, q)

    def _on_joints(self, msg: JointState) -> None:
        positions = list(msg.position)
        with self._lock:
            self.core.on_joint_states(time.monotonic(), positions)

    def _on_arm_status(self, msg: DiagnosticArray) -> None:
        if not self.ncfg.fault_on_arm_error:
            return
        errors = [f"{s.name}: {s.message}" for s in msg.status if s.level == DiagnosticStatus.ERROR]
        with self._lock:
            self.core.on_arm_fault("; ".join(errors) if errors else None)

    def _on_episode_event(self, msg: String) -> None:
        try:
            ev = json.loads(msg.data)
            kind = ev.get("event")
        except (ValueError, AttributeError):
            return
        if kind in ("started", "saved", "save_failed", "discarded"):   # save_failed: not recording
            with self._lock:
                self.core.on_recording(kind == "started")

    # ---- control loop -------------------------------------------------------------------------
    def _control_loop(self) -> None:
        period = self.cfg.period
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                if self._stop.wait(delay):
                    break
            elif delay < -period:
                next_t = time.monotonic()  # fell behind (machine stalled): resync, never burst
            self._tick()

    def on_shutdown(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _tick(self) -> None:
        with self._lock:
            res = self.core.tick(time.monotonic())
        for action in res.actions:
            self._call_recorders(action)
        if res.clutch is ClutchEvent.ENGAGED:
            self.get_logger().info("clutch engaged")
            self.pub_haptic.publish(String(data=json.dumps(
                {"hand": self.cfg.hand, "amp": self.ncfg.haptic_amp, "ms": self.ncfg.haptic_ms})))
        elif res.clutch in (ClutchEvent.RELEASED, ClutchEvent.FORCED_RELEASE):
            self.get_logger().info(f"clutch released ({res.reason or 'grip opened'})")
        elif res.clutch is ClutchEvent.REFUSED:
            now = time.monotonic()
            if now - self._last_refusal_log > 2.0:
                self._last_refusal_log = now
                self.get_logger().warning(f"clutch refused: {res.reason}")
        if res.target is None:
            return
        stamp = ns_to_stamp(now_ns(self))
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp, self.ncfg.arm_frame
        p, q = res.target.p, res.target.q
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = (float(v) for v in p)
        (pose.pose.orientation.x, pose.pose.orientation.y, pose.pose.orientation.z,
         pose.pose.orientation.w) = (float(v) for v in q)
        self.pub_target.publish(pose)
        grip = JointState()
        grip.header.stamp = stamp
        grip.name, grip.position = ["gripper"], [float(res.gripper)]
        self.pub_gripper.publish(grip)

    def _call_recorders(self, action: Action) -> None:
        self.get_logger().info(f"button: {action.value} on {self.ncfg.recorders}")
        for rec, client in zip(self.ncfg.recorders, self.clients_by_action[action]):
            if not client.service_is_ready():
                self.get_logger().warning(f"{rec}/{action.value}: service not available")
                continue
            future = client.call_async(Trigger.Request())
            future.add_done_callback(lambda f, r=rec, a=action: self._on_reply(r, a, f))

    def _on_reply(self, rec: str, action: Action, future) -> None:
        try:
            reply = future.result()
        except Exception as exc:  # noqa: BLE001 - a failed call is reported, never raised into the executor
            self.get_logger().error(f"{rec}/{action.value} failed: {exc}")
            return
        log = self.get_logger().info if reply.success else self.get_logger().warning
        log(f"{rec}/{action.value}: {'ok' if reply.success else 'refused'} {reply.message}")

    def _publish_status(self) -> None:
        with self._lock:
            status = {"engaged": self.core.engaged, "recording": self.core.recording, **asdict(self.core.counters)}
        self.pub_status.publish(String(data=json.dumps(status)))


def main(args=None) -> None:
    sys.exit(run_node(TeleopNode, args))  # callbacks only store data; the control loop has its own thread

"""teleop: Quest controller -> /arm/target_pose and /arm/target_gripper, and buttons -> recorder services.

A thin adapter around ``teleop.session.TeleopSession`` (the session's coordination, without ROS): the node
turns messages into plain values, calls it, publishes what it returns, and owns the clients, timers and the
control thread.
- Headset poses and joys reach the core with their capture stamp moved onto the monotonic clock
  (``capture_time.HostToMono``), so a late-delivered old pose counts as old and the stamp is their order;
  arm feedback carries its arrival time.
- A control thread at ``control_rate_hz`` asks the core for the next target (a ROS timer in a shared
  executor would starve the subscriptions and trip the stale-stream watchdog). Targets are published only
  while the clutch is engaged; on a release publishing stops and the arm holds.
- Buttons call every recorder in ``recorders`` through ``teleop.recorder_calls.RecorderCalls``; a stop goes
  to ``stop_episode_at`` with the press's capture stamp, so the episode ends when the operator pressed.
  Service clients are created, called and destroyed only on the executor thread.
- ``input: spacemouse`` drives the same core from a SpaceMouse (``teleop.spacemouse``). It is a mode of
  this node, not a node of its own, because the interlocks, limits, recorder calls and status live here, and
  a node publishing ``/quest/*`` would pass for a headset in the recorders' provenance.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from diagnostic_msgs.srv import AddDiagnostics
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.client import Client
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from sensor_msgs.msg import JointState
from sensor_msgs.msg import Joy as JoyMsg
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.assembly.messages import stamp_to_ns
from piper_recorder.cdr import encode as cdr_encode
from piper_recorder.names import (
    ARM_STATUS,
    EEF_POSE,
    EPISODE_EVENTS,
    GRIPPER_JOINTS,
    JOINT_STATES,
    LABEL_EPISODE,
    QUEST_HANDS,
    QUEST_HAPTIC,
    QUEST_HELLO,
    QUEST_JOY_PATTERN,
    QUEST_POSE_PATTERN,
    STATUS,
    STOP_EPISODE_AT,
    TARGET_GRIPPER,
    TARGET_POSE,
    TELEOP_NODE,
    arm_topic,
    node_topic,
    quest_topic,
)
from piper_recorder.nodes.plumbing.callbacks import message_callback, timer_callback
from piper_recorder.nodes.plumbing.fixed_rate_loop import FixedRateLoop
from piper_recorder.nodes.plumbing.parameters import declare_config
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs
from piper_recorder.nodes.plumbing.qos import stream_qos
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.plumbing.stamps import now_ns
from piper_recorder.teleop.arm_engine import ArmTick
from piper_recorder.teleop.bimanual import BASE_PREFIX, BimanualConfig
from piper_recorder.teleop.capture_time import HostToMono
from piper_recorder.teleop.clutch import ClutchConfig, ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.frames import ArmBaseConfig, FrameConfig
from piper_recorder.teleop.haptics import HapticConfig
from piper_recorder.teleop.limits import LimitsConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig
from piper_recorder.teleop.recorder_calls import Outcome, Report
from piper_recorder.teleop.session import TeleopNodeConfig, TeleopSession
from piper_recorder.teleop.spacemouse.input import SpaceMouseConfig, SpaceMouseInput
from piper_recorder.teleop.spacemouse.reader import HidrawReader

__all__ = ["HAPTIC_PATTERNS", "TeleopNode", "TeleopNodeConfig", "main"]

# The default alarm patterns on /quest/haptic, (delay s, amp, ms) per pulse (configurable: ``haptics.*``);
# the engage pulse is one short ``haptic_amp``/``haptic_ms`` buzz, so these are unmistakably different.
HAPTIC_PATTERNS: dict[str, tuple[tuple[float, float, int], ...]] = {
    "timeout": tuple(HapticConfig().pattern("timeout")),  # a recorder did not answer: retrying
    "failed": tuple(HapticConfig().pattern("refused")),  # the press did not take effect
}
SOURCE_CHANGE_REASON = "headset input source changed (a new page or connection): grip again"
SERVICE_POLL_HZ = 50.0  # presses wait <= 20 ms for the executor thread (EventsExecutor has no guard conditions)


def _pose_lists(msg: PoseStamped) -> tuple[list[float], list[float]]:
    p, q = msg.pose.position, msg.pose.orientation
    return [p.x, p.y, p.z], [q.x, q.y, q.z, q.w]


def _joy(msg: JoyMsg) -> Joy | None:
    a, b = list(msg.axes), list(msg.buttons)
    if len(a) < 2 or len(b) < 4:
        return None
    return Joy(
        trigger=float(a[0]),
        squeeze=float(a[1]),
        primary=bool(b[0]),
        secondary=bool(b[1]),
        menu=bool(b[3]),
        stick_click=bool(b[2]),
    )


class TeleopNode(Node):
    """The teleop node: headset or SpaceMouse in, arm targets out, buttons to the recorders' services."""

    def __init__(self) -> None:
        super().__init__(TELEOP_NODE)
        cfg = declare_config(self, TeleopConfig)
        cfg.clutch = declare_config(self, ClutchConfig, "clutch.")
        cfg.frame = declare_config(self, FrameConfig, "frame.")
        cfg.filter = declare_config(self, FilterConfig, "filter.")
        cfg.limits = declare_config(self, LimitsConfig, "limits.")
        self.ncfg = declare_config(self, TeleopNodeConfig)
        haptics = declare_config(self, HapticConfig, "haptics.")
        sm_cfg = declare_config(self, SpaceMouseConfig, "spacemouse.")
        spacemouse = SpaceMouseInput(sm_cfg) if self.ncfg.input == "spacemouse" else None
        bimanual = self._bimanual()
        self.session = TeleopSession(
            cfg, self.ncfg, haptics, spacemouse, to_mono=HostToMono(host_ns=lambda: now_ns(self)), bimanual=bimanual
        )
        self.cfg = cfg
        # the arms driven: None for one arm (the root namespace's /arm/...), else each arm's namespace
        self.arms: tuple[str | None, ...] = bimanual.arms if bimanual is not None else (None,)

        g = ReentrantCallbackGroup()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_targets = {
            arm: (
                self.create_publisher(PoseStamped, arm_topic(arm, TARGET_POSE), reliable),
                self.create_publisher(JointState, arm_topic(arm, TARGET_GRIPPER), reliable),
            )
            for arm in self.arms
        }
        self.pub_haptic = self.create_publisher(String, QUEST_HAPTIC, reliable)
        self.pub_status = self.create_publisher(String, STATUS, reliable)

        # the headset and arm streams are taken by the control loop at each tick
        # (PolledInputs: no executor wake-up per message), decoded as the recorders decode them; best-effort
        # as sensor data, with half a second of history so a stalled tick loses no button edge
        streams = stream_qos()
        self.inputs = PolledInputs(self)
        if spacemouse is None:
            for hand in self.arms if bimanual is not None else (cfg.hand,):  # the hands that drive an arm
                pose = functools.partial(self._on_hand_pose, hand if bimanual is not None else None)
                self.inputs.subscribe(PoseStamped, quest_topic(QUEST_POSE_PATTERN, str(hand)), pose, streams)
            for hand in QUEST_HANDS:
                self.inputs.subscribe(
                    JoyMsg, quest_topic(QUEST_JOY_PATTERN, hand), functools.partial(self._on_joy, hand), streams
                )
        for arm in self.arms:
            self.inputs.subscribe(
                PoseStamped, arm_topic(arm, EEF_POSE), functools.partial(self._on_arm_pose, arm), streams
            )
            self.inputs.subscribe(
                JointState, arm_topic(arm, JOINT_STATES), functools.partial(self._on_joints, arm), streams
            )
            self.create_subscription(
                DiagnosticArray,
                arm_topic(arm, ARM_STATUS),
                functools.partial(self._on_arm_status, arm),
                reliable,
                callback_group=g,
            )
        self.create_subscription(
            String,
            EPISODE_EVENTS,
            message_callback(lambda m: self.session.on_episode_event(m.data)),
            reliable,
            callback_group=g,
        )

        self._call_group = ReentrantCallbackGroup()
        self.recorder_clients = {rec: self._make_clients(rec) for rec in self.ncfg.recorders}
        # a stamped STOP ends at the press's capture stamp; a recorder without it gets stop_episode
        self.stop_at_clients = {rec: self._make_stop_at_client(rec) for rec in self.ncfg.recorders}
        # the stop chord's label (docs/curation.md): one label_episode call per recorder, sent with the stop
        self.label_clients: dict[str, Client] = {rec: self._make_label_client(rec) for rec in self.ncfg.recorders}
        for rec in self.ncfg.recorders:
            self.create_subscription(
                String,
                node_topic(rec, STATUS),
                message_callback(lambda m, r=rec: self.session.on_recorder_status(r, m.data)),
                reliable,
                callback_group=g,
            )
        self.create_timer(1.0 / SERVICE_POLL_HZ, timer_callback(self._service_poll), callback_group=self._call_group)
        self.create_timer(1.0, timer_callback(self._publish_status), callback_group=g)
        self._reader: HidrawReader | None = None
        self._sm_logged: tuple[str, str] | None = None
        if spacemouse is not None:  # the recorders' provenance names the input device
            latched = QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
            )
            self.pub_hello = self.create_publisher(String, QUEST_HELLO, latched)
            self._reader = HidrawReader(
                sm_cfg.device, self.session.on_spacemouse_report, self._on_spacemouse_state, sm_cfg.reopen_s
            ).start()
        self._loop = FixedRateLoop(self.cfg.period, self._tick, "teleop-control")
        drives = f"arms={','.join(bimanual.arms)}" if bimanual is not None else f"hand={cfg.hand}"
        self.get_logger().info(
            f"teleop: input={self.ncfg.input} {drives} rate={cfg.control_rate_hz} Hz recorders={self.ncfg.recorders}"
        )

    def _bimanual(self) -> BimanualConfig | None:
        """Two arms' settings (``arms``, each arm's ``arm_base.<arm>.*``), or None for one arm."""
        if not self.ncfg.arms:
            return None
        arms = tuple(self.ncfg.arms)
        bases = {a: declare_config(self, ArmBaseConfig, f"{BASE_PREFIX}{a}.") for a in arms if a}
        return BimanualConfig(arms, bases)

    # ---- inputs -------------------------------------------------------------------------------
    def _on_hand_pose(self, hand: str | None, msg: PoseStamped, _received_ns: int) -> None:
        p, q = _pose_lists(msg)
        self.session.on_hand_pose(stamp_to_ns(msg.header.stamp), p, q, hand)

    def _on_joy(self, hand: str, msg: JoyMsg, _received_ns: int) -> None:
        if len(msg.axes) == 0 and len(msg.buttons) == 0:  # quest_bridge's mark of a new input source
            self.session.on_source_change(stamp_to_ns(msg.header.stamp), hand, SOURCE_CHANGE_REASON)
            return
        self.session.on_joy(stamp_to_ns(msg.header.stamp), hand, _joy(msg))

    def _on_arm_pose(self, arm: str | None, msg: PoseStamped, _received_ns: int) -> None:
        p, q = _pose_lists(msg)
        self.session.on_arm_pose(p, q, arm)

    def _on_joints(self, arm: str | None, msg: JointState, _received_ns: int) -> None:
        self.session.on_joints(list(msg.position), arm)

    def _on_arm_status(self, arm: str | None, msg: DiagnosticArray) -> None:
        errors = [f"{s.name}: {s.message}" for s in msg.status if s.level == DiagnosticStatus.ERROR]
        self.session.on_arm_errors(errors, arm)

    def _on_spacemouse_state(self, state: str, detail: str) -> None:
        self.session.on_spacemouse_state(state, detail)
        if (state, detail) == self._sm_logged:
            return  # an absent device is retried every reopen_s: log each change once
        last = self._sm_logged
        if state == "open" and last is not None and last[0] == "bad" and last[1].startswith(f"{detail}: "):
            return  # the same bad device tried again (reader.BAD_RETRY_S): its refusal was logged once
        self._sm_logged = (state, detail)
        if state == "open":
            self.get_logger().info(f"spacemouse: reading {detail}")
            self.pub_hello.publish(String(data=json.dumps({"client": "spacemouse", "device": detail})))
        else:
            self.get_logger().warning(f"spacemouse: {state}: {detail}")

    # ---- control loop -------------------------------------------------------------------------
    def on_shutdown(self) -> None:
        """Stop the control thread and the input reader."""
        self._loop.stop()
        if self._reader is not None:
            self._reader.stop()
        self.inputs.destroy()

    def _tick(self) -> None:
        self.inputs.poll()
        if self.session.bimanual:
            self._tick_arms()
            return
        step = self.session.tick()
        res = step.result
        self._presses(res.actions, res.outcome)
        self._arm_ticked(None, res, step.engage_haptic, step.log_refusal)

    def _tick_arms(self) -> None:
        step = self.session.tick_arms()
        res = step.result
        self._presses(res.actions, res.outcome)
        for command in step.engage_haptics:  # each on the hand of the arm that engaged
            self.pub_haptic.publish(String(data=json.dumps(command)))
        for arm, arm_res in res.arms.items():
            self._arm_ticked(arm, arm_res, None, arm in step.log_refusals)

    def _presses(self, actions: list[Action], outcome: str | None) -> None:
        for action in actions:
            self.get_logger().info(f"button: {action.value} on {self.ncfg.recorders}")
        if outcome is not None:
            self._send_label(outcome)

    def _arm_ticked(
        self, arm: str | None, res: ArmTick, engage_haptic: dict[str, Any] | None, log_refusal: bool
    ) -> None:
        """Log one arm's clutch change, publish its target while engaged (one arm: ``arm`` None)."""
        who = f"{arm} " if arm else ""
        if engage_haptic is not None:
            self.pub_haptic.publish(String(data=json.dumps(engage_haptic)))
        if res.clutch is ClutchEvent.ENGAGED:
            self.get_logger().info(f"{who}clutch engaged")
        elif res.clutch in (ClutchEvent.RELEASED, ClutchEvent.FORCED_RELEASE):
            self.get_logger().info(f"{who}clutch released ({res.reason or 'grip opened'})")
        elif log_refusal:
            self.get_logger().warning(f"{who}clutch refused: {res.reason}")
        if res.target is None or res.gripper is None:  # a target always comes with its gripper width
            return
        # serialized here (``cdr.encode``) and published as bytes: rclpy's conversion of a typed message
        # is most of a publish's cost
        ns = now_ns(self)
        pub_target, pub_gripper = self.pub_targets[arm]
        pub_target.publish(
            cdr_encode.pose_stamped(ns, self.ncfg.arm_frame, res.target.p.tolist(), res.target.q.tolist())
        )
        pub_gripper.publish(cdr_encode.joint_state(ns, "", GRIPPER_JOINTS, (float(res.gripper),)))

    # ---- recorder services (executor thread) ---------------------------------------------------
    def _make_clients(self, rec: str) -> dict[Action, Client]:
        return {
            a: self.create_client(Trigger, node_topic(rec, a.value), callback_group=self._call_group) for a in Action
        }

    def _make_stop_at_client(self, rec: str) -> Client:
        return self.create_client(AddDiagnostics, node_topic(rec, STOP_EPISODE_AT), callback_group=self._call_group)

    def _make_label_client(self, rec: str) -> Client:
        return self.create_client(AddDiagnostics, node_topic(rec, LABEL_EPISODE), callback_group=self._call_group)

    def _service_poll(self) -> None:
        """Send, time out, re-create clients and resend as the session decides; play due haptic pulses."""
        step = self.session.poll(self._ready)
        for rec in step.reconnect:
            for client in self.recorder_clients[rec].values():
                self.destroy_client(client)  # its pending request may sit on a dead endpoint: drop it
            self.recorder_clients[rec] = self._make_clients(rec)
            self.destroy_client(self.stop_at_clients[rec])
            self.stop_at_clients[rec] = self._make_stop_at_client(rec)
        for report in step.reports:
            self._log_report(report)
        for rec, outcome, message in step.late_labels:
            self.get_logger().error(f"{node_topic(rec, LABEL_EPISODE)} {outcome}: {message}")
        for rec in step.relabel:
            self.destroy_client(self.label_clients[rec])
            self.label_clients[rec] = self._make_label_client(rec)
        for send in step.sends:
            stop_at = self.stop_at_clients[send.recorder]
            if send.end_ns is not None and stop_at.service_is_ready():  # a stamped stop: ends at the press
                req = AddDiagnostics.Request(load_namespace=json.dumps({"end_ns": send.end_ns}))
                future = stop_at.call_async(req)
            else:  # unstamped, or a recorder without stop_episode_at: ends at the request's arrival
                future = self.recorder_clients[send.recorder][send.action].call_async(Trigger.Request())
            future.add_done_callback(functools.partial(self._on_reply, send.call_id))
        self._publish_haptic(step.haptic)
        if step.status is not None:
            self.pub_status.publish(String(data=json.dumps(step.status)))

    def _send_label(self, outcome: str) -> None:
        """Send the stop chord's label to every recorder.

        It lands on the episode being stopped: in flight, or
        just saved if the stop got there first). Not retried: a refusal, or no answer within call_timeout_s, pulses ``refused``
        and is logged, and the episode can be labelled afterwards (service or piper-dataset label).
        """
        req = AddDiagnostics.Request(load_namespace=json.dumps({"outcome": outcome}))
        for rec, client in self.label_clients.items():
            if not client.service_is_ready():
                self._label_failed(rec, outcome, f"{LABEL_EPISODE} not available")
                continue
            fut = client.call_async(req)
            self.session.label_sent(rec, fut, outcome)
            fut.add_done_callback(functools.partial(self._on_label_reply, rec, outcome))

    def _on_label_reply(self, rec: str, outcome: str, future: Future) -> None:
        self.session.label_answered(rec, future)
        try:
            reply = future.result()
            ok, message = (bool(reply.success), str(reply.message)) if reply is not None else (False, "no reply")
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the executor
            ok, message = False, f"call failed: {exc}"
        if ok:
            self.get_logger().info(f"{node_topic(rec, LABEL_EPISODE)} {outcome}: {message}")
        else:
            self._label_failed(rec, outcome, message)

    def _label_failed(self, rec: str, outcome: str, message: str) -> None:
        self.get_logger().error(f"{node_topic(rec, LABEL_EPISODE)} {outcome}: {message}")
        self.session.label_failed(rec, message)

    def _ready(self, rec: str) -> bool:
        return all(c.service_is_ready() for c in self.recorder_clients[rec].values())

    def _on_reply(self, call_id: int, future: Future) -> None:
        """A Trigger or ``stop_episode_at`` (AddDiagnostics) reply: both are (success, message)."""
        try:
            reply = future.result()
            if reply is None:  # cancelled, no reply set
                raise RuntimeError("no reply (call cancelled)")
            success, message = bool(reply.success), str(reply.message)
        except Exception as exc:  # noqa: BLE001 - a failed call is reported, never raised into the executor
            success, message = False, f"call failed: {exc}"
        step = self.session.on_reply(call_id, success, message)
        if step.report is not None:
            self._log_report(step.report)
        self._publish_haptic(step.haptic)

    def _log_report(self, report: Report) -> None:
        """Log every outcome (the session pulses the headset and keeps the alarm for the status)."""
        alarm = report.outcome.alarm
        # one logging call site per severity: rclpy refuses a call site whose severity changes
        if alarm == "failed":
            self.get_logger().error(str(report))
        elif alarm == "timeout" or report.outcome is Outcome.RETRY:
            self.get_logger().warning(str(report))
        else:
            self.get_logger().info(str(report))

    def _publish_haptic(self, commands: list[dict[str, Any]]) -> None:
        for command in commands:
            self.pub_haptic.publish(String(data=json.dumps(command)))

    def _publish_status(self) -> None:
        self.pub_status.publish(String(data=json.dumps(self.session.status())))


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-teleop``)."""
    sys.exit(run_node(TeleopNode, args))  # callbacks only store data; the control loop has its own thread

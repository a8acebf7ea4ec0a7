"""teleop: Quest controller -> /arm/target_pose and /arm/target_gripper, and buttons -> recorder services.

A thin adapter around ``piper_recorder.teleop.mapper.TeleopCore``: headset poses and joys are fed to
the core with their capture time (``header.stamp``, which quest_bridge maps from the headset clock to
the host clock) moved onto the monotonic clock (``teleop.capture_time.HostToMono``), so a
late-delivered old pose counts as old (an unstamped message, stamp 0, counts from its arrival), and
with the stamp itself as their order (an input stamped after the one held is never "out of order",
whatever the clock conversion's noise); arm feedback with its arrival time. A
dedicated control thread at ``control_rate_hz`` asks the core for the next target. (Not a ROS
timer: in a shared Python executor a 100 Hz timer starved the subscriptions for 250 ms at a time, which tripped the stale-stream watchdog; the executor is
single-threaded because the callbacks only store data under one lock.) Targets are published only
while the clutch is engaged; when it releases (grip open, menu, stale headset stream, lost arm
feedback, arm fault) publishing stops and the arm holds.

Parameters: the fields of ``TeleopConfig`` (``hand``, ``control_rate_hz``, ``pos_scale``, ...), its
sub-configs under ``clutch.``, ``frame.``, ``filter.``, ``limits.``, and ``TeleopNodeConfig`` below.
Buttons call ``/<recorder>/{start,stop,discard,delete_last}_episode`` asynchronously on every
recorder in ``recorders`` through ``piper_recorder.teleop.recorder_calls.RecorderCalls``: each call
has a deadline (``call_timeout_s``); a timeout pulses the headset (``haptics.timeout``),
is logged, re-creates that recorder's clients (a fresh client matches the relaunched server; the
old one may hold a dead endpoint) and resends once the recorder publishes its ``~/status`` again;
a press that did not take effect (refused, failed) pulses ``haptics.refused``. Replies, ``/episode_events``
and the recorders' ``~/status`` keep the start/stop toggle on what the recorders actually do.
Confirmations (``piper_recorder.teleop.haptics``) follow what the recorders did: ``/episode_events``
started / saved / discarded / deleted pulse ``haptics.start`` / ``save`` / ``discard`` / ``delete``
(once for all recorders), and a safety limit starting to shape the target pulses ``haptics.limit``.
Clients are created, called and destroyed only on the executor thread (a ``SERVICE_POLL_HZ``
timer). ``/teleop/status`` (String JSON, 1 Hz, and at once, at most 10 Hz, when the clutch or the active
limits change) carries the counters (``limit_hits``: how often each safety limit started acting this
session), ``limits_active`` (the limits acting now or since the previous status), each recorder's
state, the calls in flight, ``haptics`` (patterns played) and ``last_release`` (the reason of the
newest forced release; ``forced_releases`` counts them). A grip the interlocks refuse pulses
``haptics.refused`` once per grip attempt, a release the operator did not make ``haptics.release``
(the core's ``TickResult.haptics``); both used to be silent.

``input: spacemouse`` drives the same core from a 3Dconnexion SpaceMouse instead of the headset
(``piper_recorder.spacemouse``, parameters ``spacemouse.*``): no ``/quest/*`` subscription; a reader
thread blocks on the hidraw device (no CPU while the cap rests) and hands each report to
``SpaceMouseInput`` under the lock, and each control tick feeds the integrated pose and the buttons to
the core (``SpaceMouseInput.step``). It is a mode of this node, not a node of its own, because the
clutch interlocks, limits, recorder calls and status live here: a separate node publishing
``/quest/*`` would have to stream poses at the control rate even with the cap at rest (the staleness
rule) and would pass for a headset in the recorders' provenance. In this mode teleop publishes the
latched ``/quest/hello`` the recorders put in their provenance, ``{"client": "spacemouse", "device"}``
(no quest_bridge runs then), and ``/teleop/status`` carries ``input`` and ``spacemouse`` (device
state, reports, drops by reason, stalls, presses).
"""
from __future__ import annotations

import functools
import json
import math
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from diagnostic_msgs.srv import AddDiagnostics
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.client import Client
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import JointState, Joy as JoyMsg
from std_msgs.msg import Header, String
from std_srvs.srv import Trigger

import numpy as np

from piper_recorder.nodes.common import FixedRateLoop, declare_config, now_ns, ns_to_stamp, run_node, stamp_to_ns
from piper_recorder.spacemouse.input import TELEOP_INPUTS, SpaceMouseConfig, SpaceMouseInput
from piper_recorder.spacemouse.reader import HidrawReader
from piper_recorder.teleop.capture_time import HostToMono
from piper_recorder.teleop.clutch import ClutchConfig, ClutchEvent
from piper_recorder.teleop.filters import FilterConfig
from piper_recorder.teleop.frames import FrameConfig
from piper_recorder.teleop.haptics import EVENT_PATTERNS, HapticConfig, HapticScheduler
from piper_recorder.teleop.limits import LimitsConfig
from piper_recorder.teleop.mapper import Action, Joy, TeleopConfig, TeleopCore
from piper_recorder.teleop.recorder_calls import Outcome, RecorderCallConfig, RecorderCalls, Report

# The default alarm patterns on /quest/haptic, (delay s, amp, ms) per pulse (configurable: ``haptics.*``);
# the engage pulse is one short ``haptic_amp``/``haptic_ms`` buzz, so these are unmistakably different.
HAPTIC_PATTERNS: dict[str, tuple[tuple[float, float, int], ...]] = {
    "timeout": tuple(HapticConfig().pattern("timeout")),   # a recorder did not answer: retrying
    "failed": tuple(HapticConfig().pattern("refused")),    # the press did not take effect
}
ALARM_PATTERN = {"timeout": "timeout", "failed": "refused"}   # RecorderCalls' alarm -> haptics pattern
STATUS_MIN_PERIOD_S = 0.1
SERVICE_POLL_HZ = 50.0   # presses wait <= 20 ms for the executor thread (EventsExecutor has no guard conditions)


@dataclass
class TeleopNodeConfig:
    recorders: list[str] = field(default_factory=lambda: ["lerobot_recorder", "rgbd_recorder"])
    haptic_amp: float = 0.6
    haptic_ms: int = 40
    fault_on_arm_error: bool = True   # an ERROR level in /arm/status refuses / releases the clutch
    arm_frame: str = "arm_base"
    call_timeout_s: float = 3.0       # a recorder service call unanswered this long is reported and resent
    retry_window_s: float = 20.0      # ... until this long after the press; then it is reported as failed
    input: str = "headset"            # headset (/quest/* from quest_bridge) | spacemouse (spacemouse.*)

    def calls(self) -> RecorderCallConfig:
        return RecorderCallConfig(call_timeout_s=self.call_timeout_s, retry_window_s=self.retry_window_s)

    def validate(self) -> None:
        if not 0.0 <= self.haptic_amp <= 1.0 or not 0 <= self.haptic_ms <= 2000:
            raise ValueError("haptic_amp must be in [0, 1] and haptic_ms in [0, 2000]")
        if any(not r or "/" in r for r in self.recorders):
            raise ValueError(f"recorders must be plain node names, got {self.recorders}")
        if self.input not in TELEOP_INPUTS:
            raise ValueError(f"input must be one of {TELEOP_INPUTS}, got {self.input!r}")
        self.calls().validate()


def _pose_arrays(msg: PoseStamped) -> tuple[list[float], list[float]]:
    p, q = msg.pose.position, msg.pose.orientation
    return [p.x, p.y, p.z], [q.x, q.y, q.z, q.w]


def _joy(msg: JoyMsg) -> Joy | None:
    a, b = list(msg.axes), list(msg.buttons)
    if len(a) < 2 or len(b) < 4:
        return None
    return Joy(trigger=float(a[0]), squeeze=float(a[1]), primary=bool(b[0]), secondary=bool(b[1]),
               menu=bool(b[3]), stick_click=bool(b[2]))


class TeleopNode(Node):
    def __init__(self) -> None:
        super().__init__("teleop")
        cfg = declare_config(self, TeleopConfig)
        cfg.clutch = declare_config(self, ClutchConfig, "clutch.")
        cfg.frame = declare_config(self, FrameConfig, "frame.")
        cfg.filter = declare_config(self, FilterConfig, "filter.")
        cfg.limits = declare_config(self, LimitsConfig, "limits.")
        self.ncfg = declare_config(self, TeleopNodeConfig)
        self.haptics = HapticScheduler(declare_config(self, HapticConfig, "haptics."))
        sm_cfg = declare_config(self, SpaceMouseConfig, "spacemouse.")
        spacemouse = self.ncfg.input == "spacemouse"
        # validates the assembled config; a SpaceMouse speaks the arm base frame already
        self.core = TeleopCore(cfg, remap=np.eye(3) if spacemouse else None)
        self.spacemouse = SpaceMouseInput(sm_cfg) if spacemouse else None
        # header stamps (the ROS clock) onto the monotonic clock, immune to a thread held between clock reads
        self._to_mono = HostToMono(host_ns=lambda: now_ns(self))
        self.cfg = cfg

        self._lock = threading.Lock()  # the core is single-threaded: callbacks and the control thread share it
        g, sensor = ReentrantCallbackGroup(), qos_profile_sensor_data
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_target = self.create_publisher(PoseStamped, "/arm/target_pose", reliable)
        self.pub_gripper = self.create_publisher(JointState, "/arm/target_gripper", reliable)
        self.pub_haptic = self.create_publisher(String, "/quest/haptic", reliable)
        self.pub_status = self.create_publisher(String, "~/status", reliable)

        if self.spacemouse is None:
            self.create_subscription(PoseStamped, f"/quest/{cfg.hand}/pose", self._on_hand_pose, sensor,
                                     callback_group=g)
            for hand in ("left", "right"):
                self.create_subscription(JoyMsg, f"/quest/{hand}/joy", lambda m, h=hand: self._on_joy(h, m),
                                         sensor, callback_group=g)
        self.create_subscription(PoseStamped, "/arm/eef_pose", self._on_arm_pose, sensor, callback_group=g)
        self.create_subscription(JointState, "/arm/joint_states", self._on_joints, sensor, callback_group=g)
        self.create_subscription(DiagnosticArray, "/arm/status", self._on_arm_status, reliable, callback_group=g)
        self.create_subscription(String, "/episode_events", self._on_episode_event, reliable, callback_group=g)

        self.calls = RecorderCalls(list(self.ncfg.recorders), self.ncfg.calls())
        self._call_group = ReentrantCallbackGroup()
        self.recorder_clients = {rec: self._make_clients(rec) for rec in self.ncfg.recorders}
        # the stop chord's label (docs/curation.md): one label_episode call per recorder, sent with the stop
        self.label_clients: dict[str, Client[Any, Any]] = {rec: self.create_client(AddDiagnostics, f"/{rec}/label_episode",
                                                      callback_group=self._call_group)
                              for rec in self.ncfg.recorders}
        self._labels_pending: dict[str, tuple[Any, float, str]] = {}   # rec -> (future, sent, outcome)
        self._presses = 0   # button presses so far (the bad verdict's pattern is felt once per press)
        self._bad_felt: tuple[int, float] = (-1, -math.inf)   # (presses, when) at the last 'bad' pattern
        self.last_outcome: dict[str, Any] | None = None       # the last label a recorder confirmed
        for rec in self.ncfg.recorders:
            self.create_subscription(String, f"/{rec}/status", lambda m, r=rec: self._on_recorder_status(r, m),
                                     reliable, callback_group=g)
        self._last_alarm: dict | None = None
        self._limits_active: tuple[str, ...] = ()   # the limits that shaped the last published target
        self._status_dirty = False
        self._status_sent = 0.0
        self.create_timer(1.0 / SERVICE_POLL_HZ, self._service_poll, callback_group=self._call_group)
        self.create_timer(1.0, self._publish_status, callback_group=g)
        self._last_refusal_log = 0.0
        self._reader: HidrawReader | None = None
        self._sm_logged: tuple[str, str] | None = None
        if self.spacemouse is not None:   # the recorders' provenance names the input device
            latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            self.pub_hello = self.create_publisher(String, "/quest/hello", latched)
            self._reader = HidrawReader(sm_cfg.device, self._on_spacemouse_report, self._on_spacemouse_state,
                                        sm_cfg.reopen_s).start()
        self._loop = FixedRateLoop(self.cfg.period, self._tick, "teleop-control")
        self.get_logger().info(f"teleop: input={self.ncfg.input} hand={cfg.hand} rate={cfg.control_rate_hz} Hz "
                               f"recorders={self.ncfg.recorders}")

    # ---- inputs -------------------------------------------------------------------------------
    def _captured(self, header: Header) -> tuple[float, int | None]:
        """The message's capture time on the monotonic clock (never later than now) and its source
        order (the stamp; None when unstamped: all we know is that it arrived now)."""
        stamp = stamp_to_ns(header.stamp)
        return self._to_mono.convert(stamp), (stamp if stamp > 0 else None)

    def _on_hand_pose(self, msg: PoseStamped) -> None:
        p, q = _pose_arrays(msg)
        with self._lock:   # the converter's state too
            t, order = self._captured(msg.header)
            self.core.on_hand_pose(t, p, q, order)

    def _on_joy(self, hand: str, msg: JoyMsg) -> None:
        joy = _joy(msg)
        with self._lock:
            t, order = self._captured(msg.header)
            if joy is None:
                self.core.counters.rejected_inputs += 1
                return
            self.core.on_joy(t, hand, joy, order)

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
        rec = ev.get("recorder")
        if isinstance(kind, str) and isinstance(rec, str):
            with self._lock:
                self.calls.on_event(time.monotonic(), rec, kind)
                self.core.on_recording(self.calls.recording)
                if kind in EVENT_PATTERNS:
                    self.haptics.confirm(time.monotonic(), EVENT_PATTERNS[kind])   # once for all recorders
                if kind == "labeled" and ev.get("outcome") in ("success", "failure"):
                    self.haptics.confirm(time.monotonic(), str(ev["outcome"]))      # felt once for all recorders
                    self.last_outcome = {"episode_index": ev.get("episode_index"), "outcome": ev["outcome"]}
                    self._status_dirty = True
                if kind == "saved" and ev.get("verdict") == "bad":
                    # once per stop, not per recorder (their episode numbers may differ): again only after a
                    # press, or dedupe_s later for episodes driven through the services
                    now = time.monotonic()
                    if self._presses > self._bad_felt[0] or now - self._bad_felt[1] > self.haptics.cfg.dedupe_s:
                        self._bad_felt = (self._presses, now)
                        self.haptics.play(now, "bad")

    def _on_recorder_status(self, rec: str, msg: String) -> None:
        try:
            state = json.loads(msg.data).get("state")
        except (ValueError, AttributeError):
            return
        with self._lock:
            self.calls.on_status(time.monotonic(), rec, state)
            self.core.on_recording(self.calls.recording)

    def _on_spacemouse_report(self, t: float, report: bytes) -> None:
        assert self.spacemouse is not None
        with self._lock:
            self.spacemouse.on_report(t, report)

    def _on_spacemouse_state(self, state: str, detail: str) -> None:
        assert self.spacemouse is not None
        with self._lock:
            self.spacemouse.on_state(time.monotonic(), state, detail)
            self._status_dirty = True
        if (state, detail) == self._sm_logged:
            return   # an absent device is retried every reopen_s: log each change once
        self._sm_logged = (state, detail)
        if state == "open":
            self.get_logger().info(f"spacemouse: reading {detail}")
            self.pub_hello.publish(String(data=json.dumps({"client": "spacemouse", "device": detail})))
        else:
            self.get_logger().warning(f"spacemouse: {state}: {detail}")

    # ---- control loop -------------------------------------------------------------------------
    def on_shutdown(self) -> None:
        self._loop.stop()
        if self._reader is not None:
            self._reader.stop()

    def _tick(self) -> None:
        with self._lock:
            now = time.monotonic()
            res = self.core.tick(now) if self.spacemouse is None else self.spacemouse.step(self.core, now)
            for action in res.actions:
                self.calls.press(now, action)
                self.haptics.new_press()
                self._presses += 1
            if res.actions:
                self.core.on_recording(self.calls.recording)
            self._track_limits(now, self.core.limits.acted if res.target is not None else ())
            for name in res.haptics:   # a refused grip, a release the operator did not make
                self.haptics.play(now, name)
            if res.clutch in (ClutchEvent.ENGAGED, ClutchEvent.RELEASED, ClutchEvent.FORCED_RELEASE):
                self._status_dirty = True
        for action in res.actions:
            self.get_logger().info(f"button: {action.value} on {self.ncfg.recorders}")
        if res.outcome is not None:
            self._send_label(res.outcome)

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
        if res.target is None or res.gripper is None:   # a target always comes with its gripper width
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

    def _track_limits(self, now: float, active: tuple[str, ...]) -> None:
        """Pulse ``haptics.limit`` when a limit starts shaping the target (the core counts the hits),
        and publish the status soon (under the lock)."""
        if any(name not in self._limits_active for name in active):
            self.haptics.play(now, "limit")
        if active != self._limits_active:
            self._limits_active = active
            self._status_dirty = True

    # ---- recorder services (executor thread) ---------------------------------------------------
    def _make_clients(self, rec: str) -> dict[Action, Client[Any, Any]]:
        return {a: self.create_client(Trigger, f"/{rec}/{a.value}", callback_group=self._call_group)
                for a in Action}

    def _service_poll(self) -> None:
        """Send, time out, re-create clients and resend as RecorderCalls decides; play due haptic pulses."""
        with self._lock:
            now = time.monotonic()
            res = self.calls.poll(now, self._ready)
            self.core.on_recording(self.calls.recording)
        for rec in res.reconnect:
            for client in self.recorder_clients[rec].values():
                self.destroy_client(client)   # its pending request may sit on a dead endpoint: drop it
            self.recorder_clients[rec] = self._make_clients(rec)
        for report in res.reports:
            self._report(report)
        self._label_deadlines(now, res.reconnect)
        for send in res.sends:
            future = self.recorder_clients[send.recorder][send.action].call_async(Trigger.Request())
            future.add_done_callback(functools.partial(self._on_reply, send.call_id))
        self._service_poll_pulses(now)
        if self._status_dirty and now - self._status_sent >= STATUS_MIN_PERIOD_S:
            self._publish_status()

    def _send_label(self, outcome: str) -> None:
        """The stop chord's label to every recorder (it lands on the episode being stopped: in flight, or
        just saved if the stop got there first). Not retried: a refusal, or no answer within call_timeout_s, pulses ``refused``
        and is logged, and the episode can be labelled afterwards (service or piper-dataset label)."""
        req = AddDiagnostics.Request(load_namespace=json.dumps({"outcome": outcome}))
        for rec, client in self.label_clients.items():
            if not client.service_is_ready():
                self._label_failed(rec, outcome, "label_episode not available")
                continue
            fut = client.call_async(req)
            with self._lock:
                self._labels_pending[rec] = (fut, time.monotonic(), outcome)
            fut.add_done_callback(functools.partial(self._on_label_reply, rec, outcome, time.monotonic()))

    def _label_deadlines(self, now: float, reconnect: list[str]) -> None:
        """A label not answered within call_timeout_s (a dead endpoint still matched) is reported, and that
        recorder's label client re-created, as RecorderCalls does for the Trigger clients."""
        with self._lock:
            late = [(rec, outcome) for rec, (fut, sent, outcome) in self._labels_pending.items()
                    if not fut.done() and now - sent > self.ncfg.call_timeout_s]
            for rec, _ in late:
                self._labels_pending.pop(rec, None)
        for rec, outcome in late:
            self._label_failed(rec, outcome, f"no answer within {self.ncfg.call_timeout_s:g} s")
        for rec in {r for r, _ in late} | set(reconnect):
            self.destroy_client(self.label_clients[rec])
            self.label_clients[rec] = self.create_client(AddDiagnostics, f"/{rec}/label_episode",
                                                         callback_group=self._call_group)

    def _on_label_reply(self, rec: str, outcome: str, _sent: float, future: Future[AddDiagnostics.Response]) -> None:
        with self._lock:
            if self._labels_pending.get(rec, (None,))[0] is future:
                self._labels_pending.pop(rec, None)
        try:
            reply = future.result()
            ok, message = (bool(reply.success), str(reply.message)) if reply is not None else (False, "no reply")
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the executor
            ok, message = False, f"call failed: {exc}"
        if ok:
            self.get_logger().info(f"{rec}/label_episode {outcome}: {message}")
        else:
            self._label_failed(rec, outcome, message)

    def _label_failed(self, rec: str, outcome: str, message: str) -> None:
        self.get_logger().error(f"{rec}/label_episode {outcome}: {message}")
        now = time.monotonic()
        with self._lock:
            self.haptics.play(now, "refused")
            seq = (self._last_alarm or {}).get("seq", 0) + 1
            self._last_alarm = {"recorder": rec, "action": "label_episode", "outcome": "refused",
                                "message": message, "pattern": "failed", "seq": seq}
            self._status_dirty = True

    def _ready(self, rec: str) -> bool:
        return all(c.service_is_ready() for c in self.recorder_clients[rec].values())

    def _on_reply(self, call_id: int, future: Future[Trigger.Response]) -> None:
        try:
            reply = future.result()
            if reply is None:   # cancelled, no reply set (was an AttributeError on None, reported alike)
                raise RuntimeError("no reply (call cancelled)")
            success, message = bool(reply.success), str(reply.message)
        except Exception as exc:  # noqa: BLE001 - a failed call is reported, never raised into the executor
            success, message = False, f"call failed: {exc}"
        with self._lock:
            report = self.calls.on_reply(time.monotonic(), call_id, success, message)
            self.core.on_recording(self.calls.recording)
        if report is not None:
            self._report(report)

    def _report(self, report: Report) -> None:
        """Log every outcome; pulse the headset and remember it for the status when the operator must know."""
        alarm = report.outcome.alarm
        # one logging call site per severity: rclpy refuses a call site whose severity changes
        if alarm == "failed":
            self.get_logger().error(str(report))
        elif alarm == "timeout" or report.outcome is Outcome.RETRY:
            self.get_logger().warning(str(report))
        else:
            self.get_logger().info(str(report))
        if alarm is None:
            return
        now = time.monotonic()
        with self._lock:
            self.haptics.play(now, ALARM_PATTERN[alarm])   # several recorders at once: one pattern
            seq = (self._last_alarm or {}).get("seq", 0) + 1   # tells a repeated alarm from the same one
            self._last_alarm = {"recorder": report.recorder, "action": report.action.value,
                                "outcome": report.outcome.value, "message": report.message, "pattern": alarm,
                                "seq": seq}
            self._status_dirty = True
        self._service_poll_pulses(now)

    def _service_poll_pulses(self, now: float) -> None:
        with self._lock:
            due = self.haptics.due(now)
        for p in due:
            self.pub_haptic.publish(String(data=json.dumps({"hand": self.cfg.hand, "amp": p.amp, "ms": p.ms})))

    def _publish_status(self) -> None:
        with self._lock:
            # limits_active: every limit that changed a target since the last status, so a brief hit shows
            status = {"engaged": self.core.engaged, "recording": self.core.recording, **asdict(self.core.counters),
                      "limits_active": sorted(self.core.limits_seen | set(self._limits_active)),
                      "recorders": {n: r.state for n, r in self.calls.recorders.items()},
                      "calls_in_flight": self.calls.pending(), "last_alarm": self._last_alarm,
                      "last_release": self.core.last_release,
                      "haptics": dict(self.haptics.played), "input": self.ncfg.input,
                      "last_outcome": self.last_outcome}
            if self.spacemouse is not None:
                status["spacemouse"] = self.spacemouse.status()
            self.core.limits_seen.clear()
            self._status_dirty, self._status_sent = False, time.monotonic()
        self.pub_status.publish(String(data=json.dumps(status)))


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(TeleopNode, args))  # callbacks only store data; the control loop has its own thread

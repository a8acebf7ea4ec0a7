"""quest_bridge: headset TCP stream -> ROS topics (thin adapter over piper_recorder.quest).

Poses carry capture-time stamps (valid, tracked devices only); /quest/raw carries every accepted line
verbatim. /quest/haptic and /quest/command go to the headset after checking; the latest tint and panel
placements are sent again on every (re)connect, so a restarted headset shows the recording tint at once.
A backlog read at once is coalesced for control (``BridgeCore.handle_batch``), never for /quest/raw.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Joy
from std_msgs.msg import String

from piper_recorder.cdr import encode as cdr_encode
from piper_recorder.names import (
    DIAGNOSTICS,
    QUEST_COMMAND,
    QUEST_DEVICES,
    QUEST_HANDS,
    QUEST_HAPTIC,
    QUEST_HELLO,
    QUEST_JOY_PATTERN,
    QUEST_POSE_PATTERN,
    QUEST_RAW,
    quest_topic,
)
from piper_recorder.nodes.plumbing.callbacks import timer_callback
from piper_recorder.nodes.plumbing.parameters import declare_config
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.nodes.plumbing.stamps import ns_to_stamp
from piper_recorder.quest.bridge_core import BridgeCore, BridgeOutput
from piper_recorder.quest.client import ClientConfig, QuestClient, haptic_from_json
from piper_recorder.quest.clock import ClockMapperConfig
from piper_recorder.quest.protocol import Message
from piper_recorder.quest.video import ui_command_from_json


@dataclass
class QuestBridgeConfig:
    """The bridge's ROS parameters."""

    # the headset link's and the clock mapper's settings default to their cores' (one set of defaults)
    host: str = ClientConfig.host
    port: int = ClientConfig.port
    reconnect_s: float = ClientConfig.reconnect_s
    reconnect_max_s: float = ClientConfig.reconnect_max_s
    silence_timeout_s: float = ClientConfig.silence_timeout_s
    max_line_bytes: int = ClientConfig.max_line_bytes
    quat_tolerance: float = ClientConfig.quat_tolerance
    publish_raw: bool = True
    clock_window_s: float = ClockMapperConfig.window_s
    clock_jump_threshold_s: float = ClockMapperConfig.jump_threshold_s
    frame_prefix: str = "quest_"
    diagnostics_period_s: float = 1.0
    stale_s: float = 0.5  # no frame for this long while connected -> WARN

    def client(self) -> ClientConfig:
        """The headset link's settings."""
        return ClientConfig(
            host=self.host,
            port=self.port,
            reconnect_s=self.reconnect_s,
            reconnect_max_s=self.reconnect_max_s,
            silence_timeout_s=self.silence_timeout_s,
            max_line_bytes=self.max_line_bytes,
            quat_tolerance=self.quat_tolerance,
        )

    def clock(self) -> ClockMapperConfig:
        """The clock mapper's settings."""
        return ClockMapperConfig(
            window_s=self.clock_window_s,
            jump_threshold_s=self.clock_jump_threshold_s,
            jump_confirm_s=min(1.0, self.clock_window_s),
        )

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        self.client().validate()
        self.clock().validate()
        if not (math.isfinite(self.diagnostics_period_s) and self.diagnostics_period_s > 0):
            raise ValueError("diagnostics_period_s must be > 0")
        if not (math.isfinite(self.stale_s) and self.stale_s > 0):
            raise ValueError("stale_s must be > 0")


class QuestBridge(Node):
    """The bridge's node: the headset client's messages out as topics, haptics and commands in."""

    def __init__(self) -> None:
        super().__init__("quest_bridge")
        self.cfg = declare_config(self, QuestBridgeConfig)
        self.core = BridgeCore(self.cfg.clock(), self.cfg.frame_prefix)
        self._lock = threading.Lock()
        self.pose_pubs = {
            d: self.create_publisher(PoseStamped, quest_topic(QUEST_POSE_PATTERN, d), 10) for d in QUEST_DEVICES
        }
        self.joy_pubs = {h: self.create_publisher(Joy, quest_topic(QUEST_JOY_PATTERN, h), 10) for h in QUEST_HANDS}
        self.raw_pub = self.create_publisher(String, QUEST_RAW, 200)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.hello_pub = self.create_publisher(String, QUEST_HELLO, latched)
        self.diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_subscription(String, QUEST_HAPTIC, self._on_haptic, 10)
        self.haptic_invalid = 0
        self.create_subscription(String, QUEST_COMMAND, self._on_command, 10)
        self.command_invalid = 0
        self._ui_state: dict[str, dict] = {}  # "color" / "panel<N>" -> the latest such command (replayed on connect)
        self.client = QuestClient(self.cfg.client(), self._on_message, self._on_event, on_batch=self._on_batch)
        self.create_timer(self.cfg.diagnostics_period_s, timer_callback(self._publish_diagnostics))
        self.client.start()
        self.get_logger().info(f"connecting to headset at {self.cfg.host}:{self.cfg.port}")

    # -- headset -> ROS (client thread) ----------------------------------------------------
    def _on_event(self, event: str) -> None:
        if event == "connected":
            with self._lock:
                out = self.core.on_connection()
                replay = list(self._ui_state.values())
            self._publish(out, time.time_ns())
            for cmd in replay:
                self.client.send_command(cmd)
        self.get_logger().info(f"headset {event}")

    def _on_message(self, msg: Message, recv_ns: int) -> None:
        with self._lock:
            out = self.core.handle(msg, recv_ns)
        self._publish(out, recv_ns)

    def _on_batch(self, msgs: list[Message], recv_ns: int) -> None:
        """Everything that was waiting in the socket: a backlog is coalesced for control (BridgeCore)."""
        with self._lock:
            outs = self.core.handle_batch(msgs, recv_ns)
        for out in outs:
            self._publish(out, recv_ns)

    def _publish(self, out: BridgeOutput, recv_ns: int) -> None:
        """Publish one frame's messages, serialized by ``cdr.encode``.

        A topic nobody subscribes to (often /quest/head/pose and the other hand's pose) is not even
        serialized; a subscriber that joins is served from its next frame on. A new input source is marked
        first, by an empty Joy on each hand: teleop releases its clutch on it before any of the new source's
        poses or grips can reach it on the same streams.
        """
        if out.source_change:
            for pub in self.joy_pubs.values():
                pub.publish(cdr_encode.joy(recv_ns, "", [], []))
        for p in out.poses:
            pub = self.pose_pubs[p.device]
            if pub.get_subscription_count():
                pub.publish(cdr_encode.pose_stamped(p.stamp_ns, p.frame_id, p.pos, p.quat_xyzw))
        for j in out.joys:
            pub = self.joy_pubs[j.hand]
            if pub.get_subscription_count():
                pub.publish(cdr_encode.joy(j.stamp_ns, j.frame_id, [float(a) for a in j.axes], list(j.buttons)))
        if out.raw is not None and self.cfg.publish_raw and self.raw_pub.get_subscription_count():
            self.raw_pub.publish(cdr_encode.string(out.raw))
        if out.hello_json is not None:
            self.hello_pub.publish(String(data=out.hello_json))

    # -- ROS -> headset --------------------------------------------------------------------
    def _on_haptic(self, msg: String) -> None:
        req = haptic_from_json(msg.data)
        if req is None:
            self.haptic_invalid += 1
            self.get_logger().warning(f"ignoring malformed {QUEST_HAPTIC}: {msg.data[:120]!r}")
            return
        self.client.haptic(*req)

    def _on_command(self, msg: String) -> None:
        cmd = ui_command_from_json(msg.data)
        if cmd is None:
            self.command_invalid += 1
            self.get_logger().warning(f"ignoring invalid {QUEST_COMMAND}: {msg.data[:120]!r}")
            return
        key = "color" if cmd["cmd"] == "color" else f"panel{cmd['cam']}" if cmd["cmd"] == "panel" else ""
        if key:
            with self._lock:
                self._ui_state[key] = cmd
        self.client.send_command(cmd)

    # -- diagnostics -----------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        now = time.time_ns()
        st = self.client.stats
        with self._lock:
            rate = self.core.frame_rate_hz(now)
            counters = dict(self.core.counters)
            offset = self.core.clock.offset_ns
            delay = self.core.last_delay_ns
            last_frame_ns = self.core.last_frame_recv_ns
            clock_resets = self.core.clock.resets
        rejected = dict(self.client.parser.rejected)
        age = (now - last_frame_ns) / 1e9 if last_frame_ns else -1.0
        if st.state != "connected":
            level, text = DiagnosticStatus.ERROR, f"not connected ({st.state}): {st.last_error}"
        elif age < 0 or age > self.cfg.stale_s:
            level, text = DiagnosticStatus.WARN, "connected, no frames"
        else:
            level, text = DiagnosticStatus.OK, f"streaming {rate:.1f} Hz"
        values = {
            "state": st.state,
            "endpoint": f"{self.cfg.host}:{self.cfg.port}",
            "connects": st.connects,
            "connect_failures": st.connect_failures,
            "silence_reconnects": st.silence_reconnects,
            "bytes_received": st.bytes_received,
            "frame_rate_hz": f"{rate:.2f}",
            "last_frame_age_s": f"{age:.3f}",
            "clock_offset_ns": offset if offset is not None else "none",
            "clock_resets": clock_resets,
            "arrival_delay_ms": f"{delay / 1e6:.3f}",
            "haptic_sent": st.commands_sent,
            "haptic_failed": st.commands_failed,
            "rejection_notices": st.notices_sent,
            "haptic_invalid": self.haptic_invalid,
            "command_invalid": self.command_invalid,
            "rejected_total": sum(rejected.values()),
            "last_rejection": self.client.parser.last_rejection,
            **{f"rejected.{k}": v for k, v in sorted(rejected.items())},
            **{f"count.{k}": v for k, v in sorted(counters.items())},
            # who listens (teleop, a bag recorder): a topic nobody subscribes to is not even published
            **{f"subscribers.{d}_pose": pub.get_subscription_count() for d, pub in self.pose_pubs.items()},
            **{f"subscribers.{h}_joy": pub.get_subscription_count() for h, pub in self.joy_pubs.items()},
        }
        status = DiagnosticStatus(
            level=level,
            name="quest_bridge: headset",
            message=text,
            hardware_id=f"quest@{self.cfg.host}:{self.cfg.port}",
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()],
        )
        arr = DiagnosticArray(status=[status])
        arr.header.stamp = ns_to_stamp(now)
        self.diag_pub.publish(arr)

    def on_shutdown(self) -> None:
        """Stop the headset client."""
        self.client.stop()


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-quest-bridge``)."""
    sys.exit(run_node(QuestBridge, args))


if __name__ == "__main__":
    main()

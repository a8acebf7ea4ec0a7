"""piper_arm node: thin ROS adapter around ``piper_recorder.piper.controller.ArmController``.

Targets (/arm/target_pose: absolute flange pose in "arm_base"; /arm/target_gripper: m) keep only the newest
unread one of each; the control loop takes them at its tick. Feedback (/arm/joint_states, /arm/eef_pose)
is published from the SDK reader thread as a frame set completes, stamped with the frames' host receive
time; /arm/commanded_* carry exactly what went on the bus, stamped when sent. With ``emulate: true`` the
CAN-level emulator runs in this process on a virtual bus named after ``can_channel``.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.cdr import encode as cdr_encode
from piper_recorder.names import (
    ARM_DISABLE,
    ARM_ENABLE,
    ARM_GO_HOME,
    ARM_JOINTS,
    ARM_PROVENANCE,
    ARM_STATUS,
    COMMANDED_GRIPPER,
    COMMANDED_POSE,
    EEF_POSE,
    GRIPPER_JOINTS,
    JOINT_STATES,
    PIPER_ARM_NODE,
    TARGET_GRIPPER,
    TARGET_POSE,
    in_namespace,
)
from piper_recorder.nodes.plumbing.parameters import ParameterError, declare_config
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs
from piper_recorder.nodes.plumbing.qos import stream_qos
from piper_recorder.nodes.plumbing.run_node import run_node
from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.backends import ArmConfig, FirmwareRefused
from piper_recorder.piper.controller import ArmController
from piper_recorder.piper.emulator import EmulatorConfig, PiperEmulator
from piper_recorder.piper.link import SDK_VERSION, PiperLink
from piper_recorder.piper.wire import ID_JOINTS, ID_POSE

FRAME = "arm_base"


def _pose_bytes(stamp_ns: int, t: np.ndarray) -> bytes:
    """A 4x4 flange pose as a serialized PoseStamped in ``arm_base`` (``cdr.encode``: published as bytes)."""
    return cdr_encode.pose_stamped(stamp_ns, FRAME, t[:3, 3].tolist(), kin.matrix_to_quat(t[:3, :3]).tolist())


class PiperArmNode(Node):
    """The arm's node: targets into the controller, feedback and commands out, the Trigger services."""

    def __init__(self, namespace: str | None = None, cli_args: list[str] | None = None) -> None:
        """Start the arm; ``namespace`` and ``cli_args`` are its own when several arms share a process (a bench)."""
        super().__init__(PIPER_ARM_NODE, namespace=namespace, cli_args=cli_args)
        self.cfg = cfg = declare_config(self, ArmConfig)
        self.emulator: PiperEmulator | None = None
        if cfg.emulate:
            cfg.can_interface = "virtual"
            cfg.can_silence_s = max(cfg.can_silence_s, cfg.emulator_can_silence_s)
            start = np.clip(cfg.emulator_start_joints, cfg.joint_min, cfg.joint_max).tolist()
            emu = EmulatorConfig(q_init=start)
            if cfg.emulator_firmware:
                emu.firmware = cfg.emulator_firmware
            self.emulator = PiperEmulator(cfg.can_channel, emu).start()
        try:
            self.link = PiperLink(cfg.can_channel, cfg.can_interface, feedback_hz=cfg.feedback_publish_hz)
        except (ConnectionError, OSError, ValueError) as exc:
            if self.emulator is not None:
                self.emulator.stop()
            raise ParameterError(f"can_channel {cfg.can_channel!r} ({cfg.can_interface}): cannot open: {exc}") from exc

        arm_qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.pub_joints = self.create_publisher(JointState, in_namespace(JOINT_STATES), arm_qos)
        self.pub_eef = self.create_publisher(PoseStamped, in_namespace(EEF_POSE), arm_qos)
        self.pub_cmd_pose = self.create_publisher(PoseStamped, in_namespace(COMMANDED_POSE), arm_qos)
        self.pub_cmd_gripper = self.create_publisher(JointState, in_namespace(COMMANDED_GRIPPER), arm_qos)
        self.pub_status = self.create_publisher(DiagnosticArray, in_namespace(ARM_STATUS), QoSProfile(depth=10))
        self.pub_provenance = self.create_publisher(String, in_namespace(ARM_PROVENANCE), latched)

        # targets are taken by the control loop at each tick (PolledInputs), not by an executor waking for
        # each: the tick that sends them validates them just before; in position control the loop wakes
        # when they arrive (ArmController._run_on_inputs)
        self.inputs = PolledInputs(self)
        self.ctl = ArmController(
            cfg,
            self.link,
            on_command=self._on_command,
            take_inputs=self.inputs.poll,
            wait_inputs=self.inputs.wait,
            interrupt=self.inputs.interrupt,
        )
        try:
            self.ctl.start(enable=cfg.emulate or cfg.auto_enable)
        except FirmwareRefused as exc:  # before enabling: the arm was never commanded
            self.link.close()
            if self.emulator is not None:
                self.emulator.stop()
            raise ParameterError(f"backend {cfg.backend!r}: {exc}") from exc
        self._publish_provenance()

        # Targets are absolute and superseded by the next one: keep only the newest unread one. With a deeper
        # queue a starved process works through a backlog oldest first and the arm lags the operator. Best-effort
        # for the same reason: a lost target is replaced by the next tick's, and a reliable reader would cost the
        # sender (teleop, the policy at 100 Hz) a timed event per target (plumbing.qos.stream_qos).
        newest = stream_qos(depth=1)
        self.inputs.subscribe(PoseStamped, in_namespace(TARGET_POSE), self._on_target, newest)
        self.inputs.subscribe(JointState, in_namespace(TARGET_GRIPPER), self._on_gripper, newest)
        services = MutuallyExclusiveCallbackGroup()
        self.create_service(Trigger, in_namespace(ARM_ENABLE), self._srv_enable, callback_group=services)
        self.create_service(Trigger, in_namespace(ARM_DISABLE), self._srv_disable, callback_group=services)
        self.create_service(Trigger, in_namespace(ARM_GO_HOME), self._srv_go_home, callback_group=services)
        self.link.set_frame_listener(self._on_frame, (ID_JOINTS[-1], ID_POSE[-1]))
        self.create_timer(0.5, self._publish_status, callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(
            f"piper_arm: backend={cfg.backend} channel={cfg.can_channel} "
            f"({cfg.can_interface}{', emulated' if cfg.emulate else ''}) "
            f"firmware={self.ctl.firmware} state={self.ctl.state} "
            f"can_silence_s={cfg.can_silence_s}"
        )

    # ------------------------------------------------------------ inputs
    def _on_target(self, msg: PoseStamped, _received_ns: int) -> None:
        if msg.header.frame_id not in ("", FRAME):
            self.ctl.refuse("wrong_frame", f"frame_id={msg.header.frame_id!r}, expected {FRAME!r}")
            return
        p, o = msg.pose.position, msg.pose.orientation
        self.ctl.set_target([p.x, p.y, p.z], [o.x, o.y, o.z, o.w])

    def _on_gripper(self, msg: JointState, _received_ns: int) -> None:
        names = list(msg.name)
        if "gripper" not in names or len(msg.position) != len(names):
            self.ctl.refuse("gripper_malformed", f"names={names}")
            return
        self.ctl.set_gripper(msg.position[names.index("gripper")])

    # ------------------------------------------------------------ outputs
    # The four 100 Hz topics go out as serialized bytes (``cdr.encode``): rclpy's conversion of a typed
    # message is most of a publish's cost (module doc there).
    def _on_command(self, stamp_s: float, pose: np.ndarray | None, gripper: float | None) -> None:
        ns = int(stamp_s * 1e9)
        if pose is not None:
            self.pub_cmd_pose.publish(_pose_bytes(ns, pose))
        if gripper is not None:
            self.pub_cmd_gripper.publish(cdr_encode.joint_state(ns, "", GRIPPER_JOINTS, (float(gripper),)))

    def _on_frame(self, frame_id: int, _stamp: float) -> None:
        """Publish a completed joint / pose frame set (SDK reader thread, on the set's last frame).

        The link parses only the sets of ``feedback_publish_hz`` (``FeedbackDecimator``), so each one that
        completes is published, from the frames' values (``PiperLink.joint_state``, ``flange_pose``).
        """
        if frame_id == ID_JOINTS[-1]:
            stamp, position, velocity, effort = self.link.joint_state()
            self.pub_joints.publish(
                cdr_encode.joint_state(int(stamp * 1e9), "", ARM_JOINTS, position, velocity, effort)
            )
        else:
            stamp, xyz, quat = self.link.flange_pose()
            self.pub_eef.publish(cdr_encode.pose_stamped(int(stamp * 1e9), FRAME, xyz, quat))

    def _publish_status(self) -> None:
        st = self.ctl.status()
        d = DiagnosticStatus(name="piper_arm", hardware_id=f"piper@{self.cfg.can_channel}")
        state, arm_status = st["state"], st["arm_status"]
        note = f"; last refusal: {st['last_refusal']}" if st["last_refusal"] else ""
        if state == "can_silent" or state.startswith("error") or arm_status not in (0, None):
            d.level = DiagnosticStatus.ERROR
            d.message = state + (f"; arm_status=0x{arm_status:02X}" if arm_status else "")
        elif state == "disabled":
            d.level, d.message = DiagnosticStatus.WARN, state + note
        else:
            d.level, d.message = DiagnosticStatus.OK, state + note
        for k, v in st.items():
            d.values.append(KeyValue(key=k, value=json.dumps(v) if not isinstance(v, str) else v))
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [d]
        self.pub_status.publish(arr)

    def _publish_provenance(self) -> None:
        c = self.cfg
        record = {
            "backend": c.backend,
            "kp": c.kp,
            "kd": c.kd,
            "t_ff": c.t_ff,
            "gravity_ff": c.gravity_ff,
            "firmware": self.ctl.firmware,
            "arm_model": "agilex_piper" + (" (emulated)" if c.emulate else ""),
            "can_channel": c.can_channel,
            "sdk_version": SDK_VERSION,
            "can_interface": c.can_interface,
            "control_rate_hz": c.control_rate_hz,
            "speed": c.speed,
            "euler_convention": "R = Rz(rz) Ry(ry) Rx(rx) (extrinsic XYZ)",
        }
        self.pub_provenance.publish(String(data=json.dumps(record)))

    # ------------------------------------------------------------ services
    def _srv_enable(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        # Waits for the drivers (at most 2 s) on the executor's thread, which carries nothing that cannot wait
        # that long (the 2 Hz status, parameters). A plain callback keeps the node on the EventsExecutor, which
        # in older Jazzy rclpy cannot await a coroutine service.
        ok = self.ctl.enable()
        res.success, res.message = ok, "enabled" if ok else "enable sent, not confirmed by the drivers"
        return res

    def _srv_disable(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        self.ctl.disable()
        res.success, res.message = True, "disabled"
        return res

    def _srv_go_home(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        ok = self.ctl.go_home()
        res.success = ok
        res.message = (
            "homing to " + json.dumps([round(math.degrees(v), 1) for v in self.cfg.home_joints]) + " deg"
            if ok
            else f"cannot home in state {self.ctl.state}"
        )
        return res

    def on_shutdown(self) -> None:
        """Stop the control loop, close the link, stop the emulator."""
        self.link.set_frame_listener(None)
        self.ctl.stop()
        self.inputs.destroy()
        self.link.close()
        if self.emulator is not None:
            self.emulator.stop()


def main(args: list[str] | None = None) -> None:
    """Run the node (console script ``piper-arm``)."""
    # The executor (the EventsExecutor: no service is a coroutine) serves the services, the status and the
    # parameters only: feedback is published from the SDK reader thread, so executor delays never reach the
    # teleop latency, and the control loop takes the targets (PolledInputs).
    sys.exit(run_node(PiperArmNode, args))

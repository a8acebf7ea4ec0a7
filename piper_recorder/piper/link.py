"""The one place that talks to piper_sdk: open the port, read feedback in SI units, send commands.

``C_PiperInterface_V2`` hard-codes SocketCAN when ``can_auto_init=True``; for any other python-can
interface (``virtual`` for the in-process emulator) we construct it with ``can_auto_init=False`` and
call ``CreateCanBus(name, bustype=...)``. On Linux the SDK opens two bus objects (receive and
send); on a virtual channel the send object would queue every frame of the channel forever
(nothing reads it), so there we let both directions share the receive bus, as the SDK itself does
on Windows/macOS. The SDK's reading thread (``recv(1)`` loop) works unchanged on the virtual bus.
"""

from __future__ import annotations

import math
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import can
import numpy as np
from piper_sdk import C_PiperInterface_V2
from piper_sdk.piper_msgs.msg_v2.feedback.arm_feedback_status import ArmMsgFeedbackStatusEnum
from piper_sdk.version import PiperSDKVersion

from . import kinematics as kin
from .firmware import MitDialect, mit_dialect, parse_version, version_string
from .vbus import DirectVirtualBus, make_direct
from .wire import (
    ID_FIRMWARE,
    ID_GRIPPER,
    ID_HIGH_SPD,
    ID_JOINTS,
    ID_LOW_SPD,
    ID_MIT_CTRL,
    ID_MOTION_CTRL_2,
    ID_POSE,
    ID_STATUS,
    MIT_KD,
    MIT_KP,
    MIT_P,
    MIT_T,
    MIT_V,
    MOVE_M,
    MOVE_P,
    PAIR,
    TORQUE_COEF,
    Frame,
    encode_mit_raw12,
    end_pose_frames,
    float_to_uint,
    gripper_ctrl,
    motion_ctrl_2,
    uint_to_float,
)

SDK_VERSION = str(PiperSDKVersion.PIPER_SDK_CURRENT_VERSION.value)
TORQUE_COEF_F = tuple(float(c) for c in TORQUE_COEF)


@dataclass
class Feedback:
    """One consistent snapshot of what the arm reported (SI units)."""

    stamp: float  # host receive time of the newest joint frame (s, time.time() clock)
    joints: np.ndarray  # rad (6)
    pose: np.ndarray  # 4x4 flange pose from the arm's end-pose frames (m)
    gripper: float  # m
    gripper_effort: float  # N m
    effort: np.ndarray  # N m (6), from the motor high-speed frames
    velocity: np.ndarray  # rad/s (6), from the motor high-speed frames
    effort_stamp: float
    ctrl_mode: int
    arm_status: int
    mode_feed: int
    err_code: int
    status_stamp: float
    pose_stamp: float  # host receive time of the newest end-pose frame


class FeedbackDecimator:
    """Which of the arm's ~200 Hz feedback frames to hand to piper_sdk's parser, at most ``hz`` sets a second.

    The SDK's parser is costly per frame and the node publishes feedback at ``feedback_publish_hz``, so the
    sets it never publishes are not parsed. A multi-frame set (end pose 0x2A2-0x2A4, joints 0x2A5-0x2A7)
    is kept or skipped whole, decided at its first frame, so a parsed set is never a mix of two instants.
    Motor frames (already 100/20 Hz) and every other frame are always parsed.
    """

    def __init__(self, hz: float):
        self.gap = max(0.0, 1.0 / hz - 0.0025)  # half a 200 Hz period of tolerance: 100 Hz = every other set
        self._last: dict[int, float] = {}
        self._skipping: set[int] = set()

    def skip(self, fid: int, stamp: float) -> bool:
        """Whether frame ``fid`` received at ``stamp`` (s) is to be skipped, not parsed."""
        head = _SET_HEAD.get(fid)
        if head is None:
            return False
        if fid != head:  # the rest of a set follows its first frame's decision
            return fid in self._skipping
        members = _SETS[head]
        if stamp - self._last.get(head, -1e18) < self.gap:
            self._skipping.update(members)
            return True
        self._skipping.difference_update(members)
        self._last[head] = stamp
        return False


_SETS = {ID_STATUS: (ID_STATUS,), ID_POSE[0]: ID_POSE, ID_JOINTS[0]: ID_JOINTS, ID_GRIPPER: (ID_GRIPPER,)}
_SET_HEAD = {fid: head for head, members in _SETS.items() for fid in members}


class FeedbackFrames:
    """The arm's feedback frames decoded here, in the SDK's units and with the SDK's rules.

    Status, end pose, joints, gripper, motor high- and low-speed frames; every other frame goes to
    piper_sdk's parser, which runs every frame through all its update functions, each under its own lock,
    where a ``struct`` unpack of the same 8 bytes is enough. The layouts and rules are those of piper_sdk's
    ``C_PiperParserV2.DecodeMessage`` and ``C_PiperInterface_V2.__Update*`` (big-endian; signed 32-bit
    joints and pose, 16-bit motor speed/current; with the SDK's default abnormal-data filter a frame
    with an out-of-range value is dropped whole; the SDK's joint/gripper software limits are off,
    as PiperLink constructs it; the status frame's control mode, arm status and mode feedback map onto
    the SDK's enums, a value they do not name to their UNKNOWN 0xFF). test_piper_feedback_frames feeds
    the same frames to both and compares. Stamps are the frames' receive times (``msg.timestamp``), as the SDK's.
    Of the low-speed frames (120 a second) only the drivers' status byte is kept: the link reads their enable
    bit (``PiperLink.enabled``), and nothing reads their voltages and temperatures.
    """

    def __init__(self) -> None:
        self.joints = [0] * 6  # 0.001 deg
        self.joint_stamp = 0.0
        self.pose = [0] * 6  # X, Y, Z (0.001 mm), RX, RY, RZ (0.001 deg)
        self.pose_stamp = 0.0
        self.gripper = (0, 0, 0)  # angle (0.001 mm), effort (0.001 N m), status code
        self.gripper_stamp = 0.0
        self.speed = [0] * 6  # motor speed (0.001 rad/s), current (0.001 A), position
        self.current = [0] * 6
        self.motor_stamp = 0.0
        self.status = (0, 0, 0, 0)  # ctrl_mode, arm_status, mode_feed, err_code (the SDK's defaults)
        self.status_stamp = 0.0
        self.seq = 0  # frames applied: a snapshot of the fields above is current while it holds
        self.driver_status = [0] * 6  # each driver's status byte (low-speed frames; bit 6: enabled), not in seq
        self.driver_stamp = 0.0  # the newest low-speed frame of any driver, as the SDK's ``time_stamp``

    def take(self, fid: int, data: bytes | bytearray, stamp: float) -> bool:
        """Apply one frame; False: not one of these (or too short), let the SDK parse it."""
        if len(data) < 8 and fid != ID_GRIPPER:
            return False
        if fid in _PAIR:
            a, b = PAIR.unpack_from(data)
            if fid in _JOINT_PAIR:
                if abs(a) > 3_000_000 or abs(b) > 3_000_000:  # 300 deg: the SDK drops the frame
                    return True
                i = _JOINT_PAIR[fid]
                self.joints[i], self.joints[i + 1], self.joint_stamp = a, b, stamp
                self.seq += 1
                return True
            i = _POSE_PAIR[fid]
            if abs(a) > _POSE_LIMITS[i] or abs(b) > _POSE_LIMITS[i + 1]:
                return True
            self.pose[i], self.pose[i + 1], self.pose_stamp = a, b, stamp
            self.seq += 1
            return True
        if fid in _MOTOR:
            i = _MOTOR[fid]
            self.speed[i], self.current[i], _pos = _HHI.unpack_from(data)
            self.motor_stamp = stamp
            self.seq += 1
            return True
        if fid == ID_GRIPPER:
            if len(data) < 7:
                return False
            angle, effort, code = _IHB.unpack_from(data)
            if abs(angle) <= 150_000:  # 150 mm
                self.gripper, self.gripper_stamp = (angle, effort, code), stamp
                self.seq += 1
            return True
        if fid == ID_STATUS:
            ctrl, arm, mode, _teach, _motion, _traj, err = _STATUS.unpack_from(data)
            self.status = (_CTRL_MODES.get(ctrl, 0xFF), _ARM_STATUSES.get(arm, 0xFF), _MODE_FEEDS.get(mode, 0xFF), err)
            self.status_stamp = stamp
            self.seq += 1
            return True
        if fid in _DRIVER:
            self.driver_status[_DRIVER[fid]] = data[5]
            self.driver_stamp = stamp
            return True
        return False

    def drivers_enabled(self, since: float = 0.0) -> bool:
        """Whether all six drivers report enabled in a low-speed frame that arrived after ``since``.

        Status bit 6, the SDK's ``driver_enable_status``: as
        ``GetArmLowSpdInfoMsgs().time_stamp > since and all(GetArmEnableStatus())``.
        """
        return self.driver_stamp > since and all(b & 0x40 for b in self.driver_status)


_HHI, _IHB, _STATUS = struct.Struct(">hhi"), struct.Struct(">ihB"), struct.Struct(">BBBBBBH")
_JOINT_PAIR = {fid: 2 * i for i, fid in enumerate(ID_JOINTS)}
_POSE_PAIR = {fid: 2 * i for i, fid in enumerate(ID_POSE)}
_PAIR = {**_JOINT_PAIR, **_POSE_PAIR}
_POSE_LIMITS = (1_000_000, 1_000_000, 1_000_000, 361_000, 361_000, 361_000)  # the SDK's filter: 1 m, 361 deg
_MOTOR = {fid: i for i, fid in enumerate(ID_HIGH_SPD)}
_DRIVER = {fid: i for i, fid in enumerate(ID_LOW_SPD)}
# the values the SDK's status enums name (``match_value``: any other is their UNKNOWN, 0xFF)
_CTRL_MODES = {int(v): int(v) for v in ArmMsgFeedbackStatusEnum.CtrlMode}
_ARM_STATUSES = {int(v): int(v) for v in ArmMsgFeedbackStatusEnum.ArmStatus}
_MODE_FEEDS = {int(v): int(v) for v in ArmMsgFeedbackStatusEnum.ModeFeed}
_DEG_MILLI = math.pi / 180e3  # 0.001 deg -> rad


# SI units of the frames' fields (one place: ``PiperLink.feedback`` and the published values share them)
def _joints_si(f: FeedbackFrames) -> list[float]:
    return [v * _DEG_MILLI for v in f.joints]


def _velocity_si(f: FeedbackFrames) -> list[float]:
    return [v / 1000.0 for v in f.speed]


def _effort_si(f: FeedbackFrames, gain: tuple[float, ...]) -> list[float]:
    """True torques: S-V1.7-3..1.8-2 report 4x on joints 1-3 (``firmware``: ``gain``)."""
    return [c * k / 1000.0 / g for c, k, g in zip(f.current, TORQUE_COEF_F, gain)]


def _gripper_si(f: FeedbackFrames) -> tuple[float, float]:
    """Gripper width (m) and effort (N m)."""
    angle, effort, _code = f.gripper
    return angle / 1e6, effort / 1000.0


def _pose_si(f: FeedbackFrames) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Flange position (m) and the firmware's Euler angles rx, ry, rz (rad)."""
    r = _DEG_MILLI
    x, y, z, rx, ry, rz = f.pose
    return (x / 1e6, y / 1e6, z / 1e6), (rx * r, ry * r, rz * r)


def _drain_reader(port: Any) -> Callable[[], object]:
    """The SDK's ``C_STD_CAN.ReadCanMessage`` for a ``DirectVirtualBus``.

    It blocks for a frame as the SDK's does (``recv(1)``), then hands every frame already queued to the
    parser in the same call, in order, instead of one bus-state check, ``recv`` and status per frame. As
    the SDK's, it reports failures as a status and never raises: a frame whose parsing fails is dropped.
    """
    bus, status = port.recv_bus, port.CAN_STATUS
    inbox = bus.queue

    def read() -> object:
        try:
            msg = bus.recv(1)
        except Exception:  # noqa: BLE001 - the SDK's ReadCanMessage returns a status for any failure
            return status.READ_CAN_MSG_FAILED
        if msg is None:
            return status.READ_CAN_MSG_TIMEOUT
        parse = port.callback_function
        while True:
            port.rx_message = msg
            try:
                parse(msg)
            except Exception:  # noqa: BLE001 - as the SDK's: this frame is lost, the reader goes on
                pass
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                return status.READ_CAN_MSG_OK

    return read


def _end_pose_ints(pose: np.ndarray) -> tuple[list[int], np.ndarray]:
    """A flange pose as EndPoseCtrl's integers, and the pose those integers encode.

    X, Y, Z in 0.001 mm, RX, RY, RZ in 0.001 deg, the SDK's Euler convention.
    """
    (r00, r01, r02, px), (r10, r11, r12, py), (r20, r21, r22, pz) = np.asarray(pose, dtype=float)[:3].tolist()
    xyz = [round(px * 1e6), round(py * 1e6), round(pz * 1e6)]
    rpy = [round(math.degrees(v) * 1000) for v in kin.rot_euler((r00, r01, r02, r10, r11, r12, r20, r21, r22))]
    rad = math.radians
    sent = kin.frame_matrix(
        kin.euler_rot(rad(rpy[0] / 1000.0), rad(rpy[1] / 1000.0), rad(rpy[2] / 1000.0))
        + (xyz[0] / 1e6, xyz[1] / 1e6, xyz[2] / 1e6)
    )
    return xyz + rpy, sent


class PiperLink:
    """Thin typed wrapper over one ``C_PiperInterface_V2`` instance.

    Every command goes through one lock: the SDK encodes into a single shared ``tx_msg`` object, so
    two threads sending at once (control loop, enable/disable service) could otherwise swap fields.
    """

    def __init__(
        self,
        channel: str = "can0",
        interface: str = "socketcan",
        feedback_hz: float | None = None,
        sdk_feedback: bool = False,
    ):
        """Open the SDK's interface on ``channel`` over python-can ``interface`` (module docstring).

        ``feedback_hz``: parse the arm's ~200 Hz feedback sets (status, end pose, joints, gripper) at most
        this often (``FeedbackDecimator``); None parses every frame. Every other frame is always parsed.
        ``sdk_feedback``: piper_sdk parses the feedback frames too (``FeedbackFrames`` reads them either
        way), so its getters hold them: for checks of the emulator against the SDK.
        """
        self.channel, self.interface = channel, interface
        decimator = FeedbackDecimator(feedback_hz) if feedback_hz else None
        self._tx = threading.Lock()
        if interface == "socketcan":
            self.sdk = C_PiperInterface_V2(can_name=channel, judge_flag=False, can_auto_init=True)
        else:
            self.sdk = C_PiperInterface_V2(can_name=channel, judge_flag=False, can_auto_init=False)
            self.sdk.CreateCanBus(channel, bustype=interface, judge_flag=False)
            port = self.sdk.GetCanBus()
            if interface == "virtual" and port.send_bus is not port.recv_bus:
                port.send_bus.shutdown()
                port.send_bus = port.recv_bus
            if interface == "virtual" and make_direct(port.recv_bus):  # no deepcopy of each command frame (vbus)
                port.ReadCanMessage = _drain_reader(port)
        self._frame_listener: Callable[[int, float], None] | None = None
        self._listened: frozenset[int] | None = None  # the frame ids the listener is called for (None: all)
        self._firmware_raw = bytearray()  # the 0x4AF reply as sent (the SDK keeps only 8 characters of it)
        self._firmware_at = 0.0  # when its last frame arrived
        # how the firmware reads JointMitCtrl and scales effort; known once ``firmware()`` has read it
        self.dialect: MitDialect = mit_dialect(None)
        self.listener_errors = 0
        self.last_listener_error = ""
        self.send_errors = 0  # command frames the port did not take (``_send_frames``)
        self._snapshot: tuple[tuple[int, tuple[float, ...]], Feedback] | None = None  # feedback(): the newest
        port = self.sdk.GetCanBus()
        # the SDK keeps one interface object per channel name: wrap its parser only once
        sdk_parse = getattr(port, "_sdk_parse", port.callback_function)
        port._sdk_parse = sdk_parse

        frames = self.frames = FeedbackFrames()

        def parse_then_notify(msg: can.Message) -> None:
            if decimator is not None and decimator.skip(msg.arbitration_id, msg.timestamp):
                return
            if not frames.take(msg.arbitration_id, msg.data, msg.timestamp) or sdk_feedback:
                sdk_parse(msg)
            if msg.arbitration_id == ID_FIRMWARE:
                self._firmware_raw.extend(bytes(msg.data))
                self._firmware_at = time.monotonic()
            listener, listened = self._frame_listener, self._listened
            if listener is not None and (listened is None or msg.arbitration_id in listened):
                try:
                    listener(msg.arbitration_id, msg.timestamp)
                except Exception as exc:  # the SDK's reader thread exits on any exception: never let one out  # noqa: BLE001
                    self.listener_errors += 1
                    self.last_listener_error = repr(exc)

        port.callback_function = parse_then_notify
        self.sdk.ConnectPort()  # starts the SDK reader thread; queries limits and firmware

    def set_frame_listener(
        self, listener: Callable[[int, float], None] | None, frame_ids: Iterable[int] | None = None
    ) -> None:
        """Call ``listener(frame_id, host_stamp)`` on the SDK reader thread after each frame of ``frame_ids``.

        Every frame when ``frame_ids`` is None; after the frame was parsed.

        Lets a node publish feedback at the arm's own rate (e.g. on the last joint frame, 0x2A7)
        instead of polling; keep it short, it delays the SDK's parsing of the next frame.
        """
        self._listened = None if frame_ids is None else frozenset(frame_ids)
        self._frame_listener = listener

    def close(self) -> None:
        """Disconnect the SDK's port (its reader thread ends)."""
        self.sdk.DisconnectPort()

    # ------------------------------------------------------------ feedback
    def feedback(self) -> Feedback:
        """A snapshot of the newest frames in SI units.

        Called ~400 times a second (the control loop at 200 Hz, the node's publisher per feedback set),
        while the sets come at ``feedback_hz``: a snapshot is built (plain float math) only when a frame
        was taken since the last one (``FeedbackFrames.seq``), else the same one is handed out again. Its
        arrays are read-only, so no reader can change what another one sees.
        """
        f = self.frames
        gain = self.dialect.effort_gain
        key = (f.seq, gain)  # read before the fields: a frame taken meanwhile only makes the next call rebuild
        cached = self._snapshot
        if cached is not None and cached[0] == key:
            return cached[1]
        xyz, rpy = _pose_si(f)
        pose = kin.frame_matrix(kin.euler_rot(*rpy) + xyz)
        effort, joints, velocity = np.array(_effort_si(f, gain)), np.array(_joints_si(f)), np.array(_velocity_si(f))
        for a in (pose, effort, joints, velocity):
            a.flags.writeable = False
        width, g_effort = _gripper_si(f)
        ctrl_mode, arm_status, mode_feed, err_code = f.status
        fb = Feedback(
            stamp=f.joint_stamp,
            joints=joints,
            pose=pose,
            gripper=width,
            gripper_effort=g_effort,
            effort=effort,
            velocity=velocity,
            effort_stamp=f.motor_stamp,
            ctrl_mode=ctrl_mode,
            arm_status=arm_status,
            mode_feed=mode_feed,
            err_code=err_code,
            status_stamp=f.status_stamp,
            pose_stamp=f.pose_stamp,
        )
        self._snapshot = (key, fb)
        return fb

    def feedback_stamp(self) -> float:
        """Host receive time of the newest joint frame (``Feedback.stamp``), without a snapshot."""
        return self.frames.joint_stamp

    def joint_state(self) -> tuple[float, list[float], list[float], list[float]]:
        """The newest joint feedback as /arm/joint_states carries it: (stamp, position, velocity, effort).

        The six joints then the gripper (rad, rad/s, N m; the gripper's width in m, velocity 0, effort N m).

        Plain floats from the frames, without building a ``feedback`` snapshot: the node publishes one
        per joint set (100 a second) from the reader thread, where the frames it reads are complete.
        """
        f = self.frames
        width, g_effort = _gripper_si(f)
        return (
            f.joint_stamp,
            _joints_si(f) + [width],
            _velocity_si(f) + [0.0],
            _effort_si(f, self.dialect.effort_gain) + [g_effort],
        )

    def flange_pose(self) -> tuple[float, tuple[float, float, float], tuple[float, float, float, float]]:
        """The newest end-pose feedback as /arm/eef_pose carries it: (stamp, position m, quaternion xyzw).

        The quaternion has w >= 0; plain floats, as ``joint_state``.
        """
        f = self.frames
        xyz, rpy = _pose_si(f)
        return f.pose_stamp, xyz, kin.euler_quat(*rpy)

    def firmware(self, timeout: float = 1.0) -> str | None:
        """Firmware string (e.g. "S-V1.8-5"); queries again once if nothing arrived yet. Sets ``dialect``.

        Parsed from the raw 0x4AF bytes: the SDK's ``GetPiperFirmwareVersion`` keeps 8 characters, so
        "S-V1.8-10" would read "S-V1.8-1" (another MIT dialect, ``firmware``); the SDK's string is the
        fallback when the raw bytes do not parse.
        """
        deadline = time.monotonic() + timeout
        asked_again = False
        found: str | None = None
        while time.monotonic() < deadline:
            time.sleep(0.02)
            # the reply spans several frames: a version running to the end of what arrived may go on
            # ("S-V1.8-1" + "0"), so it counts once 50 ms passed without another frame
            settled = time.monotonic() - self._firmware_at > 0.05
            v = parse_version(bytes(self._firmware_raw), complete=settled)
            if v is not None:
                found = version_string(v)
                break
            sdk_v = self.sdk.GetPiperFirmwareVersion()
            if isinstance(sdk_v, str) and settled and not parse_version(sdk_v):
                found = sdk_v  # a reply we cannot parse: keep what the SDK made of it (refused later)
                break
            if not asked_again and time.monotonic() > deadline - timeout / 2:
                with self._tx:
                    self._firmware_raw.clear()
                    self.sdk.SearchPiperFirmwareVersion()
                asked_again = True
        self.dialect = mit_dialect(found)
        return found

    def enabled(self, since: float = 0.0) -> bool:
        """All six drivers report enabled (low-speed frames, ~20 Hz) in a frame received after ``since``."""
        return self.frames.drivers_enabled(since)

    # ------------------------------------------------------------ commands
    def enable(self) -> None:
        """EnableArm for all joints (sent once; ``enabled`` tells when the drivers confirm)."""
        with self._tx:
            self.sdk.EnableArm(7)

    def disable(self) -> None:
        """DisableArm for all joints."""
        with self._tx:
            self.sdk.DisableArm(7)

    def mode_position(self, speed: int) -> None:
        """MotionCtrl_2 into CAN control, MOVE P, at ``speed`` %."""
        with self._tx:
            self.sdk.MotionCtrl_2(0x01, 0x00, int(speed), 0x00)

    def mode_joint(self, speed: int) -> None:
        """MotionCtrl_2 into CAN control, MOVE J, at ``speed`` %."""
        with self._tx:
            self.sdk.MotionCtrl_2(0x01, 0x01, int(speed), 0x00)

    def mode_mit(self, speed: int) -> None:
        """MotionCtrl_2 into MIT mode with the move mode this firmware wants (0x04; 0x06 from S-V1.8-8)."""
        mode = self.dialect.move_mode
        with self._tx:
            if mode == MOVE_M:
                self.sdk.MotionCtrl_2(0x01, mode, int(speed), 0xAD)
            else:  # piper_sdk 0.6.2 refuses move modes above 0x05: the same 0x151 frame, sent raw
                self.sdk.GetCanBus().SendCanMessage(ID_MOTION_CTRL_2, [0x01, mode, int(speed), 0xAD, 0, 0, 0, 0])

    def position_command(self, speed: int, pose: np.ndarray) -> tuple[list[int], np.ndarray]:
        """MotionCtrl_2 into position mode at ``speed``, then EndPoseCtrl: what the position backend sends per target.

        EndPoseCtrl in 0.001 mm / 0.001 deg, the SDK's Euler convention. Returns the integers sent and the
        pose they encode. The frames are the SDK's ``MotionCtrl_2`` + ``EndPoseCtrl`` byte for byte
        (test_piper_emulator compares them), encoded by ``wire`` and handed to the SDK's CAN port in one call
        (``_send_frames``). Not through the SDK: per frame it builds a message object, a ``can.Message``
        and the payload field by field through range-checked converters, a long call chain that runs cold
        at the teleop rate.
        """
        ints, sent = _end_pose_ints(pose)
        frames = [motion_ctrl_2(0x01, MOVE_P, int(speed))] + end_pose_frames(*ints)
        with self._tx:
            self._send_frames(frames)
        return ints, sent

    def _send_frames(self, frames: list[Frame]) -> None:
        """Send on the SDK's CAN port, in order.

        An emulator's virtual bus takes them in one hand-over (``DirectVirtualBus.send_frames``), a real bus
        one ``SendCanMessage`` each as the SDK sends (its bus-state check and error status included). A
        frame the port does not take is counted in ``send_errors`` (the SDK logs it and goes on; so does
        the control loop, which sends again).
        """
        port = self.sdk.GetCanBus()
        bus = port.send_bus
        if isinstance(bus, DirectVirtualBus):
            try:
                bus.send_frames(frames)
            except can.CanError:
                self.send_errors += len(frames)
            return
        ok = port.CAN_STATUS.SEND_MESSAGE_SUCCESS
        for fid, data in frames:
            if port.SendCanMessage(fid, list(data)) is not ok:
                self.send_errors += 1

    def joint_ctrl(self, q: np.ndarray) -> None:
        """JointCtrl to joints ``q`` (rad; sent in 0.001 deg)."""
        with self._tx:
            self.sdk.JointCtrl(*[round(math.degrees(v) * 1000) for v in q])

    def gripper(self, width: float, effort: float) -> float:
        """GripperCtrl (0.001 mm, 0.001 N m, enabled); returns the width actually encoded (m).

        Encoded by ``wire.gripper_ctrl``, byte for byte the SDK's frame (test_piper_emulator), and sent as
        ``position_command`` sends (``_send_frames``): the teleop stream moves the gripper nearly every tick.
        """
        w = round(width * 1e6)
        frame = gripper_ctrl(w, int(round(effort * 1000)), 0x01)
        with self._tx:
            self._send_frames([frame])
        return w / 1e6

    def mit(self, joint: int, pos: float, vel: float, kp: float, kd: float, t_ff: float) -> float:
        """JointMitCtrl for joint 1..6 in this firmware's dialect; returns the position reference sent (rad).

        ``t_ff`` is the torque field as the firmware reads it (callers divide by the dialect's
        ``torque_gain``).

        SDK frame: the SDK packs with a truncating float->uint map (8 bits for torque: 0.063 N m steps,
        and 0 is not representable); we pre-add half a step so the wire value is the nearest code, and
        clip every value into the SDK's packing range (outside it the packing wraps around). From
        S-V1.8-8 the SDK's frame is misread (``firmware``): we encode the 12-bit frame ourselves and
        send it on the SDK's CAN port.
        """
        if self.dialect.frame == "raw12":
            data = encode_mit_raw12(pos, vel, kp, kd, t_ff, self.dialect.t_range)
            with self._tx:
                self.sdk.GetCanBus().SendCanMessage(ID_MIT_CTRL[joint - 1], list(data))
            return uint_to_float((data[0] << 8) | data[1], *MIT_P, 16)
        vals = []
        for x, (lo, hi), bits in (
            (pos, MIT_P, 16),
            (vel, MIT_V, 12),
            (kp, MIT_KP, 12),
            (kd, MIT_KD, 12),
            (t_ff, MIT_T, 8),
        ):
            half = 0.5 * (hi - lo) / ((1 << bits) - 1)
            vals.append(float(np.clip(x + half, lo, hi)))
        with self._tx:
            self.sdk.JointMitCtrl(joint, *vals)
        return uint_to_float(float_to_uint(vals[0], *MIT_P, 16), *MIT_P, 16)

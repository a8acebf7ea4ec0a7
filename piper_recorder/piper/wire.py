"""Piper V2 CAN wire facts shared by the link and the emulator: frame ids, modes, MIT packing.

Taken from piper_sdk 0.6.2 (piper_msgs/msg_v2/can_id.py, protocol_v2, interface_v2); the emulator
tests prove them against the SDK's own encoder and decoder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

# frame ids (piper_sdk piper_msgs/msg_v2/can_id.py)
ID_STATUS, ID_POSE = 0x2A1, (0x2A2, 0x2A3, 0x2A4)
ID_JOINTS, ID_GRIPPER = (0x2A5, 0x2A6, 0x2A7), 0x2A8
ID_HIGH_SPD, ID_LOW_SPD = tuple(range(0x251, 0x257)), tuple(range(0x261, 0x267))
ID_MOTION_CTRL_2, ID_POSE_CTRL, ID_JOINT_CTRL = 0x151, (0x152, 0x153, 0x154), (0x155, 0x156, 0x157)
ID_GRIPPER_CTRL, ID_MIT_CTRL = 0x159, tuple(range(0x15A, 0x160))
ID_ENABLE, ID_FIRMWARE = 0x471, 0x4AF

MOVE_P, MOVE_J, MOVE_L, MOVE_M, MOVE_MIT = 0x00, 0x01, 0x02, 0x04, 0x06  # MOVE_MIT: S-V1.8-8+
MIT_FLAG = 0xAD
# effort = current * coefficient (piper_sdk ArmMsgFeedbackHighSpd.cal_effort)
TORQUE_COEF = np.array([1.18125, 1.18125, 1.18125, 0.95844, 0.95844, 0.95844])
# JointMitCtrl packing ranges (piper_sdk C_PiperInterface_V2.__JointMitCtrl defaults)
MIT_P, MIT_V, MIT_KP, MIT_KD, MIT_T = (-12.5, 12.5), (-45.0, 45.0), (0.0, 500.0), (-5.0, 5.0), (-8.0, 8.0)


PAIR = struct.Struct(">ii")
"""Two big-endian int32 in one payload: the joint and end-pose feedback frames and the EndPoseCtrl and
JointCtrl commands (0.001 deg / 0.001 mm). The emulator keeps its own layouts on purpose: it is the other
end of the wire, and the tests check each end against piper_sdk separately."""
Frame = tuple[int, bytes]
"""A standard-id CAN data frame: (arbitration id, payload)."""


def motion_ctrl_2(ctrl_mode: int, move_mode: int, speed: int, mit_mode: int = 0x00) -> Frame:
    """MotionCtrl_2 (0x151) as piper_sdk's ``MotionCtrl_2`` encodes it.

    Residence time and installation position 0, two zero bytes; ``speed`` 0-100 %, refused outside it as
    the SDK refuses it.
    """
    if not 0 <= speed <= 100:
        raise ValueError(f"MotionCtrl_2 speed {speed} out of range 0-100")
    return ID_MOTION_CTRL_2, bytes((ctrl_mode, move_mode, speed, mit_mode, 0, 0, 0, 0))


def end_pose_frames(x: int, y: int, z: int, rx: int, ry: int, rz: int) -> list[Frame]:
    """EndPoseCtrl (0x152-0x154) as piper_sdk's ``EndPoseCtrl`` encodes it.

    X,Y | Z,RX | RY,RZ, big-endian int32 in 0.001 mm / 0.001 deg.
    """
    pack = PAIR.pack
    return [(ID_POSE_CTRL[0], pack(x, y)), (ID_POSE_CTRL[1], pack(z, rx)), (ID_POSE_CTRL[2], pack(ry, rz))]


def gripper_ctrl(width: int, effort: int, code: int, set_zero: int = 0x00) -> Frame:
    """GripperCtrl (0x159) as piper_sdk's ``GripperCtrl`` encodes it with its gripper soft limit off.

    Width int32 in 0.001 mm, effort uint16 in 0.001 N m, status code, set-zero flag; the soft limit is off
    as PiperLink constructs the SDK, and the values the SDK's ``ArmMsgGripperCtrl`` refuses are refused here
    the same way.
    """
    if code not in (0x00, 0x01, 0x02, 0x03):
        raise ValueError(f"GripperCtrl status code {code} out of range [0x00, 0x01, 0x02, 0x03]")
    if not 0 <= effort <= 5000:
        raise ValueError(f"GripperCtrl effort {effort} out of range 0-5000")
    if set_zero not in (0x00, 0xAE):
        raise ValueError(f"GripperCtrl set_zero {set_zero} out of range [0x00, 0xAE]")
    return ID_GRIPPER_CTRL, _GRIPPER_CTRL.pack(width, effort, code, set_zero)


_GRIPPER_CTRL = struct.Struct(">iHBB")


def uint_to_float(x: int, lo: float, hi: float, bits: int) -> float:
    """A ``bits``-wide unsigned field code back to its value in [lo, hi] (piper_sdk's ``UintToFloat``)."""
    return x * (hi - lo) / float((1 << bits) - 1) + lo


def float_to_uint(x: float, lo: float, hi: float, bits: int) -> int:
    """Same truncating map as piper_sdk's ``FloatToUint`` (callers clip to [lo, hi] first)."""
    return int((x - lo) * float((1 << bits) - 1) / (hi - lo))


@dataclass
class MitCommand:
    """One joint's decoded JointMitCtrl: position (rad), velocity (rad/s), gains and feed-forward torque (N m)."""

    pos: float
    vel: float
    kp: float
    kd: float
    t_ff: float


def decode_mit(data: bytes, frame: str = "crc8", t_range: tuple[float, float] = MIT_T) -> MitCommand | None:
    """Unpack one 0x15A-0x15F payload as a firmware reading ``frame`` does (``firmware.MitDialect``).

    "crc8": piper_sdk 0.6.2's frame, 8-bit torque and a 4-bit XOR check (None when the check is wrong);
    "raw12": S-V1.8-8 and later, 12-bit torque in bytes 6-7, no check.
    """
    d = bytes(data)
    pos = (d[0] << 8) | d[1]
    vel = (d[2] << 4) | (d[3] >> 4)
    kp = ((d[3] & 0x0F) << 8) | d[4]
    kd = (d[5] << 4) | (d[6] >> 4)
    if frame == "raw12":
        t, t_bits = ((d[6] & 0x0F) << 8) | d[7], 12
    else:
        crc = (d[0] ^ d[1] ^ d[2] ^ d[3] ^ d[4] ^ d[5] ^ d[6]) & 0x0F
        if crc != d[7] & 0x0F:
            return None
        t, t_bits = ((d[6] & 0x0F) << 4) | (d[7] >> 4), 8
    return MitCommand(
        uint_to_float(pos, *MIT_P, 16),
        uint_to_float(vel, *MIT_V, 12),
        uint_to_float(kp, *MIT_KP, 12),
        uint_to_float(kd, *MIT_KD, 12),
        uint_to_float(t, *t_range, t_bits),
    )


def encode_mit_raw12(pos: float, vel: float, kp: float, kd: float, t_ff: float, t_range: tuple[float, float]) -> bytes:
    """The S-V1.8-8+ JointMitCtrl payload (``firmware``), which piper_sdk 0.6.2 cannot encode.

    Each value maps to the nearest code of its field (clipped into the field's range).
    """

    def code(x: float, lo: float, hi: float, bits: int) -> int:
        top = (1 << bits) - 1
        return int(round((min(max(x, lo), hi) - lo) * top / (hi - lo)))

    p, v = code(pos, *MIT_P, 16), code(vel, *MIT_V, 12)
    k, d, t = code(kp, *MIT_KP, 12), code(kd, *MIT_KD, 12), code(t_ff, *t_range, 12)
    return bytes(
        [
            p >> 8,
            p & 0xFF,
            v >> 4,
            ((v & 0x0F) << 4) | (k >> 8),
            k & 0xFF,
            d >> 4,
            ((d & 0x0F) << 4) | (t >> 8),
            t & 0xFF,
        ]
    )

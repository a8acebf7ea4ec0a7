"""FeedbackFrames (no ROS) against piper_sdk's own parser: the same frames, the same values.

Random frames of every kind the decoder handles, values across the whole wire range (so the SDK's
abnormal-data filter drops some of them), fed one by one to both; after each frame every field the
link reads agrees with what the SDK's getters say, stamps included. Frames the decoder does not
handle are left to the SDK.
"""
from __future__ import annotations

import random
import struct

import can
import pytest
from piper_sdk import C_PiperInterface_V2

from piper_recorder.piper.link import FeedbackFrames
from piper_recorder.piper.wire import ID_FIRMWARE, ID_GRIPPER, ID_HIGH_SPD, ID_JOINTS, ID_LOW_SPD, ID_POSE, ID_STATUS


@pytest.fixture(scope="module")
def sdk():
    s = C_PiperInterface_V2(can_name="feedback_frames_test", judge_flag=False, can_auto_init=False)
    s.CreateCanBus("feedback_frames_test", bustype="virtual", judge_flag=False)   # no reader thread: we feed it
    yield s
    s.GetCanBus().recv_bus.shutdown()


def _value(rng: random.Random, bits: int, near: int) -> int:
    """Mostly plausible values, some at or beyond the SDK's filter bounds, some anywhere on the wire."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    r = rng.random()
    if r < 0.7:
        return rng.randint(-near, near)
    if r < 0.85:
        return rng.choice([near, near + 1, -near, -near - 1])
    return rng.randint(lo, hi)


def _frame(rng: random.Random) -> tuple[int, bytes]:
    fid = rng.choice([*ID_POSE, *ID_JOINTS, ID_GRIPPER, *ID_HIGH_SPD])
    if fid in ID_JOINTS:
        return fid, struct.pack(">ii", _value(rng, 32, 3_000_000), _value(rng, 32, 3_000_000))
    if fid == ID_POSE[0]:
        return fid, struct.pack(">ii", _value(rng, 32, 1_000_000), _value(rng, 32, 1_000_000))
    if fid == ID_POSE[1]:
        return fid, struct.pack(">ii", _value(rng, 32, 1_000_000), _value(rng, 32, 361_000))
    if fid == ID_POSE[2]:
        return fid, struct.pack(">ii", _value(rng, 32, 361_000), _value(rng, 32, 361_000))
    if fid == ID_GRIPPER:
        return fid, struct.pack(">ihBB", _value(rng, 32, 150_000), _value(rng, 16, 3000), rng.randint(0, 255), 0)
    return fid, struct.pack(">hhi", _value(rng, 16, 3000), _value(rng, 16, 3000), _value(rng, 32, 100_000))


def _sdk_view(s: C_PiperInterface_V2) -> dict:
    j, e, g, h = s.GetArmJointMsgs(), s.GetArmEndPoseMsgs(), s.GetArmGripperMsgs(), s.GetArmHighSpdInfoMsgs()
    js, ep, gs = j.joint_state, e.end_pose, g.gripper_state
    motors = (h.motor_1, h.motor_2, h.motor_3, h.motor_4, h.motor_5, h.motor_6)
    return {"joints": [js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5, js.joint_6],
            "joint_stamp": j.time_stamp,
            "pose": [ep.X_axis, ep.Y_axis, ep.Z_axis, ep.RX_axis, ep.RY_axis, ep.RZ_axis], "pose_stamp": e.time_stamp,
            "gripper": (gs.grippers_angle, gs.grippers_effort, gs.status_code), "gripper_stamp": g.time_stamp,
            "speed": [m.motor_speed for m in motors], "current": [m.current for m in motors],
            "motor_stamp": h.time_stamp}


def _ours(f: FeedbackFrames) -> dict:
    return {k: getattr(f, k) for k in ("joints", "joint_stamp", "pose", "pose_stamp", "gripper", "gripper_stamp",
                                       "speed", "current", "motor_stamp")}


def test_every_field_agrees_with_the_sdk_frame_by_frame(sdk):
    rng = random.Random(20)
    ours = FeedbackFrames()
    dropped = 0
    for k in range(3000):
        fid, data = _frame(rng)
        msg = can.Message(arbitration_id=fid, data=data, is_extended_id=False, timestamp=1000.0 + k * 1e-3)
        before = _ours(ours)
        assert ours.take(fid, bytes(msg.data), msg.timestamp)
        sdk.ParseCANFrame(msg)
        after = _ours(ours)
        dropped += after == before
        assert after == _sdk_view(sdk), (k, hex(fid), data.hex())
    assert 100 < dropped < 1500, dropped   # the filter did drop frames, and most passed


def test_other_frames_are_left_to_the_sdk():
    f = FeedbackFrames()
    for fid in (ID_STATUS, *ID_LOW_SPD, ID_FIRMWARE, 0x473, 0x476):
        assert not f.take(fid, bytes(8), 1.0)
    assert not f.take(ID_JOINTS[0], bytes(4), 1.0)     # a short frame: the SDK's own rules
    assert f.joint_stamp == 0.0 and f.joints == [0] * 6

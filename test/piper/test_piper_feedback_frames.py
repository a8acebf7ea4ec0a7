"""FeedbackFrames (no ROS) against piper_sdk's own parser: the same frames, the same values.

Random frames of every kind the decoder handles (status included: its enum fields, unnamed values too), values across the whole wire range (so the SDK's
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
    s.CreateCanBus("feedback_frames_test", bustype="virtual", judge_flag=False)  # no reader thread: we feed it
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
    fid = rng.choice([ID_STATUS, *ID_POSE, *ID_JOINTS, ID_GRIPPER, *ID_HIGH_SPD, *ID_LOW_SPD])
    if fid in ID_LOW_SPD:  # voltage, driver and motor temperatures, status byte (bit 6: enabled), bus current
        return fid, struct.pack(
            ">HhbBH",
            rng.randint(0, 0xFFFF),
            _value(rng, 16, 80),
            rng.randint(-128, 127),
            rng.choice([0x40, 0x00, rng.randint(0, 255)]),
            rng.randint(0, 0xFFFF),
        )
    if fid == ID_STATUS:  # enum fields mostly in their named range, sometimes beyond (the SDK's UNKNOWN)
        small = [rng.randint(0, 16) if rng.random() < 0.8 else rng.randint(0, 255) for _ in range(6)]
        return fid, struct.pack(">BBBBBBH", *small, rng.randint(0, 0xFFFF))
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
    low = s.GetArmLowSpdInfoMsgs()
    st = s.GetArmStatus()
    a = st.arm_status
    js, ep, gs = j.joint_state, e.end_pose, g.gripper_state
    motors = (h.motor_1, h.motor_2, h.motor_3, h.motor_4, h.motor_5, h.motor_6)
    return {
        "joints": [js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5, js.joint_6],
        "joint_stamp": j.time_stamp,
        "pose": [ep.X_axis, ep.Y_axis, ep.Z_axis, ep.RX_axis, ep.RY_axis, ep.RZ_axis],
        "pose_stamp": e.time_stamp,
        "gripper": (gs.grippers_angle, gs.grippers_effort, gs.status_code),
        "gripper_stamp": g.time_stamp,
        "speed": [m.motor_speed for m in motors],
        "current": [m.current for m in motors],
        "motor_stamp": h.time_stamp,
        "status": (int(a.ctrl_mode), int(a.arm_status), int(a.mode_feed), int(a.err_code)),
        "status_stamp": st.time_stamp,
        "driver_status": [
            m.foc_status_code for m in (low.motor_1, low.motor_2, low.motor_3, low.motor_4, low.motor_5, low.motor_6)
        ],
        "driver_stamp": low.time_stamp,
        "enabled": all(s.GetArmEnableStatus()),
    }


SNAPSHOT_FIELDS = (
    "joints",
    "joint_stamp",
    "pose",
    "pose_stamp",
    "gripper",
    "gripper_stamp",
    "speed",
    "current",
    "motor_stamp",
    "status",
    "status_stamp",
)


def _ours(f: FeedbackFrames) -> dict:
    return {
        **{k: getattr(f, k) for k in (*SNAPSHOT_FIELDS, "driver_status", "driver_stamp")},
        "enabled": f.drivers_enabled(),
    }


def _snapshot_fields(view: dict) -> dict:
    return {k: view[k] for k in SNAPSHOT_FIELDS}


def test_every_field_agrees_with_the_sdk_frame_by_frame(sdk):
    rng = random.Random(20)
    ours = FeedbackFrames()
    dropped = unnamed = 0
    enabled_seen: set[bool] = set()
    for k in range(3000):
        fid, data = _frame(rng)
        msg = can.Message(arbitration_id=fid, data=data, is_extended_id=False, timestamp=1000.0 + k * 1e-3)
        before, seq = _ours(ours), ours.seq
        assert ours.take(fid, bytes(msg.data), msg.timestamp)
        sdk.ParseCANFrame(msg)
        after = _ours(ours)
        dropped += after == before
        unnamed += fid == ID_STATUS and 0xFF in after["status"][:3] and 0xFF not in data[:3]
        enabled_seen.add(after["enabled"])
        # seq counts exactly the frames that changed what a feedback snapshot holds (not the drivers' status)
        assert (ours.seq == seq) == (_snapshot_fields(after) == _snapshot_fields(before))
        assert after == _sdk_view(sdk), (k, hex(fid), data.hex())
    assert 100 < dropped < 1500, dropped  # the filter did drop frames, and most passed
    assert unnamed > 10, unnamed  # status values the SDK's enums do not name were among them
    assert enabled_seen == {True, False}


def test_other_frames_are_left_to_the_sdk():
    f = FeedbackFrames()
    for fid in (ID_FIRMWARE, 0x473, 0x476):
        assert not f.take(fid, bytes(8), 1.0)
    assert not f.take(ID_JOINTS[0], bytes(4), 1.0)  # a short frame: the SDK's own rules
    assert not f.take(ID_STATUS, bytes(7), 1.0)
    assert f.joint_stamp == 0.0 and f.joints == [0] * 6 and f.status_stamp == 0.0 and f.seq == 0


def test_link_feedback_snapshot_is_rebuilt_only_after_a_frame_and_is_read_only():
    """PiperLink.feedback(): the same snapshot while no frame was taken, a new one after any; its arrays
    cannot be changed by one reader under another.
    """
    import uuid

    import numpy as np

    from piper_recorder.piper import kinematics as kin
    from piper_recorder.piper.link import PiperLink

    link = PiperLink(f"fb-{uuid.uuid4().hex[:8]}", "virtual")
    try:
        f = link.frames
        a = link.feedback()
        assert link.feedback() is a and a.stamp == 0.0 and a.ctrl_mode == 0 and a.status_stamp == 0.0
        q_mdeg = [10_000, 50_000, -40_000, 5_000, 30_000, -20_000]
        for k, fid in enumerate(ID_JOINTS):
            assert f.take(fid, struct.pack(">ii", q_mdeg[2 * k], q_mdeg[2 * k + 1]), 5.0)
        assert f.take(ID_POSE[0], struct.pack(">ii", 300_000, -20_000), 5.1)
        assert f.take(ID_POSE[1], struct.pack(">ii", 250_000, 170_000), 5.1)
        assert f.take(ID_POSE[2], struct.pack(">ii", 60_000, -10_000), 5.1)
        assert f.take(ID_STATUS, struct.pack(">BBBBBBH", 1, 2, 6, 0, 1, 0, 0x0102), 5.2)
        b = link.feedback()
        assert b is not a and link.feedback() is b
        assert np.allclose(b.joints, np.radians(np.array(q_mdeg) / 1000.0), atol=1e-15) and b.stamp == 5.0
        want = np.eye(4)
        want[:3, :3], want[:3, 3] = kin.euler_to_matrix(*np.radians([170.0, 60.0, -10.0])), [0.3, -0.02, 0.25]
        assert np.allclose(b.pose, want, atol=1e-15) and b.pose_stamp == 5.1
        # mode feed 0x06 (MIT on S-V1.8-8) is not one the SDK's enum names: UNKNOWN, as the SDK reports it
        assert (b.ctrl_mode, b.arm_status, b.mode_feed, b.err_code, b.status_stamp) == (1, 2, 0xFF, 0x0102, 5.2)
        for arr in (b.joints, b.pose, b.effort, b.velocity):
            with pytest.raises(ValueError):
                arr[0] = 1.0
        # what the node publishes, read from the frames without a snapshot, is the snapshot's content
        stamp, position, velocity, effort = link.joint_state()
        assert stamp == b.stamp and position == b.joints.tolist() + [b.gripper]
        assert velocity == b.velocity.tolist() + [0.0] and effort == b.effort.tolist() + [b.gripper_effort]
        stamp, xyz, quat = link.flange_pose()
        assert stamp == b.pose_stamp and list(xyz) == b.pose[:3, 3].tolist()
        assert np.allclose(quat, kin.matrix_to_quat(b.pose[:3, :3]), atol=1e-15)
        assert f.take(ID_HIGH_SPD[0], struct.pack(">hhi", 100, 1000, 0), 5.3)
        c = link.feedback()
        assert c is not b and c.effort_stamp == 5.3 and c.velocity[0] == 0.1
        assert f.take(ID_JOINTS[0], struct.pack(">ii", 4_000_000, 0), 5.4)  # 400 deg: dropped, as the SDK does
        assert link.feedback() is c  # a dropped frame changed nothing
    finally:
        link.close()

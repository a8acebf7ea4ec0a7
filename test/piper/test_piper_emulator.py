"""The CAN emulator against piper_sdk itself: the SDK decodes what the emulator sends, the emulator
decodes what the SDK sends (every command the backends use), at the feedback rates of the arm.
"""

from __future__ import annotations

import math
import struct
import time
import uuid

import can
import numpy as np
import pytest
from piper_sdk.kinematics.piper_fk import C_PiperForwardKinematics
from piper_sdk.piper_msgs.msg_v2 import PiperMessage
from piper_sdk.protocol.protocol_v2 import C_PiperParserV2

from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.emulator import PiperEmulator
from piper_recorder.piper.link import PiperLink
from piper_recorder.piper.wire import (
    ID_GRIPPER_CTRL,
    ID_JOINT_CTRL,
    ID_MIT_CTRL,
    ID_MOTION_CTRL_2,
    ID_POSE_CTRL,
    MIT_KD,
    MIT_KP,
    MIT_P,
    MIT_T,
    MIT_V,
    MOVE_J,
    MOVE_M,
    MOVE_P,
    decode_mit,
)

from support.waiting import wait_for

pytestmark = pytest.mark.slow  # the emulator's feedback threads run against wall-clock time


@pytest.fixture
def arm():
    channel = f"piper_emu_{uuid.uuid4().hex[:10]}"
    emu = PiperEmulator(channel).start()
    link = PiperLink(channel, "virtual", sdk_feedback=True)
    wait_for(lambda: link.sdk.GetArmJointMsgs().time_stamp > 0, 2.0, "feedback through the SDK", step=0.01)
    yield emu, link
    link.close()
    emu.stop()


def frames_since(emu: PiperEmulator, fid: int, start: int) -> list[can.Message]:
    return [m for m in emu.rx_log[start:] if m.arbitration_id == fid]


def test_sdk_decodes_joint_pose_gripper_status_and_motor_feedback(arm):
    emu, link = arm
    q = np.array([0.4, 1.1, -0.8, 0.3, -0.6, 1.2])
    with emu._lock:
        emu.q[:] = q
        emu.q_target[:] = q
        emu.gripper = 0.0321
        emu.enabled, emu.ctrl_mode, emu.move_mode = True, 0x01, MOVE_J
    time.sleep(0.1)
    sdk = link.sdk
    js = sdk.GetArmJointMsgs().joint_state
    got = [js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5, js.joint_6]
    assert got == [round(math.degrees(v) * 1000) for v in q]  # 0.001 deg
    # end pose feedback = the SDK's own FK of the joints (0.001 mm, 0.001 deg)
    ep = sdk.GetArmEndPoseMsgs().end_pose
    fk = C_PiperForwardKinematics(0x01).CalFK(list(np.radians(np.array(got) / 1000.0)))[-1]
    assert np.allclose([ep.X_axis / 1000, ep.Y_axis / 1000, ep.Z_axis / 1000], fk[:3], atol=2e-3)
    assert np.allclose([ep.RX_axis / 1000, ep.RY_axis / 1000, ep.RZ_axis / 1000], fk[3:], atol=2e-3)
    g = sdk.GetArmGripperMsgs().gripper_state
    assert g.grippers_angle == 32100 and g.foc_status.driver_enable_status is False
    st = sdk.GetArmStatus().arm_status
    assert int(st.ctrl_mode) == 0x01 and int(st.mode_feed) == MOVE_J and int(st.arm_status) == 0 and st.err_code == 0
    hs = sdk.GetArmHighSpdInfoMsgs()
    assert hs.motor_1.can_id == 0x251 and hs.motor_6.can_id == 0x256
    assert hs.motor_2.pos == round(q[1] * 1000)
    fb = link.feedback()
    assert np.allclose(fb.effort, emu.gravity(q), atol=0.01)  # holding torque, via the SDK's coefficients
    assert np.allclose(fb.pose, kin.fk(fb.joints), atol=5e-5)  # 0.001 deg joint quantisation
    assert link.enabled()  # GetArmEnableStatus: low-speed driver status bit 6 on all six motors
    assert abs(fb.stamp - time.time()) < 0.1  # stamps are host receive time


def test_feedback_rates_through_sdk_reader_thread(arm):
    emu, link = arm
    # what the emulator puts on the bus, counted by a second listener from the frames' own stamps
    spy = can.Bus(interface="virtual", channel=emu.channel)
    try:
        t_end = time.time() + 1.0
        stamps: dict[int, list[float]] = {}
        while time.time() < t_end + 0.2:
            m = spy.recv(timeout=0.05)
            if m is not None and m.timestamp <= t_end:
                stamps.setdefault(m.arbitration_id, []).append(m.timestamp)
    finally:
        spy.shutdown()

    def rate(fid: int) -> float:
        ts = stamps.get(fid, [])
        return (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 2 else 0.0

    # nominal 200 / 100 / 20 Hz; generous margins for a shared 2-core CI box
    for fid in (0x2A1, 0x2A2, 0x2A3, 0x2A4, 0x2A5, 0x2A6, 0x2A7, 0x2A8):
        assert 120 <= rate(fid) <= 230, (hex(fid), rate(fid))
    for fid in range(0x251, 0x257):
        assert 60 <= rate(fid) <= 115, (hex(fid), rate(fid))
    for fid in range(0x261, 0x267):
        assert 10 <= rate(fid) <= 25, (hex(fid), rate(fid))
    # and piper_sdk's own reader thread keeps up with it (its Hz is a 0.1 s window count)
    sdk = link.sdk
    for hz in (
        sdk.GetArmJointMsgs().Hz,
        sdk.GetArmEndPoseMsgs().Hz,
        sdk.GetArmStatus().Hz,
        sdk.GetArmGripperMsgs().Hz,
        sdk.GetArmHighSpdInfoMsgs().Hz,
        sdk.GetArmLowSpdInfoMsgs().Hz,
    ):
        assert hz > 0


def test_firmware_version_query_and_reply(arm):
    emu, link = arm
    assert link.firmware() == emu.cfg.firmware
    link.sdk.SearchPiperFirmwareVersion()
    wait_for(lambda: link.sdk.GetPiperFirmwareVersion() == "S-V1.8-5", 2.0, step=0.01)


def test_enable_disable_and_motion_ctrl_2_modes(arm):
    emu, link = arm
    assert not emu.enabled and not link.enabled()
    link.enable()
    wait_for(lambda: emu.enabled and link.enabled(), 2.0, step=0.01)
    link.mode_position(37)
    wait_for(lambda: (emu.ctrl_mode, emu.move_mode, emu.speed_pct, emu.mit) == (1, MOVE_P, 37, False), 2.0, step=0.01)
    link.mode_joint(60)
    wait_for(lambda: (emu.move_mode, emu.speed_pct, emu.mit) == (MOVE_J, 60, False), 2.0, step=0.01)
    link.mode_mit(80)
    wait_for(lambda: (emu.move_mode, emu.mit) == (MOVE_M, True), 2.0, step=0.01)
    wait_for(lambda: int(link.sdk.GetArmStatus().arm_status.mode_feed) == MOVE_M, 2.0, step=0.01)
    link.disable()
    wait_for(lambda: not emu.enabled and not link.enabled(), 2.0, step=0.01)


def test_sdk_commands_decoded_identically_by_emulator_and_sdk_parser(arm):
    """JointCtrl / MotionCtrl_2 / GripperCtrl frames: the emulator's decoding equals piper_sdk's parser."""
    emu, link = arm
    emu.log_rx = True
    start = len(emu.rx_log)
    link.enable()
    link.mode_joint(45)
    q = np.array([0.5, 0.7, -0.9, 0.2, 0.4, -0.3])
    link.joint_ctrl(q)
    link.gripper(0.0456, 1.5)
    wait_for(lambda: len(frames_since(emu, ID_GRIPPER_CTRL, start)) == 1, 2.0, step=0.01)
    parser = C_PiperParserV2()
    msg = PiperMessage()
    for m in frames_since(emu, ID_MOTION_CTRL_2, start):
        parser.DecodeMessage(m, msg)
        assert (
            msg.arm_motion_ctrl_2.ctrl_mode,
            msg.arm_motion_ctrl_2.move_mode,
            msg.arm_motion_ctrl_2.move_spd_rate_ctrl,
        ) == (1, MOVE_J, 45)
    for fid in ID_JOINT_CTRL:
        (m,) = frames_since(emu, fid, start)
        parser.DecodeMessage(m, msg)
    jc = msg.arm_joint_ctrl
    sdk_q = np.radians(np.array([jc.joint_1, jc.joint_2, jc.joint_3, jc.joint_4, jc.joint_5, jc.joint_6]) / 1000.0)
    assert np.allclose(sdk_q, q, atol=1e-5)
    wait_for(lambda: np.allclose(emu.q_target, sdk_q, atol=1e-9), 2.0, step=0.01)
    (m,) = frames_since(emu, ID_GRIPPER_CTRL, start)
    parser.DecodeMessage(m, msg)
    assert msg.arm_gripper_ctrl.grippers_angle == 45600 and msg.arm_gripper_ctrl.grippers_effort == 1500
    assert msg.arm_gripper_ctrl.status_code == 0x01
    assert emu.gripper_target == pytest.approx(0.0456) and emu.gripper_effort == pytest.approx(1.5)
    # the arm follows: joints and gripper reach the targets, seen through the SDK
    wait_for(lambda: np.allclose(link.feedback().joints, q, atol=2e-4), 3.0, step=0.01)
    wait_for(lambda: abs(link.feedback().gripper - 0.0456) < 1e-5, 3.0, step=0.01)


def test_end_pose_ctrl_scaling_and_firmware_ik(arm):
    emu, link = arm
    emu.log_rx = True
    start = len(emu.rx_log)
    link.enable()
    q_goal = np.array([0.3, 1.0, -1.1, 0.2, 0.5, -0.4])
    ints, sent = link.position_command(100, kin.fk(q_goal))
    # frames 0x152-0x154: X,Y | Z,RX | RY,RZ as big-endian int32 in 0.001 mm / 0.001 deg
    data = b"".join(
        bytes(wait_for(lambda fid=fid: frames_since(emu, fid, start), 2.0, f"frame {fid:#x}", step=0.01)[0].data)
        for fid in (0x152, 0x153, 0x154)
    )
    assert list(struct.unpack(">6i", data)) == ints
    assert np.allclose(sent[:3, 3], kin.fk(q_goal)[:3, 3], atol=1e-6)
    wait_for(lambda: np.allclose(link.feedback().pose[:3, 3], sent[:3, 3], atol=2e-5), 3.0, step=0.01)
    fb = link.feedback()
    assert np.allclose(kin.rotation_error(sent[:3, :3], fb.pose[:3, :3]), 0.0, atol=1e-4)
    # an unreachable pose: the firmware reports "no solution" and keeps the last target
    far = kin.fk(q_goal)
    far[:3, 3] = [1.2, 0.0, 0.2]
    link.position_command(100, far)
    wait_for(lambda: int(link.sdk.GetArmStatus().arm_status.arm_status) == 0x02, 2.0, step=0.01)
    assert emu.ik_failures == 1
    assert np.allclose(link.feedback().pose[:3, 3], sent[:3, 3], atol=2e-5)


def test_position_command_sends_the_sdks_frames_byte_for_byte(arm):
    """``PiperLink.position_command`` encodes MotionCtrl_2 + EndPoseCtrl itself: the frames equal those
    piper_sdk's ``MotionCtrl_2`` + ``EndPoseCtrl`` put on the bus for the same speed and pose, both
    through the emulator's direct virtual bus (one hand-over) and through the SDK's own per-frame send
    (a real bus's path), and the emulated firmware follows them.
    """
    emu, link = arm
    emu.log_rx = True
    link.enable()
    wait_for(lambda: emu.enabled, 2.0, step=0.01)
    sent_ids = (ID_MOTION_CTRL_2, *ID_POSE_CTRL)
    # includes negative fields (two's complement on the wire) and a sub-unit rounding in every field
    pose = kin.fk(np.array([-0.3, 1.0, -1.1, -0.2, 0.5, -0.4]))
    pose[:3, 3] += [-1.23456e-4, 2.5e-10, 7.77e-7]

    def frames(send) -> list[tuple[int, bytes]]:
        start = len(emu.rx_log)
        send()
        wait_for(lambda: len([m for m in emu.rx_log[start:] if m.arbitration_id in sent_ids]) == 4, 2.0, step=0.01)
        return [(m.arbitration_id, bytes(m.data)) for m in emu.rx_log[start:] if m.arbitration_id in sent_ids]

    by_link = frames(lambda: link.position_command(73, pose))
    ints = list(struct.unpack(">6i", b"".join(d for fid, d in by_link[1:])))

    def sdk() -> None:
        link.sdk.MotionCtrl_2(0x01, 0x00, 73, 0x00)
        link.sdk.EndPoseCtrl(*ints)

    by_sdk = frames(sdk)
    assert by_link == by_sdk
    assert [fid for fid, _ in by_link] == [0x151, 0x152, 0x153, 0x154]
    # the send path of a bus that is not the emulator's direct one: the SDK's SendCanMessage per frame
    port = link.sdk.GetCanBus()
    plain = can.Bus(interface="virtual", channel=link.channel, receive_own_messages=False)
    direct, port.send_bus = port.send_bus, plain
    try:
        assert frames(lambda: link.position_command(73, pose)) == by_sdk
    finally:
        port.send_bus = direct
        plain.shutdown()
    assert link.send_errors == 0
    ints, sent = link.position_command(73, pose)
    assert ints == list(struct.unpack(">6i", b"".join(d for fid, d in by_sdk[1:])))
    wait_for(lambda: (emu.move_mode, emu.speed_pct) == (MOVE_P, 73), 2.0, step=0.01)
    wait_for(lambda: np.allclose(link.feedback().pose[:3, 3], sent[:3, 3], atol=2e-5), 3.0, step=0.01)
    with pytest.raises(ValueError, match="speed"):
        link.position_command(101, pose)


def test_gripper_command_sends_the_sdks_frame_byte_for_byte(arm):
    """``PiperLink.gripper`` encodes GripperCtrl itself (``wire.gripper_ctrl``): the frame equals the one
    piper_sdk's ``GripperCtrl`` puts on the bus for the same width and effort, and the emulated gripper follows.
    """
    emu, link = arm
    emu.log_rx = True
    link.enable()
    wait_for(lambda: emu.enabled, 2.0, step=0.01)

    def frame(send) -> tuple[int, bytes]:
        start = len(emu.rx_log)
        send()
        wait_for(lambda: any(m.arbitration_id == ID_GRIPPER_CTRL for m in emu.rx_log[start:]), 2.0, step=0.01)
        (m,) = [m for m in emu.rx_log[start:] if m.arbitration_id == ID_GRIPPER_CTRL]
        return m.arbitration_id, bytes(m.data)

    for width, effort in ((0.0, 0.0), (0.0123456789, 1.0), (0.07, 5.0), (2.5e-7, 0.0004999)):
        w, e = round(width * 1e6), int(round(effort * 1000))
        by_sdk = frame(lambda: link.sdk.GripperCtrl(w, e, 0x01, 0))
        by_link = frame(lambda: link.gripper(width, effort))
        assert by_link == by_sdk, (width, effort)
    assert link.gripper(0.04, 1.0) == 0.04
    wait_for(lambda: abs(emu.gripper - 0.04) < 1e-4, 3.0, step=0.01)
    with pytest.raises(ValueError, match="effort"):  # the SDK's ArmMsgGripperCtrl refuses it as well
        link.gripper(0.04, 5.001)
    assert link.send_errors == 0


def test_a_command_the_bus_does_not_take_is_counted_not_raised(arm):
    _emu, link = arm
    link.sdk.GetCanBus().send_bus.shutdown()  # the emulator's end stays; this end is closed
    link.position_command(50, kin.fk(np.zeros(6)))
    assert link.send_errors == 4


def test_joint_mit_ctrl_packing_and_pd_dynamics(arm):
    emu, link = arm
    emu.log_rx = True
    link.enable()
    wait_for(lambda: emu.enabled, 2.0, step=0.01)
    link.mode_mit(100)
    wait_for(lambda: emu.mit, 2.0, step=0.01)
    start = len(emu.rx_log)
    q0 = link.feedback().joints
    target = q0 + np.array([0.3, 0.2, -0.2, 0.3, -0.3, 0.4])
    kp, kd = [5, 25, 5, 8, 8, 5], [0.3, 1.2, 0.3, 0.45, 0.45, 0.3]
    grav = emu.gravity(target)
    sent_pos = [link.mit(i + 1, target[i], 0.1 * i, kp[i], kd[i], grav[i]) for i in range(6)]
    wait_for(lambda: all(frames_since(emu, fid, start) for fid in ID_MIT_CTRL), 2.0, step=0.01)
    for i, fid in enumerate(ID_MIT_CTRL):
        cmd = decode_mit(bytes(frames_since(emu, fid, start)[0].data))
        assert cmd is not None  # checksum valid
        step = lambda lo, hi, bits: (hi - lo) / ((1 << bits) - 1)  # noqa: E731
        assert abs(cmd.pos - target[i]) <= step(*MIT_P, 16) / 2 + 1e-9 and cmd.pos == pytest.approx(sent_pos[i])
        assert abs(cmd.vel - 0.1 * i) <= step(*MIT_V, 12) / 2 + 1e-9
        assert abs(cmd.kp - kp[i]) <= step(*MIT_KP, 12) / 2 + 1e-9
        assert abs(cmd.kd - kd[i]) <= step(*MIT_KD, 12) / 2 + 1e-9
        assert abs(cmd.t_ff - grav[i]) <= step(*MIT_T, 8) / 2 + 1e-9
    # zero velocity reference from here on; the PD + gravity feed-forward settles on the reference
    for i in range(6):
        link.mit(i + 1, target[i], 0.0, kp[i], kd[i], grav[i])
    wait_for(
        lambda: np.allclose(link.feedback().joints, target, atol=0.03),
        4.0,
        "the joints at the MIT target",
        lambda: str(link.feedback().joints - target),
        step=0.01,
    )
    # corrupt checksum -> ignored and counted
    data = bytearray(frames_since(emu, ID_MIT_CTRL[0], start)[0].data)
    data[7] ^= 0x01
    emu_bus = can.Bus(interface="virtual", channel=emu.channel)
    emu_bus.send(can.Message(arbitration_id=ID_MIT_CTRL[0], data=data, is_extended_id=False))
    emu_bus.shutdown()
    wait_for(lambda: emu.bad_crc == 1, 2.0, step=0.01)


def test_disabled_arm_ignores_motion_commands(arm):
    emu, link = arm
    q0 = emu.joints()
    link.mode_joint(100)
    link.joint_ctrl(q0 + 0.3)
    time.sleep(0.2)
    assert np.allclose(emu.joints(), q0)
    assert np.allclose(emu.q_target, q0)


def test_virtual_bus_hands_the_sent_frame_over_without_copying_it_and_copies_for_a_second_reader():
    """vbus.DirectVirtualBus (the emulator's bus, and the SDK's once PiperLink opened it on
    ``virtual``): the first reader gets the sender's message object, a further reader a copy with
    the same id and bytes; a real bus kind is left alone.
    """
    from can.interfaces.virtual import VirtualBus

    from piper_recorder.piper.vbus import DirectVirtualBus, make_direct

    ch = f"vbus-{uuid.uuid4().hex[:8]}"
    tx = VirtualBus(channel=ch)
    rx1, rx2 = VirtualBus(channel=ch), VirtualBus(channel=ch)
    try:
        assert make_direct(tx) and isinstance(tx, DirectVirtualBus) and make_direct(tx)
        msg = can.Message(arbitration_id=0x151, data=bytes(range(8)), is_extended_id=False)
        tx.send(msg)
        got1, got2 = rx1.recv(1.0), rx2.recv(1.0)
        assert got1 is msg and got2 is not msg
        assert (got2.arbitration_id, bytes(got2.data)) == (0x151, bytes(range(8))) and got1.is_rx and got2.is_rx
        assert tx.recv(0.0) is None  # not its own messages
    finally:
        for b in (tx, rx1, rx2):
            b.shutdown()
    assert not make_direct(object())  # not a virtual bus: untouched


def test_link_on_a_virtual_channel_sends_through_the_direct_bus(arm):
    from piper_recorder.piper.vbus import DirectVirtualBus

    _emu, link = arm
    port = link.sdk.GetCanBus()
    assert isinstance(port.send_bus, DirectVirtualBus) and port.send_bus is port.recv_bus

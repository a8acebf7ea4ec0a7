"""PiperLink's own packing of the streamed commands (MotionCtrl_2, EndPoseCtrl, GripperCtrl) against piper_sdk's
encoder: for the same values both put the same frames on the bus, and both refuse what the SDK refuses."""
from __future__ import annotations

import math
import random
import struct
import uuid

import numpy as np
import pytest
from can.interfaces.virtual import VirtualBus

from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.link import PiperLink


@pytest.fixture
def link_and_tap():
    ch = f"cmd-{uuid.uuid4().hex[:8]}"
    link = PiperLink(ch, "virtual")   # no arm on the channel: ConnectPort's queries go unanswered
    tap = VirtualBus(channel=ch)
    yield link, tap
    link.close()
    tap.shutdown()


def _frames(tap: VirtualBus) -> list[tuple[int, bytes]]:
    out = []
    while (m := tap.recv(0.0)) is not None:
        out.append((m.arbitration_id, bytes(m.data)))
    return out


def test_streamed_commands_are_the_sdks_frames(link_and_tap):
    link, tap = link_and_tap
    _frames(tap)
    rng = random.Random(3)
    for _ in range(300):
        q = [rng.uniform(lo, hi) for lo, hi in zip(kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX)]
        pose = kin.fk(np.array(q))
        speed = rng.randint(0, 100)
        width, effort = rng.uniform(-0.001, 0.08), rng.uniform(0.0, 5.0)
        link.mode_position(speed)
        link.mode_joint(speed)
        ints, sent = link.end_pose(pose)
        w = link.gripper(width, effort)
        ours = _frames(tap)
        sdk = link.sdk
        sdk.MotionCtrl_2(0x01, 0x00, speed, 0x00)
        sdk.MotionCtrl_2(0x01, 0x01, speed, 0x00)
        sdk.EndPoseCtrl(*ints)
        sdk.GripperCtrl(round(width * 1e6), int(round(effort * 1000)), 0x01, 0)
        assert ours == _frames(tap)
        assert w == round(width * 1e6) / 1e6
        # the integers are the pose's, and ``sent`` is the pose they encode
        assert ints[:3] == [round(v * 1e6) for v in pose[:3, 3]]
        assert ints[3:] == [round(math.degrees(v) * 1000) for v in kin.matrix_to_euler(pose[:3, :3])]
        assert np.abs(sent[:3, 3] - pose[:3, 3]).max() <= 0.5e-6 + 1e-12
        assert np.abs(kin.rotation_error(sent[:3, :3], pose[:3, :3])).max() < 1e-4
    link.mode_mit(100)   # S-V1.8-5 (unknown firmware: the SDK's dialect) enters MIT with MOVE M 0x04
    sdk.MotionCtrl_2(0x01, 0x04, 100, 0xAD)
    ours, theirs = _frames(tap)
    assert ours == theirs


def test_what_the_sdk_refuses_is_refused_and_not_sent(link_and_tap):
    link, tap = link_and_tap
    _frames(tap)
    with pytest.raises(ValueError):
        link.mode_position(101)
    with pytest.raises(ValueError):
        link.gripper(0.03, 5.2)   # the SDK's effort range is 0-5 N m
    far = np.eye(4)
    far[0, 3] = 3000.0   # 3 km: beyond int32 in 0.001 mm (the SDK raises OverflowError)
    with pytest.raises(struct.error):
        link.end_pose(far)
    assert _frames(tap) == []


def test_sdk_reader_on_the_virtual_bus_parses_every_frame_in_order_and_survives_a_failing_one(link_and_tap):
    """The SDK's reader thread with the link's draining ReadCanMessage: bursts arrive whole and in order,
    a frame whose parsing raises is dropped and the reader goes on (as the SDK's own ReadCanMessage)."""
    import time

    from piper_recorder.piper.vbus import DirectVirtualBus

    link, _tap = link_and_tap
    port = link.sdk.GetCanBus()
    seen: list[int] = []
    link.set_frame_listener(lambda fid, _stamp: seen.append(fid))
    parse = port.callback_function

    def flaky(msg):
        if msg.arbitration_id == 0x3FF:
            raise RuntimeError("parser failure")
        parse(msg)
    port.callback_function = flaky
    tx = DirectVirtualBus(channel=link.channel)
    try:
        sent = []
        for burst in range(20):
            frames = [(0x300 + (burst * 13 + k) % 0xFF, bytes(8)) for k in range(12)] + [(0x3FF, bytes(8))]
            tx.send_frames(frames)
            sent += [fid for fid, _ in frames if fid != 0x3FF]
            time.sleep(0.002)
        deadline = time.monotonic() + 2.0
        while len(seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [f for f in seen if f >= 0x300] == sent
    finally:
        tx.shutdown()
        link.set_frame_listener(None)

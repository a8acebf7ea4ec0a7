"""PiperLink on python-can's virtual bus: the SDK's reader thread with the link's draining ReadCanMessage."""

from __future__ import annotations

import uuid

import pytest
from can.interfaces.virtual import VirtualBus

from piper_recorder.piper.link import PiperLink


@pytest.fixture
def link_and_tap():
    ch = f"cmd-{uuid.uuid4().hex[:8]}"
    link = PiperLink(ch, "virtual")  # no arm on the channel: ConnectPort's queries go unanswered
    tap = VirtualBus(channel=ch)
    yield link, tap
    link.close()
    tap.shutdown()


def test_sdk_reader_on_the_virtual_bus_parses_every_frame_in_order_and_survives_a_failing_one(link_and_tap):
    """The SDK's reader thread with the link's draining ReadCanMessage: bursts arrive whole and in order,
    a frame whose parsing raises is dropped and the reader goes on (as the SDK's own ReadCanMessage).
    """
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


def test_a_frame_listener_with_ids_is_called_for_those_frames_only(link_and_tap):
    """``set_frame_listener(listener, frame_ids)``: the node listens for the last frame of each feedback set,
    not for every one of the ~2,300 frames a second.
    """
    import time

    from piper_recorder.piper.vbus import DirectVirtualBus

    link, _tap = link_and_tap
    seen: list[int] = []
    link.set_frame_listener(lambda fid, _stamp: seen.append(fid), (0x305, 0x307))
    tx = DirectVirtualBus(channel=link.channel)
    try:
        for _ in range(5):
            tx.send_frames([(0x300 + k, bytes(8)) for k in range(10)])
        deadline = time.monotonic() + 2.0
        while len(seen) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert seen == [0x305, 0x307] * 5
    finally:
        tx.shutdown()
        link.set_frame_listener(None)

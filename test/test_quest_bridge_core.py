"""BridgeCore mapping (what the quest_bridge node publishes), without ROS."""
from __future__ import annotations

import json

from piper_recorder.quest.bridge_core import BridgeCore
from piper_recorder.quest.protocol import Hello, Rejected, parse_line
from piper_recorder.quest.scripts import ScriptedHeadset

S = 10**9


def frame(t=3.0, mono=50.0, **patch):
    obj = ScriptedHeadset("demo").sample(t, mono=mono, frame=9)
    for dev, fields in patch.items():
        obj[dev].update(fields)
    return parse_line(json.dumps(obj))


def test_frame_to_poses_and_joys_with_capture_stamp():
    core = BridgeCore()
    msg = frame(right={"trigger": 0.25, "stick": [0.5, -0.5], "primary": True, "menu": True})
    out = core.handle(msg, 1000 * S)
    assert [p.device for p in out.poses] == ["head", "left", "right"]
    right = out.poses[2]
    assert right.stamp_ns == 1000 * S  # first observation: offset = recv - mono
    assert right.frame_id == "quest_stage"
    assert right.pos == msg.right.pos and right.quat_xyzw == msg.right.quat
    joy = {j.hand: j for j in out.joys}["right"]
    assert joy.axes == (0.25, msg.right.squeeze, 0.5, -0.5)
    assert joy.buttons == (1, 0, 0, 1)  # primary, secondary, stick_click, menu
    assert out.raw == msg.raw and out.hello is None
    # a later frame that arrived 5 ms late is stamped at its capture time, not its arrival
    out2 = core.handle(frame(mono=50.1), 1000 * S + 105_000_000)
    assert out2.poses[0].stamp_ns == 1000 * S + 100_000_000
    assert core.last_delay_ns == 5_000_000


def test_untracked_or_invalid_devices_get_no_pose_but_joy():
    core = BridgeCore()
    out = core.handle(frame(left={"tracked": False}, head={"valid": False}), 5 * S)
    assert [p.device for p in out.poses] == ["right"]
    assert sorted(j.hand for j in out.joys) == ["left", "right"]
    assert core.counters["untracked_left"] == 1 and core.counters["untracked_head"] == 1


def test_hello_and_heartbeat_pass_raw_only():
    core = BridgeCore()
    out = core.handle(parse_line('{"hello": {"app": "q", "v": 2}}'), 1)
    assert out.hello == {"app": "q", "v": 2} and out.raw == '{"hello": {"app": "q", "v": 2}}'
    assert not out.poses and not out.joys
    out = core.handle(parse_line('{"heartbeat": 4}'), 2)
    assert out.raw == '{"heartbeat": 4}' and out.hello is None and not out.poses
    assert core.counters == {"hello": 1, "heartbeat": 1}


def test_frame_rate():
    core = BridgeCore(rate_window_s=1.0)
    for i in range(90):
        core.handle(frame(mono=10 + i / 90), 100 * S + i * S // 90)
    assert 85 <= core.frame_rate_hz(101 * S) <= 91
    assert core.frame_rate_hz(105 * S) == 0.0



def test_a_frame_with_a_hello_key_does_not_replace_the_hello():
    core = BridgeCore()
    core.handle(parse_line('{"hello": {"app": "q", "v": 2}}'), 1)
    obj = ScriptedHeadset("demo").sample(3.0, mono=50.0, frame=9)
    obj["hello"] = {"app": "injected"}
    out = core.handle(parse_line(json.dumps(obj)), 2 * S)
    assert out.hello is None and core.hello == {"app": "q", "v": 2}
    assert [p.device for p in out.poses] == ["head", "left", "right"] and core.counters["frames"] == 1
    for extra in ({"mono": 1.0}, {"head": {}}, {"frame": 3}, {"t": 1.0}, {"heartbeat": 1}):
        try:   # a partial frame is rejected, a heartbeat stays a heartbeat: neither is a hello
            msg = parse_line(json.dumps({"hello": {"app": "x"}, **extra}))
        except Rejected:
            continue
        assert not isinstance(msg, Hello)
        assert core.handle(msg, 3 * S).hello is None
    assert core.hello == {"app": "q", "v": 2}

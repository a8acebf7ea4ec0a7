"""BridgeCore mapping (what the quest_bridge node publishes), without ROS."""

from __future__ import annotations

import json

from piper_recorder.quest.bridge_core import BridgeCore
from piper_recorder.quest.protocol import Hello, Rejected, parse_line
from piper_recorder.quest.scripts import ScriptedHeadset

from support.quest_hellos import UNREPRESENTABLE

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


def test_a_connection_and_a_new_page_start_a_new_source_with_a_fresh_clock():
    """A reload whose clock runs 1,000 s behind the old page's is stamped at its own capture times; the
    same page's hellos again (a controller change, an XR session) are no new source.
    """
    core = BridgeCore()
    assert core.on_connection().source_change
    assert not core.handle(frame(mono=5000.0), 2000 * S).source_change
    assert core.handle(frame(mono=5000.1), 2000 * S + 100_000_000).poses[0].stamp_ns == 2000 * S + 100_000_000
    out = core.handle(parse_line('{"hello": {"client": "web", "page": 2}}'), 2001 * S)
    assert out.source_change and out.hello == {"client": "web", "page": 2}
    later = core.handle(frame(mono=4000.2), 2001 * S + 10_000_000)  # the new page's clock
    assert later.poses[0].stamp_ns == 2001 * S + 10_000_000
    assert core.counters["source_changes"] == 2
    again = core.handle(parse_line('{"hello": {"client": "web", "page": 2, "mode": "immersive-ar"}}'), 2001 * S)
    assert not again.source_change and core.handle(frame(mono=4000.25), 2001 * S + 60_000_000).poses
    assert not core.handle(parse_line('{"hello": {"app": "native"}}'), 2001 * S).source_change
    outs = core.handle_batch([frame(mono=4000.3), parse_line('{"hello": {"page": 3}}'), frame(mono=10.0)], 2002 * S)
    assert [o.source_change for o in outs] == [False, True, False]  # in the order the bytes came
    assert core.counters["source_changes"] == 3


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
        try:  # a partial frame is rejected, a heartbeat stays a heartbeat: neither is a hello
            msg = parse_line(json.dumps({"hello": {"app": "x"}, **extra}))
        except Rejected:
            continue
        assert not isinstance(msg, Hello)
        assert core.handle(msg, 3 * S).hello is None
    assert core.hello == {"app": "q", "v": 2}


def _backlog(n=180, release_at=90, regrip_at=None, press=()):
    """N frames of a 90 Hz stream, all read at once; the right grip opens at ``release_at``."""
    msgs = []
    for i in range(n):
        squeeze = 1.0 if i < release_at or (regrip_at is not None and i >= regrip_at) else 0.0
        msgs.append(
            frame(
                t=3.0 + i / 90,
                mono=50.0 + i / 90,
                right={"squeeze": squeeze, "pos": [0.2 + i * 1e-4, 1.1, -0.35], "primary": i in press},
            )
        )
    return msgs


def test_backlog_is_coalesced_for_control_but_every_raw_line_is_kept():
    core = BridgeCore()
    core.handle(frame(mono=49.0), 999 * S)  # the clock mapping is already established
    msgs = _backlog()
    outs = core.handle_batch(msgs, 1003 * S)  # 2 s of frames read in one go
    assert [o.raw for o in outs] == [m.raw for m in msgs]
    poses = [p for o in outs for p in o.poses]
    assert sorted(p.device for p in poses) == ["head", "left", "right"]  # the newest of each, nothing else
    right = next(p for p in poses if p.device == "right")
    assert right.pos == msgs[-1].right.pos
    right_joys = [j for o in outs for j in o.joys if j.hand == "right"]
    assert [j.axes[1] for j in right_joys] == [0.0, 0.0]  # the release (first open line) and the newest
    assert core.counters["coalesced"] == 180 * 5 - 3 - len([j for o in outs for j in o.joys])


def test_release_in_a_backlog_survives_a_later_regrip_and_button_edges_are_kept():
    core = BridgeCore()
    outs = core.handle_batch(_backlog(release_at=60, regrip_at=120, press=range(30, 40)), 5 * S)
    right = [(j.axes[1], j.buttons[0]) for o in outs for j in o.joys if j.hand == "right"]
    # press edge (down at 30, up at 40), the release at 60 (lowest grip), the newest (grip closed again)
    assert right == [(1.0, 1), (1.0, 0), (0.0, 0), (1.0, 0)]
    squeezes = [s for s, _ in right]
    assert squeezes.index(0.0) < len(squeezes) - 1  # the release goes out before the re-grip


def test_single_message_batch_is_not_coalesced():
    core = BridgeCore()
    (out,) = core.handle_batch([frame()], 5 * S)
    assert len(out.poses) == 3 and len(out.joys) == 2 and core.counters["coalesced"] == 0


def test_hellos_that_cannot_be_represented_are_refused_by_name_and_the_good_one_kept():
    from piper_recorder.quest.protocol import StreamParser

    parser, core = StreamParser(), BridgeCore()
    good = b'{"hello":{"app":"q","v":2,"s":"\\ud83d\\ude00"}}'  # a surrogate pair is a character: fine
    outs = core.handle_batch(parser.feed(good + b"\n"), 1)
    assert outs[0].hello_json is not None and json.loads(outs[0].hello_json) == {"app": "q", "v": 2, "s": "\U0001f600"}
    for reason, lines in UNREPRESENTABLE.items():
        for line in lines:
            before = parser.rejected[reason]
            assert core.handle_batch(parser.feed(line + b"\n"), 2) == []
            assert parser.rejected[reason] == before + 1, (reason, parser.last_rejection)
    assert parser.accepted == {"hello": 1} and core.hello == {"app": "q", "v": 2, "s": "\U0001f600"}
    assert parser.rejected_total == sum(map(len, UNREPRESENTABLE.values()))


def test_a_hello_that_cannot_be_encoded_is_dropped_and_counted_not_raised():
    """Behind the parser: a Hello built another way with a value json cannot encode never reaches
    /quest/hello, and nothing raises into the client thread (which would drop the batch's raw lines).
    """
    core = BridgeCore()
    out = core.handle(Hello(info={"app": "x", "v": float("nan")}, raw="{}"), 1)
    assert out.hello_json is None and out.hello is None and out.raw == "{}"
    assert core.counters["unencodable_hello"] == 1 and core.hello is None

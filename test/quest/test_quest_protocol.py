"""Parser unit tests: framing across reads, validation by reason, raw text kept, no non-finite output."""

from __future__ import annotations

import json
import math

import pytest

from piper_recorder.quest.protocol import (
    Frame,
    HandSample,
    Heartbeat,
    Hello,
    Rejected,
    StreamParser,
    encode,
    parse_line,
)
from piper_recorder.quest.scripts import ScriptedHeadset


def frame_dict(t: float = 2.0) -> dict:
    return ScriptedHeadset("demo").sample(t, mono=100.0 + t, frame=7)


def line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def test_frame_fields_are_typed_and_raw_kept():
    obj = frame_dict()
    msg = parse_line(json.dumps(obj))
    assert isinstance(msg, Frame)
    assert msg.mono == pytest.approx(102.0) and msg.frame == 7 and msg.space == "stage"
    assert isinstance(msg.right, HandSample) and msg.right.usable
    assert msg.right.pos == pytest.approx(tuple(obj["right"]["pos"]))
    assert msg.right.squeeze == pytest.approx(obj["right"]["squeeze"])
    assert json.loads(msg.raw) == obj


def test_split_across_every_boundary_gives_same_messages():
    data = line({"hello": {"app": "x"}}) + line(frame_dict(1.5)) + line({"heartbeat": 3, "state": "FOCUSED"})
    whole = StreamParser().feed(data)
    assert [type(m) for m in whole] == [Hello, Frame, Heartbeat]
    for cut in range(1, len(data)):
        p = StreamParser()
        got = p.feed(data[:cut]) + p.feed(data[cut:])
        assert [m.raw for m in got] == [m.raw for m in whole]
    p = StreamParser()
    got = [m for b in data for m in p.feed(bytes([b]))]
    assert [m.raw for m in got] == [m.raw for m in whole]


def test_crlf_and_blank_lines():
    p = StreamParser()
    out = p.feed(b"\r\n" + json.dumps(frame_dict()).encode() + b"\r\n\n")
    assert len(out) == 1 and not out[0].raw.endswith("\r")
    assert p.rejected["empty"] == 2


def _reason(obj_or_text) -> str:
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
    with pytest.raises(Rejected) as exc:
        parse_line(text)
    return exc.value.reason


def mutate(path: str, value):
    obj = frame_dict()
    *parents, last = path.split(".")
    cur = obj
    for k in parents:
        cur = cur[k]
    if value is KeyError:
        del cur[last]
    else:
        cur[last] = value
    return obj


@pytest.mark.parametrize(
    "path,value,reason",
    [
        ("right.pos", [0.0, 1.0], "bad_type"),
        ("right.pos", [0.0, "1", 2.0], "bad_type"),
        ("right.pos", [0.0, True, 2.0], "bad_type"),
        ("right.quat", [0.0, 0.0, 0.0, 2.0], "quat_norm"),
        ("right.quat", [0.0, 0.0, 0.0, 0.85], "quat_norm"),
        ("right.trigger", 1.5, "out_of_range"),
        ("right.squeeze", -0.01, "out_of_range"),
        ("right.stick", [0.0, 1.2], "out_of_range"),
        ("right.primary", 1, "bad_type"),
        ("right.valid", "yes", "bad_type"),
        ("right.menu", KeyError, "missing_field"),
        ("head.pos", KeyError, "missing_field"),
        ("left", [1, 2], "bad_type"),
        ("frame", 1.5, "bad_type"),
        ("frame", -1, "out_of_range"),
        ("frame", 2**70, "out_of_range"),
        ("mono", "now", "bad_type"),
        ("t", KeyError, "missing_field"),
        ("space", "../etc", "bad_type"),
        ("state", 3, "bad_type"),
        ("right.pos", [0.0, 10**400, 0.0], "non_finite"),
    ],
)
def test_field_validation_reasons(path, value, reason):
    assert _reason(mutate(path, value)) == reason


@pytest.mark.parametrize(
    "text,reason",
    [
        ('{"t": NaN, "mono": 1}', "non_finite"),
        ('{"heartbeat": Infinity}', "non_finite"),
        ('{"heartbeat": 1, "mono": -Infinity}', "non_finite"),
        ('{"mono": 1e999}', "non_finite"),
        ("[1, 2]", "not_object"),
        ('"x"', "not_object"),
        ('{"mono"', "bad_json"),
        ("[" * 50000, "too_deep"),
        ('{"foo": 1}', "unknown_kind"),
        ('{"hello": 3}', "bad_type"),
        ('{"hello": {"v": 1e400}}', "non_finite"),
        ('{"heartbeat": [1]}', "bad_type"),
    ],
)
def test_line_level_reasons(text, reason):
    assert _reason(text) == reason


@pytest.mark.parametrize(
    "path,value",
    [
        ("right.pos", [0.0, math.nan, 0.0]),
        ("right.trigger", math.inf),
        ("mono", -math.inf),
        ("head.quat", [0.0, 0.0, 0.0, math.nan]),
    ],
)
def test_nan_inside_frame_rejected_as_non_finite(path, value):
    text = json.dumps(mutate(path, value))  # Python's json writes NaN / Infinity literals
    assert "NaN" in text or "Infinity" in text
    assert _reason(text) == "non_finite"


def test_bad_utf8_counted():
    p = StreamParser()
    assert p.feed(b"\xff\xfe{}\n") == []
    assert p.rejected["bad_utf8"] == 1


def test_quaternion_normalised_within_tolerance_and_invalid_device_tolerated():
    obj = mutate("right.quat", [0.0, 0.0, 0.0, 1.05])
    msg = parse_line(json.dumps(obj))
    assert msg.right.quat == (0.0, 0.0, 0.0, 1.0)
    obj = mutate("left.quat", [0.0, 0.0, 0.0, 0.0])
    obj["left"]["valid"] = False
    msg = parse_line(json.dumps(obj))
    assert msg.left.quat == (0.0, 0.0, 0.0, 1.0) and not msg.left.usable
    assert msg.right.usable


def test_too_long_line_discarded_until_newline_and_counted_once():
    p = StreamParser(max_line_bytes=1000)
    good = line(frame_dict())
    assert len(good) < 1000
    huge = b"x" * 5000
    out = []
    for i in range(0, len(huge), 700):  # the oversize line arrives over several reads
        out += p.feed(huge[i : i + 700])
    out += p.feed(b"yyy\n" + good)
    assert len(out) == 1 and isinstance(out[0], Frame)
    assert p.rejected == {"too_long": 1}
    # an oversize line whose newline arrives in the same read
    assert len(p.feed(b"z" * 2000 + b"\n" + good)) == 1
    assert p.rejected["too_long"] == 2
    # exactly at the limit is fine (the limit excludes the newline)
    pad = json.dumps({"heartbeat": 1, "state": "x" * 0})
    exact = pad[:-1] + " " * (1000 - len(pad)) + "}"
    assert len(exact) == 1000 and len(p.feed(exact.encode() + b"\n")) == 1


def test_counters_and_reset():
    p = StreamParser()
    p.feed(line({"hello": {}}) + b"garbage\n" + line(frame_dict()) + b'{"mono": ')
    assert p.accepted == {"hello": 1, "frame": 1}
    assert p.rejected == {"bad_json": 1} and p.rejected_total == 1
    assert "bad_json" in p.last_rejection
    p.reset()  # the partial line of the previous connection is dropped, counters kept
    assert len(p.feed(line(frame_dict()))) == 1
    assert p.rejected_total == 1


def test_heartbeat_and_hello():
    hb = parse_line('{"heartbeat": 12, "state": "FOCUSED", "mono": 5.5}')
    assert isinstance(hb, Heartbeat) and hb.value == 12 and hb.state == "FOCUSED" and hb.mono == 5.5
    hello = parse_line('{"hello": {"app": "quest", "version": "1.2"}}')
    assert isinstance(hello, Hello) and hello.info["app"] == "quest"


def test_encode_refuses_nan():
    with pytest.raises(ValueError):
        encode({"x": math.nan})
    assert encode({"cmd": "haptic"}) == b'{"cmd":"haptic"}\n'


@pytest.mark.parametrize(
    "text",
    [
        '{"hello": {"v": ' + "9" * 320 + ".5}}",  # overflows without an exponent
        '{"hello": {"v": [1, {"w": 2.5E+400}]}}',  # capital E, nested
        '{"heartbeat": 1, "x": 1.0e999}',
    ],
)
def test_overflowing_literals_anywhere_rejected_as_non_finite(text):
    """Numbers that overflow to inf, with or without an exponent, anywhere in a line."""
    assert _reason(text) == "non_finite"


def test_exponents_that_stay_finite_are_accepted():
    obj = frame_dict()
    obj["right"]["pos"][0] = 1.5e-05
    msg = parse_line(json.dumps(obj))
    assert isinstance(msg, Frame) and msg.right.pos[0] == 1.5e-05


def test_a_leading_bom_is_reported_as_json_loads_reports_it():
    with pytest.raises(Rejected) as exc:
        parse_line("\ufeff" + json.dumps(frame_dict()))
    with pytest.raises(ValueError) as ref:
        json.loads("\ufeff{}")
    assert exc.value.reason == "bad_json" and exc.value.detail == str(ref.value)[:80]


def test_parsed_frames_equal_the_plain_per_number_validation():
    """The inline fast path of ``_floats``/``_pose`` gives exactly what validating each number does."""
    for k in range(200):
        obj = ScriptedHeadset("continuous", seed=k).sample(0.37 * k, mono=10.0 + k, frame=k)
        msg = parse_line(json.dumps(obj))
        assert isinstance(msg, Frame)
        for name in ("head", "left", "right"):
            dev = getattr(msg, name)
            q = [float(v) for v in obj[name]["quat"]]
            n = math.sqrt(sum(v * v for v in q))
            assert dev.pos == tuple(float(v) for v in obj[name]["pos"])
            assert dev.quat == tuple(v / n for v in q)

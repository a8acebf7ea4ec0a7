"""Fuzz the parser and the bridge core with >= 10,000 generated lines split across random reads.

Seeded ``random`` (reproducible): valid frames, frames with one field mutated into a wrong type,
NaN/Infinity literal, overflowing number, out-of-range or unnormalised value, truncated lines,
binary garbage, oversize lines, and hello/heartbeat variants. Invariants: nothing raises, every
line is accounted for (accepted + rejected = lines), chunking never changes the result, and every
number the bridge core outputs is finite with unit quaternions and stamps never after arrival.
"""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from piper_recorder.quest.bridge_core import BridgeCore
from piper_recorder.quest.protocol import StreamParser
from piper_recorder.quest.scripts import ScriptedHeadset

pytestmark = pytest.mark.slow  # fuzzing

N_LINES = 12_000
MAX_LINE = 4096
HEADSET = ScriptedHeadset("demo")

EVIL_VALUES = [
    math.nan,
    math.inf,
    -math.inf,
    1e999,
    -1e308,
    10**30,
    2**64,
    -1,
    0,
    1.0000001,
    2,
    -2,
    True,
    False,
    None,
    "",
    "1.0",
    [],
    [1],
    [0.0] * 3,
    [0.0] * 4,
    [math.nan] * 4,
    {},
    {"a": 1},
    [[1, 2]],
    "NaN",
    1e-320,
    -0.0,
    0.5,
]


def _paths(obj, prefix=()):
    for k, v in obj.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))
        elif isinstance(v, list):
            for i in range(len(v)):
                yield prefix + (k, i)


def _set(obj, path, value):
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    if value is KeyError:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value


def gen_line(rng: random.Random, i: int) -> bytes:
    kind = rng.random()
    t = i / 90.0
    frame = HEADSET.sample(t, mono=50.0 + t, frame=i)
    if kind < 0.25:
        return json.dumps(frame).encode()
    if kind < 0.55:  # one or more fields mutated
        obj = copy.deepcopy(frame)
        for _ in range(rng.randint(1, 3)):
            paths = list(_paths(obj))
            path = rng.choice(paths)
            value = KeyError if rng.random() < 0.1 else copy.deepcopy(rng.choice(EVIL_VALUES))
            try:
                _set(obj, path, value)
            except (KeyError, IndexError, TypeError):
                pass
        return json.dumps(obj).encode()  # may contain NaN / Infinity literals
    if kind < 0.62:  # unnormalised / degenerate quaternion, maybe on an invalid device
        obj = copy.deepcopy(frame)
        dev = rng.choice(["head", "left", "right"])
        scale = rng.choice([0.0, 0.5, 0.89, 0.95, 1.05, 1.11, 3.0, 1e200])
        obj[dev]["quat"] = [q * scale for q in obj[dev]["quat"]]
        obj[dev]["valid"] = rng.random() < 0.5
        return json.dumps(obj).encode()
    if kind < 0.70:  # truncated
        text = json.dumps(frame).encode()
        return text[: rng.randrange(len(text))]
    if kind < 0.77:  # binary garbage (may contain newlines: several garbage lines)
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
    if kind < 0.80:  # oversize
        return b'{"pad": "' + b"x" * rng.randint(MAX_LINE, 3 * MAX_LINE) + b'"}'
    if kind < 0.86:
        return json.dumps(
            rng.choice(
                [
                    {"hello": {"app": "fuzz", "n": rng.random()}},
                    {"hello": rng.choice(EVIL_VALUES)},
                    {"heartbeat": rng.choice(EVIL_VALUES), "state": rng.choice(["FOCUSED", 3, None])},
                    {"heartbeat": i, "mono": rng.choice(EVIL_VALUES)},
                ]
            )
        ).encode()
    if kind < 0.92:  # wild clock values on otherwise valid frames
        obj = copy.deepcopy(frame)
        obj["mono"] = rng.choice([0.0, -5.0, 1e9, 1e9 + 1, 50.0 + t + rng.uniform(-100, 100), 1e-9])
        return json.dumps(obj).encode()
    return rng.choice([b"", b" ", b"null", b"[]", b"{}", b'{"mono": 1}', b"\xc3\x28", b"{" * 3000, b"1" * 5000])


def _check_output(out, recv_ns):
    for p in out.poses:
        assert all(math.isfinite(v) for v in (*p.pos, *p.quat_xyzw)), p
        assert abs(math.sqrt(sum(q * q for q in p.quat_xyzw)) - 1.0) < 1e-9
        assert isinstance(p.stamp_ns, int) and recv_ns - 60 * 10**9 <= p.stamp_ns <= recv_ns
        assert p.frame_id.startswith("quest_")
    for j in out.joys:
        assert all(math.isfinite(v) for v in j.axes), j
        assert 0 <= j.axes[0] <= 1 and 0 <= j.axes[1] <= 1 and all(-1 <= a <= 1 for a in j.axes[2:])
        assert all(b in (0, 1) for b in j.buttons)
        assert isinstance(j.stamp_ns, int) and j.stamp_ns <= recv_ns
    if out.hello is not None:
        json.dumps(out.hello, allow_nan=False)
    if out.raw is not None:
        assert "\n" not in out.raw


def test_fuzz_parser_and_bridge_core():
    rng = random.Random(20240607)
    lines = [gen_line(rng, i) for i in range(N_LINES)]
    stream = b"\n".join(lines) + b"\n"
    n_physical = stream.count(b"\n")  # garbage may itself contain newlines

    # whole-stream reference
    ref = StreamParser(max_line_bytes=MAX_LINE)
    ref_msgs = ref.feed(stream)
    assert sum(ref.accepted.values()) + ref.rejected_total == n_physical
    assert len(ref_msgs) >= N_LINES // 5  # enough valid traffic to exercise the core
    assert ref.rejected["too_long"] > 0 and ref.rejected["non_finite"] > 0 and ref.rejected["quat_norm"] > 0

    # random read boundaries, through the bridge core
    parser = StreamParser(max_line_bytes=MAX_LINE)
    core = BridgeCore()
    recv_ns = 1_700_000_000 * 10**9
    pos = 0
    got = []
    poses = 0
    while pos < len(stream):
        n = rng.choice([1, 2, 7, 64, 512, 1500, 4096, 65536])
        chunk = stream[pos : pos + n]
        pos += n
        recv_ns += rng.randint(0, 20_000_000)
        if rng.random() < 0.002:
            core.on_connection()
        for msg in parser.feed(chunk):
            got.append(msg.raw)
            out = core.handle(msg, recv_ns)
            _check_output(out, recv_ns)
            poses += len(out.poses)
    assert got == [m.raw for m in ref_msgs]
    assert parser.rejected == ref.rejected and parser.accepted == ref.accepted
    assert poses > 0 and core.counters["non_finite_output"] == 0

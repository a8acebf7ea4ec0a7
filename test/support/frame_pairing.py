"""Row/frame pairing on synthetic stamps: a camera with a phase, jitter and drops against the row grid, fed
with the arm inputs through the episode assembler like the live tick thread; ``check`` proves that the
counters say what the rows hold and that no row holds a capture from after it.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from piper_recorder.assembly import AssemblyConfig, EpisodeAssembler

MS = 1_000_000
SEC = 1_000_000_000
START = 1_700_000_000_000_000_000 + 123_456_789
FPS = 30
PERIOD = SEC / FPS


class Rows:
    def __init__(self):
        self.rows = []

    def row(self, row):
        self.rows.append(row)

    def frame(self, camera, frame, t):
        raise AssertionError("rows carry the frames in nominal mode")

    def raw_quest(self, line):
        pass


def camera(seconds, phase_ms, jitter_ms, fps=FPS, seed=0, skip=()):
    """Capture stamps of a camera at ``fps`` whose slots sit ``phase_ms`` after the row grid, each
    moved by a uniform ±jitter_ms; slot indices in ``skip`` are not captured (a real drop).
    """
    rng = random.Random(seed)
    out = []
    for i in range(-3, int(seconds * fps) + 4):
        if i in skip:
            continue
        out.append(START + round(i * SEC / fps + phase_ms * MS + rng.uniform(-jitter_ms, jitter_ms) * MS))
    return sorted(out)


def assemble(stamps, seconds, mode="nominal", depth=False, transport=None, lateness_s=0.1):
    """Feed arm inputs at 100 Hz and the frames at stamp + transport, advancing like a live tick thread."""
    cfg = AssemblyConfig(fps=FPS, cameras=("cam",), timestamp_mode=mode, lateness_s=lateness_s, stale_s=0.25)
    sink = Rows()
    asm = EpisodeAssembler(cfg, START, sink, depth=depth)
    transport = transport or (lambda i, s: 2 * MS)
    events = []
    for i in range(-10, int(seconds * 100) + 10):
        s = START + i * 10 * MS
        events.append((s + MS, 0, "arm", s))
    for i, s in enumerate(stamps):
        events.append((s + transport(i, s), 1, "frame", s))
    events.sort()
    end = START + round(seconds * SEC)
    rgb = np.zeros((2, 2, 3), np.uint8)
    d = np.zeros((2, 2), np.uint16) if depth else None
    for arrival, _, kind, s in events:
        if arrival > end + cfg.delay_ns(depth):
            break
        asm.advance(arrival)
        if kind == "arm":
            asm.add_joint_state(s, [0.0] * 7)
            asm.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
            asm.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
            asm.add_commanded_gripper(s, 0.0)
        else:
            asm.add_frame("cam", s, rgb, d)
    c = asm.finish(end)
    return [(r.tick_ns, r.frames["cam"].stamp_ns) for r in sink.rows], c


def check(pairs, stamps, c):
    """What the counters say equals what the rows hold: repeats, drops; returns the offsets (ns)."""
    used = [s for _, s in pairs]
    repeats = sum(1 for a, b in itertools.pairwise(used) if a == b)
    assert used == sorted(used)
    drops = sum(1 for s in stamps if used[0] < s < used[-1] and s not in set(used))
    assert c.frames_repeated["cam"] == repeats and c.frames_dropped["cam"] == drops
    new = [(t, s) for j, (t, s) in enumerate(pairs) if j == 0 or s != pairs[j - 1][1]]
    signed = [s - t for t, s in new]
    offsets = [abs(o) for o in signed]
    assert c.frames_ahead["cam"] == sum(1 for o in signed if o > 0)
    assert c.frame_ahead_max_ms["cam"] == pytest.approx(max([0, *signed]) / 1e6, abs=1e-3)
    assert c.frame_behind_max_ms["cam"] == pytest.approx(max([0, *(-o for o in signed)]) / 1e6, abs=1e-3)
    assert c.frame_offset_max_ms["cam"] == pytest.approx(max(offsets) / 1e6, abs=1e-3)
    # causal: never a capture more than the 1 ms tolerance after its row
    assert max(signed) <= MS
    return repeats, drops, offsets


def slot_of(stamp, phase_ms, fps=FPS):
    """The camera slot i (``camera``) a capture stamp belongs to."""
    return round((stamp - START - phase_ms * MS) * fps / SEC)


def lag(pairs, phase_ms):
    """How many slots behind its row each row's frame is: row k holds slot k - lag (constant when locked)."""
    return {
        round((t - START) * FPS / SEC) - slot_of(s, phase_ms)
        for j, (t, s) in enumerate(pairs)
        if j == 0 or s != pairs[j - 1][1]
    }

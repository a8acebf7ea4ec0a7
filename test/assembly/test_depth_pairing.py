"""RGB-D colour/depth pairing by nearest stamp within half a frame period: realsense
without ``enable_sync`` stamps depth and colour a few ms apart; every capture still pairs with its own
half, in any arrival order, and what cannot pair is counted in the episode's counters.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from piper_recorder.assembly import AssemblyConfig, DepthPairer
from piper_recorder.recording.controller import EpisodeController
from piper_recorder.recording.targets import RgbdTarget

MS = 1_000_000
PERIOD = 1e9 / 30


def captures(n, depth_offset_ms, t0=10**18, seed=0):
    """(colour stamp, depth stamp) of n captures at 30 fps, depth offset by a few ms with ±1 ms jitter."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        c = t0 + round(i * PERIOD) + rng.randint(-MS, MS)
        out.append((c, c + round(depth_offset_ms * MS) + rng.randint(-MS, MS)))
    return out


def interleave(caps, seed):
    """Both topics' messages in one arrival order: each topic in stamp order, the two shuffled against
    each other by up to 3 frames (separate DDS topics).
    """
    rng = random.Random(seed)
    msgs = [(c + rng.randint(0, 90 * MS), "color", i, c) for i, (c, _) in enumerate(caps)]
    msgs += [(d + rng.randint(0, 90 * MS), "depth", i, d) for i, (_, d) in enumerate(caps)]
    per = {"color": sorted(m for m in msgs if m[1] == "color"), "depth": sorted(m for m in msgs if m[1] == "depth")}
    for k in per:  # one topic is delivered in order: sort each topic's arrivals, keep its stamp order
        stamps = sorted(m[3] for m in per[k])
        per[k] = [(a, k, i, s) for (a, _, i, _), s in zip(per[k], stamps)]
    return sorted(per["color"] + per["depth"])


@pytest.mark.parametrize("offset_ms", [4.0, -4.0, 0.0, 12.0, -15.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_capture_pairs_with_its_own_depth_in_any_arrival_order(offset_ms, seed):
    caps = captures(90, offset_ms, seed=seed)
    p = DepthPairer(PERIOD)
    got = []
    for _, kind, _, s in interleave(caps, seed):
        idx = next(i for i, c in enumerate(caps) if c[0 if kind == "color" else 1] == s)
        got += p.add_color(s, idx) if kind == "color" else p.add_depth(s, idx)
    assert [(s, rgb) for s, rgb, _ in got] == [(c, i) for i, (c, _) in enumerate(caps)]
    assert all(rgb == d for _, rgb, d in got) and p.unpaired == 0


def test_a_missing_depth_image_costs_one_unpaired_colour_image():
    caps = captures(30, 5.0, seed=3)
    p = DepthPairer(PERIOD)
    got = []
    for i, (c, d) in enumerate(caps):
        got += p.add_color(c, i)
        if i != 12:
            got += p.add_depth(d, i)
    assert [rgb for _, rgb, _ in got] == [i for i in range(30) if i != 12]
    assert all(rgb == d for _, rgb, d in got) and p.unpaired == 1
    far = DepthPairer(PERIOD)  # more than half a period apart: never a pair
    assert far.add_color(0, "c") == [] and far.add_depth(round(PERIOD / 2) + 1, "d") == []
    far.add_depth(round(PERIOD * 1.6), "d2")
    assert far.unpaired == 1


class RgbdWriter:
    """Records which colour and depth image each observation got."""

    def __init__(self):
        self.obs, self.ended = [], []

    def start_episode(self, seed=None, meta=None):
        self.obs = []
        return len(self.ended)

    def add_observation(self, rgb, depth, state):
        self.obs.append((int(rgb[0, 0, 0]), int(depth[0, 0])))

    def add_transition(self, action, reward, terminal=False, timeout=False):
        pass

    def end_episode(self, success=None, meta=None):
        self.ended.append(list(self.obs))
        return {}

    def discard_episode(self):
        pass

    def close(self):
        pass


def test_rgbd_episode_pairs_offset_depth_and_counts_the_unpaired():
    w = RgbdWriter()
    cfg = AssemblyConfig(fps=30, cameras=("cam_front",), lateness_s=0.1, timestamp_mode="nominal")
    c = EpisodeController(
        RgbdTarget(w, "cam_front"),
        cfg,
        recorder="rgbd_recorder",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
    )
    t0 = time.time_ns()
    caps = captures(60, 4.0, t0=t0 - 50 * MS, seed=4)  # depth 4 ms after colour, as without enable_sync
    assert c.start("", lambda: t0).ok
    k = 0
    for i in range(170):  # until the end (1.5 s) + the assembly delay (0.1 s lateness + the frame horizon)
        s = t0 - 50 * MS + i * 10 * MS
        c.add_joint_state(s, [0.1] * 6 + [0.04])
        c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_gripper(s, 0.02)
        while k < len(caps) and caps[k][1] <= s:
            col, dep = caps[k]
            c.add_color("cam_front", col, np.full((2, 2, 3), k, np.uint8))
            if k != 30:  # one depth image lost
                c.add_depth("cam_front", dep, np.full((2, 2), k, np.uint16))
            k += 1
        c.tick(s)
    assert c.stop(t0 + 1_500 * MS).ok
    (obs,) = w.ended
    assert all(rgb == d for rgb, d in obs)  # each observation's depth is its own capture's
    assert len(obs) == 46 and c.last_counters["frames_unpaired"] == {"cam_front": 1}
    assert c.last_counters["frames_repeated"] == {"cam_front": 1}  # the capture without depth

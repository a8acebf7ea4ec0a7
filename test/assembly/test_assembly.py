"""Assembly core: exact grid, lateness, staleness, origin, both frame modes, determinism, RGB-D steps."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from piper_recorder.assembly import AssemblyConfig, EpisodeAssembler, LeRobotSink, RgbdSink
from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.timebase import pts_ticks

MS = 1_000_000
START = 1_700_000_000_000_000_000 + 123_456_789  # a realistic ROS-clock origin, not grid aligned


class RecordingSink:
    def __init__(self):
        self.rows, self.frames, self.raw = [], [], []

    def row(self, row):
        self.rows.append(row)

    def frame(self, camera, frame, t):
        self.frames.append((camera, frame.stamp_ns, t))

    def raw_quest(self, line):
        self.raw.append(line)

    def key(self):
        rows = [
            (
                r.index,
                float(r.timestamp),
                r.tick_ns,
                tuple(np.concatenate(list(r.values.values())).tolist()),
                tuple(sorted((c, f.stamp_ns) for c, f in r.frames.items())),
            )
            for r in self.rows
        ]
        per_cam = {c: [(s, t) for c_, s, t in self.frames if c_ == c] for c, _, _ in self.frames}
        return rows, per_cam, list(self.raw)


def make_events(seconds=2.0, cams=("cam_front", "cam_wrist"), cam_phase_ms=(7, 19), arm_hz=100, seed=0):
    """(stamp_ns, kind, args) for arm at arm_hz, commands at 50 Hz, cameras at 30 fps, raw lines at 10 Hz."""
    rng = random.Random(seed)
    ev = []
    t0 = START - 100 * MS  # pre-roll
    n_arm = int((seconds + 0.1) * arm_hz)
    for i in range(n_arm):
        s = t0 + i * 1_000_000_000 // arm_hz + rng.randint(0, 2 * MS)
        v = i * 0.001
        ev.append((s, "joint", ([v + j for j in range(6)] + [0.05 + v],)))
        ev.append((s + 300_000, "eef", ((v, 0.1, 0.2), (0.0, 0.0, 0.0, 1.0))))
    for i in range(int((seconds + 0.1) * 50)):
        s = t0 + i * 20 * MS + rng.randint(0, MS)
        ev.append((s, "cmd", ((i * 0.01, 0.0, 0.3), (0.0, 0.0, 0.7071, 0.7071))))
        ev.append((s + 1000, "grip", (0.02 + i * 1e-4,)))
    for c, cam in enumerate(cams):
        for i in range(int((seconds + 0.1) * 30)):
            s = t0 + cam_phase_ms[c] * MS + i * 1_000_000_000 // 30 + rng.randint(0, 3 * MS)
            ev.append((s, "frame", (cam, np.full((4, 4, 3), i % 256, np.uint8))))
    for i in range(int(seconds * 10)):
        ev.append((START + i * 100 * MS + 5 * MS, "raw", (f'{{"seq": {i}}}',)))
    return ev


def feed(asm, kind, stamp, args):
    if kind == "joint":
        asm.add_joint_state(stamp, *args)
    elif kind == "eef":
        asm.add_eef_pose(stamp, *args)
    elif kind == "cmd":
        asm.add_commanded_pose(stamp, *args)
    elif kind == "grip":
        asm.add_commanded_gripper(stamp, *args)
    elif kind == "frame":
        asm.add_frame(args[0], stamp, args[1])
    elif kind == "raw":
        asm.add_raw_quest(stamp, args[0])


def run(events, arrivals, cfg, end_ns, tick_times=None):
    """Feed events at their arrival times with advance() from a jittery tick thread; returns the sink."""
    sink = RecordingSink()
    asm = EpisodeAssembler(cfg, START, sink)
    order = sorted(range(len(events)), key=lambda i: (arrivals[i], i))
    ticks = sorted(tick_times or [])
    ti = 0
    for i in order:
        while ti < len(ticks) and ticks[ti] <= arrivals[i]:
            asm.advance(ticks[ti])
            ti += 1
        s, kind, args = events[i]
        feed(asm, kind, s, args)
    counters = asm.finish(end_ns)
    return sink, counters, asm


def jittery_ticks(fps, seconds, seed=1):
    rng = random.Random(seed)
    out = []
    for k in range(int(seconds * fps) + 5):
        wake = START + k * 1_000_000_000 // fps + rng.choice([0, 1, 3, 8, 15, 70]) * MS  # some 70 ms stalls
        out.append(wake)
    return out


def test_exact_grid_with_timer_jitter_and_late_message():
    cfg = AssemblyConfig(fps=30, lateness_s=0.05, stale_s=0.25)
    ev = make_events(2.0)
    rng = random.Random(3)
    arrivals = [s + rng.randint(0, 5 * MS) for s, _, _ in ev]
    # one joint state delivered 30 ms late (within lateness) and one 400 ms late (beyond it)
    j = [i for i, e in enumerate(ev) if e[1] == "joint" and e[0] > START + 500 * MS]
    arrivals[j[0]] = ev[j[0]][0] + 30 * MS
    arrivals[j[50]] = ev[j[50]][0] + 400 * MS
    end = START + 2 * 1_000_000_000
    sink, c, asm = run(ev, arrivals, cfg, end, jittery_ticks(30, 2.0))
    ts = np.array([r.timestamp for r in sink.rows], dtype=np.float32)
    assert len(ts) == 61 and ts[0] == 0.0 and asm.origin_ns == START
    assert np.all(np.abs(np.diff(ts) - 1 / 30) < 1e-4)
    assert [r.index for r in sink.rows] == list(range(61))
    assert c.rows == 61 and c.skipped_start_ticks == 0
    assert c.messages_late == {"joint_states": 1}
    # every row holds the newest sample stamped at or before its tick, the beyond-lateness one aside
    joints = sorted((s, a[0]) for i, (s, k, a) in enumerate(ev) if k == "joint" and i != j[50])
    for r in sink.rows:
        expect = [v for s, v in joints if s <= r.tick_ns][-1]
        assert np.allclose(r.values["arm_joint"], expect[:6]) and np.allclose(r.values["gripper"], expect[6:])
        assert r.tick_ns == START + r.index * 1_000_000_000 // 30
        for arr in r.values.values():
            assert np.all(np.isfinite(arr)) and arr.dtype == np.float32


def test_long_episode_timestamps_stay_on_grid():
    """Float32 timestamps over a 10-minute episode still differ by 1/fps within 1e-4."""
    ts = np.array([np.float32(k / 30) for k in range(30 * 600)], dtype=np.float32)
    assert np.all(np.abs(np.diff(ts.astype(np.float64)) - 1 / 30) < 1e-4)


def test_same_events_any_arrival_order_give_same_output():
    cfg = AssemblyConfig(fps=30, lateness_s=0.05, stale_s=0.25)
    ev = make_events(1.5)
    end = START + 1_500_000_000
    ticks = jittery_ticks(30, 1.5)
    base, c0, _ = run(ev, [s for s, _, _ in ev], cfg, end, ticks)
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        arrivals = [s + rng.randint(0, 45 * MS) for s, _, _ in ev]  # reordered, all within lateness
        other, c1, _ = run(ev, arrivals, cfg, end, ticks)
        b, o = base.key(), other.key()
        assert o[0] == b[0] and o[1] == b[1]
        assert sorted(o[2]) == sorted(b[2])
        assert c1.to_dict() == c0.to_dict()
    # the converter's way: no timer at all, advance only on message receive times
    conv, _c2, _ = run(ev, [s + 2 * MS for s, _, _ in ev], cfg, end, [s + 2 * MS for s, _, _ in ev])
    assert conv.key()[0] == base.key()[0] and conv.key()[1] == base.key()[1]


def test_staleness_counted_rows_still_emitted():
    cfg = AssemblyConfig(fps=30, lateness_s=0.05, stale_s=0.1)
    ev = [e for e in make_events(2.0) if not (e[1] == "joint" and START + 800 * MS < e[0] < START + 1300 * MS)]
    sink, c, _ = run(ev, [s for s, _, _ in ev], cfg, START + 2 * 1_000_000_000)
    assert c.rows == 61
    # ticks more than 100 ms after the last joint sample before the gap (~800 ms) until it resumes (~1300 ms)
    assert 10 <= c.values_stale["joint_states"] <= 13
    assert "eef_pose" not in c.values_stale
    for r in sink.rows:
        assert all(np.all(np.isfinite(v)) for v in r.values.values())


def test_rows_wait_for_every_input_then_origin_rebases():
    cfg = AssemblyConfig(fps=30, lateness_s=0.05, stale_s=0.25, timestamp_mode="capture")
    first_cmd = START + 200 * MS
    ev = [e for e in make_events(1.0) if not (e[1] in ("cmd", "grip") and e[0] < first_cmd)]
    sink, c, asm = run(ev, [s for s, _, _ in ev], cfg, START + 1_000_000_000)
    k0 = c.skipped_start_ticks
    assert k0 == 7  # ticks at 0, 33, ..., 200 ms precede the first command (stamped 200..201 ms)
    assert asm.origin_ns == START + k0 * 1_000_000_000 // 30
    assert sink.rows[0].index == 0 and sink.rows[0].timestamp == 0.0
    assert c.rows == 31 - k0
    # capture mode: each camera opens with its frame at/before the origin at t = 0, then capture times
    for cam in cfg.cameras:
        fr = [(s, t) for c_, s, t in sink.frames if c_ == cam]
        assert fr[0][1] == 0.0 and fr[0][0] <= asm.origin_ns
        assert all(abs(t - (s - asm.origin_ns) / 1e9) < 1e-12 for s, t in fr[1:])
        assert all(b[1] > a[1] for a, b in itertools.pairwise(fr))


def test_no_rows_when_an_input_never_arrives():
    cfg = AssemblyConfig(fps=30)
    ev = [e for e in make_events(0.5) if e[1] != "grip"]
    sink, c, asm = run(ev, [s for s, _, _ in ev], cfg, START + 500 * MS)
    assert c.rows == 0 and sink.rows == [] and sink.frames == [] and asm.origin_ns is None
    assert c.skipped_start_ticks == 16
    assert asm.missing_inputs() == ["commanded_gripper"]


def test_capture_mode_late_frame_dropped_and_counted():
    cfg = AssemblyConfig(fps=30, cameras=("cam_front",), lateness_s=0.05, timestamp_mode="capture")
    ev = make_events(1.0, cams=("cam_front",))
    frames = [i for i, e in enumerate(ev) if e[1] == "frame" and e[0] > START + 300 * MS]
    arrivals = [s for s, _, _ in ev]
    arrivals[frames[0]] += 200 * MS  # arrives after later frames went to the encoder
    sink, c, _ = run(ev, arrivals, cfg, START + 1_000_000_000, jittery_ticks(30, 1.0))
    assert c.frames_late["cam_front"] == 1
    sent = [s for _, s, _ in sink.frames]
    assert ev[frames[0]][0] not in sent and sent == sorted(sent)
    assert c.frames_sent["cam_front"] == len(sent)


def test_capture_mode_camera_gap_counted_as_frames_missing():
    """A 0.5 s pause of one camera: 14 frames missing at 30 fps; capture jitter is no gap."""
    cfg = AssemblyConfig(fps=30, lateness_s=0.05, timestamp_mode="capture")
    all_ev = make_events(2.0)
    ev = [
        e
        for e in all_ev
        if not (e[1] == "frame" and e[2][0] == "cam_front" and START + 600 * MS < e[0] < START + 1070 * MS)
    ]
    assert len(all_ev) - len(ev) == 14
    sink, c, _ = run(ev, [s for s, _, _ in ev], cfg, START + 2 * 1_000_000_000, jittery_ticks(30, 2.0))
    sent = [s for cam, s, _ in sink.frames if cam == "cam_front"]
    gaps = np.diff(sent) / 1e9
    assert 0.495 < gaps.max() < 0.505 and np.sort(gaps)[-2] < 1.5 / 30  # one 0.5 s gap, the rest is jitter
    assert c.frames_missing == {"cam_front": 14, "cam_wrist": 0}
    assert c.frames_dropped == {"cam_front": 0, "cam_wrist": 0} and c.frames_late == {"cam_front": 0, "cam_wrist": 0}
    assert c.frames_sent["cam_front"] + 14 == c.frames_sent["cam_wrist"]
    nominal = run(
        ev,
        [s for s, _, _ in ev],
        AssemblyConfig(fps=30, lateness_s=0.05, timestamp_mode="nominal"),
        START + 2 * 1_000_000_000,
    )[1]
    assert nominal.frames_missing == {} and nominal.frames_repeated["cam_front"] >= 14


@pytest.mark.parametrize(
    ("after_ns", "opening"),
    [(MS // 2, True), (MS - 1, True), (12_000, True), (10_000, False), (0, False)],
)
def test_capture_mode_video_opens_at_zero_unless_the_next_frame_shares_pts_zero(after_ns, opening):
    # PTS count 1/90000 s (11.1 us): a frame 0.5 ms after the origin has its own PTS (45), so the frame before
    # the origin still opens the video at 0 and row 0 has a frame at its time; only a frame within one tick
    # of the origin would share PTS 0, and then it opens the video itself
    cfg = AssemblyConfig(fps=30, cameras=("cam_front",), timestamp_mode="capture")
    sink = RecordingSink()
    asm = EpisodeAssembler(cfg, START, sink)
    asm.add_joint_state(START, [0.0] * 7)
    asm.add_eef_pose(START, (0, 0, 0), (0, 0, 0, 1))
    asm.add_commanded_pose(START, (0, 0, 0), (0, 0, 0, 1))
    asm.add_commanded_gripper(START, 0.0)
    for s in (START - 33 * MS, START + after_ns, START + 34 * MS):
        asm.add_frame("cam_front", s, np.zeros((2, 2, 3), np.uint8))
    asm.finish(START + 50 * MS)
    sent = [(s - START, t) for _, s, t in sink.frames]
    assert sent == [(-33 * MS, 0.0)] * opening + [(after_ns, after_ns / 1e9), (34 * MS, 0.034)]
    pts = [pts_ticks(t) for _, t in sent]
    assert pts[0] == 0 and all(b > a for a, b in itertools.pairwise(pts))  # the encoder takes every one


def test_raw_quest_lines_in_stamp_order_within_episode():
    cfg = AssemblyConfig(fps=30)
    ev = make_events(1.0) + [(START - 50 * MS, "raw", ("before",))]
    rng = random.Random(5)
    arrivals = [s + rng.randint(0, 40 * MS) for s, _, _ in ev]
    sink, _, _ = run(ev, arrivals, cfg, START + 1_000_000_000, jittery_ticks(30, 1.0))
    assert sink.raw == [f'{{"seq": {i}}}' for i in range(10)]


def test_quaternion_xyzw_in_wxyz_out():
    cfg = AssemblyConfig(fps=10, cameras=())
    sink = RecordingSink()
    asm = EpisodeAssembler(cfg, START, sink)
    asm.add_joint_state(START, [0, 1, 2, 3, 4, 5, 0.07])
    asm.add_eef_pose(START, (1, 2, 3), (0.1, 0.2, 0.3, 0.9))
    asm.add_commanded_pose(START, (4, 5, 6), (0.4, 0.5, 0.6, 0.7))
    asm.add_commanded_gripper(START, 0.03)
    asm.finish(START)
    (r,) = sink.rows
    assert np.allclose(r.values["arm_eef"], [1, 2, 3, 0.9, 0.1, 0.2, 0.3])
    assert np.allclose(r.values["cmd_eef"], [4, 5, 6, 0.7, 0.4, 0.5, 0.6])
    assert np.allclose(r.values["gripper"], [0.07]) and np.allclose(r.values["reward"], [0.0])
    with pytest.raises(ValueError):
        asm.add_joint_state(START, [0.0] * 6)


def test_non_finite_samples_are_dropped_and_counted():
    cfg = AssemblyConfig(fps=10, cameras=())
    sink = RecordingSink()
    asm = EpisodeAssembler(cfg, START, sink)
    asm.add_joint_state(START, [0.5] * 7)
    asm.add_joint_state(START + 50 * MS, [float("nan")] + [0.0] * 6)
    asm.add_eef_pose(START, (1, 2, 3), (0, 0, 0, 1))
    asm.add_commanded_pose(START, (0, 0, 0), (0, 0, 0, 1))
    asm.add_commanded_pose(START + 60 * MS, (float("inf"), 0, 0), (0, 0, 0, 1))
    asm.add_commanded_gripper(START, 0.03)
    c = asm.finish(START + 100 * MS)
    assert c.messages_invalid == {"joint_states": 1, "commanded_pose": 1}
    assert np.allclose(sink.rows[-1].values["arm_joint"], 0.5) and np.allclose(sink.rows[-1].values["cmd_eef"][:3], 0)


def test_nominal_mode_one_frame_per_row_with_drops_and_repeats():
    cfg = AssemblyConfig(fps=30, cameras=("cam_front", "cam_wrist"), timestamp_mode="nominal", stale_s=0.1)
    ev = [e for e in make_events(2.0) if e[1] != "frame"]
    rng = random.Random(9)
    # cam_front: a 0.5 s pause (repeats); cam_wrist: 45 fps (extra frames to drop)
    for i in range(65):
        s = START - 90 * MS + i * 1_000_000_000 // 30 + rng.randint(0, 2 * MS)
        if not (START + 600 * MS < s < START + 1100 * MS):
            ev.append((s, "frame", ("cam_front", np.zeros((2, 2, 3), np.uint8))))
    for i in range(100):
        ev.append((START - 90 * MS + i * 1_000_000_000 // 45, "frame", ("cam_wrist", np.zeros((2, 2, 3), np.uint8))))
    sink = LeRobotSink(FakeLeRobotWriter())
    asm = EpisodeAssembler(cfg, START, sink)
    for s, kind, args in sorted((e for e in ev if e[0] <= START + 2_000_000_000), key=lambda e: e[0]):
        asm.advance(s)
        feed(asm, kind, s, args)
    c = asm.finish(START + 2 * 1_000_000_000)
    w = sink.writer
    assert c.rows == 61 == len(w.rows)
    for cam in cfg.cameras:
        pts = list(w.frames[cam])
        assert len(pts) == c.rows, cam
        assert pts == [float(grid_timestamp(k, 30)) for k in range(c.rows)]
    assert 13 <= c.frames_repeated["cam_front"] <= 16 and c.frames_dropped["cam_front"] == 0
    assert c.frames_stale["cam_front"] >= 10
    assert c.frames_repeated["cam_wrist"] == 0 and 25 <= c.frames_dropped["cam_wrist"] <= 32
    assert sink.counters()["frames_written"] == {"cam_front": 61, "cam_wrist": 61}


class FakeLeRobotWriter:
    def __init__(self):
        self.rows, self.frames, self.raw = [], {}, []

    def add_row(self, t, values):
        assert set(values) == {
            "observation.arm_joint",
            "observation.arm_eef",
            "observation.gripper",
            "action.arm_eef",
            "action.gripper",
        }
        self.rows.append((t, values))

    def add_frame(self, cam, rgb, t):
        self.frames.setdefault(cam, []).append(t)
        return True

    def add_raw_quest(self, line):
        self.raw.append(line)


class FakeRgbdWriter:
    def __init__(self):
        self.log = []

    def add_observation(self, rgb, depth, state):
        assert rgb.ndim == 3 and depth.dtype == np.uint16 and set(state) == {"arm_joint", "arm_eef", "gripper"}
        self.log.append(("obs", rgb[0, 0, 0]))

    def add_transition(self, action, reward, terminal=False, timeout=False):
        assert action.shape == (8,) and action.dtype == np.float32
        self.log.append(("tr", reward, terminal, timeout))


@pytest.mark.parametrize("terminal,timeout", [(True, False), (False, True)])
def test_rgbd_consecutive_ticks_give_t_plus_one_observations(terminal, timeout):
    cfg = AssemblyConfig(fps=10, cameras=("cam_front",), timestamp_mode="capture")
    w = FakeRgbdWriter()
    sink = RgbdSink(w, "cam_front")
    asm = EpisodeAssembler(cfg, START, sink, depth=True)
    with pytest.raises(ValueError):
        asm.add_frame("cam_front", START, np.zeros((2, 2, 3), np.uint8))
    for i in range(12):
        s = START - 50 * MS + i * 100 * MS
        asm.add_joint_state(s, [0] * 6 + [0.01])
        asm.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
        asm.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
        asm.add_commanded_gripper(s, 0.02)
        asm.add_reward(s, float(i))
        asm.add_frame("cam_front", s, np.full((2, 2, 3), i, np.uint8), np.zeros((2, 2), np.uint16))
        asm.advance(s)
    asm.finish(START + 1_000_000_000)
    sink.end(terminal=terminal, timeout=timeout)
    kinds = [e[0] for e in w.log]
    assert kinds == ["obs"] + ["tr", "obs"] * 10
    assert sink.observations == 11 and sink.transitions == 10
    obs = [e[1] for e in w.log if e[0] == "obs"]
    assert obs == list(range(11))  # obs k: frame stamped 50 ms before t_k
    trs = [e for e in w.log if e[0] == "tr"]
    assert [t[1] for t in trs] == [float(i) for i in range(10)]  # reward at t_k for transition k
    assert all(not t[2] and not t[3] for t in trs[:-1]) and trs[-1][2:] == (terminal, timeout)


def test_grid_timestamp_is_the_smallest_float32_at_or_after_the_grid():
    """Row times never fall below index / fps (LeRobot's torchcodec lookup needs the floored PTS at or
    after the grid) and stay within one float32 step of it; nearest rounding falls below for ~half.
    """
    from fractions import Fraction

    below = 0
    for k in range(30 * 600):
        t = grid_timestamp(k, 30)
        exact = Fraction(k, 30)
        assert t.dtype == np.float32 and Fraction(float(t)) >= exact
        assert Fraction(float(np.nextafter(t, np.float32(-np.inf)))) < exact or Fraction(float(t)) == exact
        below += Fraction(float(np.float32(k / 30))) < exact
    assert below > 30 * 600 // 4  # what nearest rounding did

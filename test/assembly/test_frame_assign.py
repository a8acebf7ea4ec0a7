"""Frame-to-row pairing when rows carry frames (nominal mode, RGB-D): causal, phase-locked, one-to-one, bounded.

Synthetic capture stamps at a known phase and jitter go through the real assembler; every check
recomputes from the rows' frame stamps what the counters claim (repeats, drops, offsets).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from piper_recorder.assembly import AssemblyConfig, EpisodeAssembler
from piper_recorder.assembly.frame_assign import CaptureHistory, PhaseTracker, keep_threshold, lock_threshold, wrap

from support.frame_pairing import FPS, MS, PERIOD, SEC, START, Rows, assemble, camera, check, lag


@pytest.mark.parametrize("phase_ms", [0.0, 0.3, -0.3, 3.0, -3.0, 6.0, -6.0])
@pytest.mark.parametrize("mode,depth", [("nominal", False), ("capture", True)])  # LeRobot nominal, RGB-D
@pytest.mark.slow
def test_row_rate_camera_with_10ms_jitter_near_the_row_time_pairs_one_to_one(phase_ms, mode, depth):
    """The alias: captures straddling t_k with ±10 ms jitter used to flip between rows.
    Causal: the band reaches past t_k, so each row holds the previous slot's capture.
    """
    stamps = camera(20.0, phase_ms, 10.0, seed=int(phase_ms * 10) + 7)
    pairs, c = assemble(stamps, 20.0, mode, depth)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert len(pairs) == 601 and repeats == 0 and drops == 0
    assert lag(pairs, phase_ms) == {1}  # every row: the capture of the slot before its own
    assert max(t - s for t, s in pairs) <= PERIOD + 20 * MS + 4.2 * MS  # a period + the band + the first margin


@pytest.mark.parametrize("phase_ms", [PERIOD / 2e6, -PERIOD / 2e6, PERIOD / 2e6 - 1, 12.0])
@pytest.mark.slow
def test_camera_midway_between_rows_stays_one_to_one_and_counts_the_far_pairs(phase_ms):
    """Captures midway between two rows with ±10 ms jitter: the pairing stays one to one and causal,
    each row holding the slot whose whole band is before it.
    """
    stamps = camera(20.0, phase_ms, 10.0, seed=3)
    pairs, c = assemble(stamps, 20.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert repeats == 0 and drops == 0 and len(lag(pairs, phase_ms)) == 1
    assert max(t - s for t, s in pairs) <= PERIOD + 20 * MS + 4.2 * MS


def test_a_real_frame_drop_is_one_repeat_and_nothing_else():
    stamps = camera(10.0, 0.5, 10.0, seed=11, skip={150})
    pairs, c = assemble(stamps, 10.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert repeats == 1 and drops == 0 and lag(pairs, 0.5) == {1}
    (k,) = [j for j in range(1, len(pairs)) if pairs[j][1] == pairs[j - 1][1]]
    assert pairs[k][0] == START + round(151 * PERIOD)  # the row that would hold slot 150


def test_double_rate_camera_pairs_the_newest_capture_before_the_row_and_drops_every_other():
    stamps = camera(10.0, 4.0, 2.0, fps=60, seed=5)
    pairs, c = assemble(stamps, 10.0)
    repeats, drops, offsets = check(pairs, stamps, c)
    assert repeats == 0 and drops == len(pairs) - 1
    assert max(offsets) <= PERIOD / 2 + 2 * MS  # not locked: the newer of the two captures before the row
    for t, s in pairs:
        assert max(x for x in stamps if x <= t) == s


def test_stall_repeats_exactly_the_missing_captures_then_relocks():
    gone = set(range(90, 105))  # 0.5 s without frames at 3 s
    stamps = camera(10.0, -1.0, 10.0, seed=2, skip=gone)
    pairs, c = assemble(stamps, 10.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert repeats == len(gone) and drops == 0 and lag(pairs, -1.0) == {1}
    assert c.frames_stale["cam"] >= 7  # rows more than stale_s (0.25 s) after the last capture
    rep = [j for j in range(1, len(pairs)) if pairs[j][1] == pairs[j - 1][1]]
    assert rep == list(range(91, 106))  # the rows that would hold the missing slots


def test_slightly_slow_camera_repeats_once_per_slip():
    """29.9 fps against 30 fps rows: the phase drifts by a whole period every 10 s; one repeat per slip."""
    stamps = camera(20.0, 0.0, 3.0, fps=29.9, seed=4)
    pairs, c = assemble(stamps, 20.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert drops == 0 and repeats == len(pairs) - len({s for _, s in pairs}) and 1 <= repeats <= 3
    # causal: the slot moves back a period (the repeat) as soon as its band reaches past the row
    assert max(t - s for t, s in pairs) < PERIOD + 6 * MS + 4.2 * MS


def test_late_arrivals_within_lateness_give_the_same_pairs():
    """Live recorder and bag converter: the same stamps give the same rows whatever the transport delay."""
    stamps = camera(8.0, 0.2, 10.0, seed=9)
    base, c0 = assemble(stamps, 8.0)
    rng = random.Random(1)
    delays = [rng.randint(0, 95) * MS for _ in stamps]
    other, c1 = assemble(stamps, 8.0, transport=lambda i, s: delays[i])
    assert other == base and c1.to_dict() == c0.to_dict()


def test_phase_tracker_is_continuous_across_the_half_period():
    tr = PhaseTracker(PERIOD, 60)
    rng = random.Random(0)
    seen = []
    for _ in range(600):
        tr.add(wrap(PERIOD / 2 + rng.uniform(-10, 10) * MS, PERIOD))
        seen.append(tr.phase_ns)
    assert tr.coherent
    # it settles on one side of ±P/2 and stays there (a flip would shift every later frame by a row)
    assert all(abs(p) > PERIOD / 2 - 4 * MS for p in seen[60:])
    assert len({p > 0 for p in seen[60:]}) == 1
    other_rate = PhaseTracker(PERIOD, 60)
    for i in range(600):
        other_rate.add(wrap(i * SEC / 45 + 3 * MS, PERIOD))
    assert not other_rate.coherent and other_rate.phase_ns == 0.0


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("phase_ms", [12.0, 13.3, -13.3, 14.5])
@pytest.mark.slow
def test_first_capture_across_the_half_period_does_not_start_the_estimate_on_the_far_side(phase_ms, seed):
    """Captures centred 12-15 ms from the row times with ±10 ms jitter: some land past the half period.
    Started from a single such capture, the estimate sat on the far side within the hysteresis and
    later wrapped (a repeat and a drop mid-episode); it starts from the warm-up's circular mean and a
    far side it may still start on (near the half period) is kept, not flipped.
    """
    stamps = camera(12.0, phase_ms, 10.0, seed=100 + seed)
    pairs, c = assemble(stamps, 12.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert repeats == 0 and drops == 0
    assert len(lag(pairs, phase_ms)) == 1
    assert max(t - s for t, s in pairs) <= PERIOD + 20 * MS + 4.2 * MS


def stall_runs(seed, seconds, frac):
    """Slot indices a camera stalled through: runs of 1-12 slots starting at a random ~frac of slots."""
    rng = random.Random(seed)
    gone, i = set(), 4
    while i < seconds * FPS:
        if rng.random() < frac:
            run = rng.randint(1, 12)
            gone.update(range(i, i + run))
            i += run
        i += 1
    return gone


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("phase_ms", [11.5, -11.5])
@pytest.mark.slow
def test_a_stalling_row_rate_camera_repeats_its_missing_slots_and_drops_nothing(phase_ms, seed):
    """The live flake of the jitter test on a loaded machine: captures 11.5 ms from the row times
    with ±10 ms jitter, slots missed in runs. The warm-up then holds ~8 captures, whose resultant fell
    below the lock threshold by chance: the phase read 0 and a capture jittered past the half period
    was passed over (a drop and a repeat). A stall is only ever a repeat per missing slot.
    """
    gone = stall_runs(seed, 4.0, 0.05 + 0.1 * (seed % 3))
    stamps = camera(4.0, phase_ms, 10.0, seed=seed, skip=gone)
    pairs, c = assemble(stamps, 4.0)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert drops == 0
    (d,) = lag(pairs, phase_ms)
    assert repeats == sum(1 for k in range(1, len(pairs)) if k - d in gone)


# The first second of a live episode's capture stamps (ms from its start; sim camera jitter_ms 20, seed 3,
# grid 13 ms from the jitter centre) that failed test_frame_jitter_live with a drop and a repeat.
LIVE_FLAP_MS = [
    -56.19,
    -20.08,
    25.87,
    44.6,
    78.88,
    112.37,
    161.33,
    180.63,
    210.85,
    260.55,
    279.48,
    327.26,
    357.15,
    393.77,
    429.43,
    455.3,
    493.02,
    511.11,
    559.06,
    587.27,
    624.68,
    645.85,
    692.03,
    729.07,
    744.94,
    783.53,
    821.66,
    860.28,
    881.89,
    913.98,
    948.71,
    989.37,
    1025.45,
    1051.59,
    1084.4,
]


def test_a_lock_from_the_warm_up_is_kept_while_a_first_lock_would_still_be_taken():
    """The warm-up's 12 captures locked at a resultant of 0.29 (the bar: 0.15); two captures later it was
    0.19, under the flat 0.2 a lock was kept down to: unlocked, that row took the newest frame (a drop),
    the lock came back a slot earlier (a repeat). Keeping never needs more than a first lock.
    """
    assert all(keep_threshold(n) <= lock_threshold(n) for n in range(1, 200))
    assert keep_threshold(60) == pytest.approx(0.2) and keep_threshold(12) == pytest.approx(0.15)
    stamps = [START + round(ms * MS) for ms in LIVE_FLAP_MS]
    pairs, c = assemble(stamps, 1.0, transport=lambda i, s: 22 * MS, lateness_s=0.15)
    repeats, drops, _offsets = check(pairs, stamps, c)
    assert (repeats, drops) == (0, 0) and len(pairs) == 31


class _Episodes:
    """A recorder target keeping each row's (row time, frame stamp): what the recorder core chose."""

    kind, depth, min_rows, needs_task = "lerobot", False, 1, False

    def __init__(self):
        self.rows = []

    def begin_session(self, record):
        pass

    def start_episode(self, task, record, source=None):
        self.rows.append([])
        sink = Rows()
        sink.row = lambda row, out=self.rows[-1]: out.append((row.tick_ns, row.frames["cam"].stamp_ns))
        return len(self.rows) - 1, sink

    def save_episode(self, counters, timeout):
        self.counters = counters
        return {}

    def close(self):
        pass


def record(stamps, start, seconds, latency=22 * MS):
    """One episode through the recorder core (``EpisodeController``, lateness 0.15 s): the camera's frames
    arrive ``latency`` after capture from before the start on (the recorder idle), arm inputs at 100 Hz.
    """
    from piper_recorder.recording.controller import EpisodeController

    target = _Episodes()
    cfg = AssemblyConfig(fps=FPS, cameras=("cam",), lateness_s=0.15)
    c = EpisodeController(
        target,
        cfg,
        recorder="test",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
    )
    end = start + round(seconds * SEC)
    events = [(s + latency, 1, s) for s in stamps]
    events += [(s + MS, 0, s) for s in range(stamps[0], end + cfg.delay_ns() + 100 * MS, 10 * MS)]
    rgb = np.zeros((2, 2, 3), np.uint8)
    started = False
    for arrival, kind, s in sorted(events):
        if not started and arrival >= start:
            assert c.start("", lambda: start).ok
            started = True
        if arrival > end + cfg.delay_ns():
            break
        c.tick(arrival)
        if kind:
            c.add_frame("cam", s, rgb)
        else:
            c.add_joint_state(s, [0.0] * 7)
            c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.0)
    assert c.stop(end).ok
    c.shutdown(save=False)
    return target.rows[0], SimpleNamespace(**target.counters)


def running_camera(seed, lead_s=2.0, seconds=2.0):
    """(phase_ms, stamps): a row-rate camera with ±10 ms jitter running ``lead_s`` before the start, its
    captures 8-16.6 ms from the row times (either side), where the first slot's choice is closest.
    """
    rng = random.Random(seed)
    phase_ms = rng.choice([-1, 1]) * rng.uniform(8, 16.6)
    first, last = -round(lead_s * FPS), round(seconds * FPS)
    return phase_ms, sorted(
        START + round(i * PERIOD + phase_ms * MS + rng.uniform(-10, 10) * MS) for i in range(first, last + 1)
    )


@pytest.mark.parametrize("seed,slots_back", [(215, 0), (225, 1)])
def test_first_slot_comes_from_the_captures_before_the_start(seed, slots_back):
    """Chosen from the ~11 captures of a warm-up, the first slot was unsure. Seed 215 (captures 13.4 ms
    before the rows): the band's edge came out too late, the slot a period further back than needed,
    which the pre-roll (the newest frame at or before the start on) did not reach: row 0 took the
    pre-roll frame, row 1 repeated it, and every row held a frame 56 ms old instead of 23 ms. Seed 225
    (9.5 ms before): too early, the slot stepped back a period at row 15 (a repeat). The recorder keeps
    the camera's captures while idle (``CaptureHistory``): the first slot comes from 2 s of them.
    """
    phase_ms, stamps = running_camera(seed)
    pairs, c = record(stamps, START, 2.0)
    repeats, drops, _ = check(pairs, stamps, c)
    assert (repeats, drops) == (0, 0) and len(pairs) == 61
    # the freshest slot whose whole band (±10 ms) is before the row: the row's own (215: its band ends
    # 3.4 ms before it) or the one before (225: 0.5 ms after it)
    assert lag(pairs, phase_ms) == {slots_back}
    assert max(t - s for t, s in pairs) <= slots_back * PERIOD - phase_ms * MS + 10 * MS


def test_the_warm_up_is_what_the_history_does_not_cover():
    """Row 0 waits for WARMUP_S of captures only when the recorder saw less before the start (a recorder
    or a camera just started): with 2 s of them it is due at its plain delay.
    """
    cfg = AssemblyConfig(fps=FPS, cameras=("cam",), timestamp_mode="nominal", lateness_s=0.1)
    due = {}
    for name, lead_s in (("none", 0.0), ("0.1 s", 0.1), ("2 s", 2.0)):
        history = {"cam": [START - round(i * PERIOD) for i in range(round(lead_s * FPS), 0, -1)]}
        due[name] = EpisodeAssembler(cfg, START, Rows(), history=history).next_due_ns - START - cfg.delay_ns()
    assert due == {"none": 300 * MS, "0.1 s": 200 * MS, "2 s": 0}
    capture_mode = AssemblyConfig(fps=FPS, cameras=("cam",), timestamp_mode="capture")
    assert EpisodeAssembler(capture_mode, START, Rows()).next_due_ns == START + capture_mode.delay_ns()


@pytest.mark.parametrize("lead_s", [0.1, 0.3])
def test_recorder_started_just_before_the_episode_pairs_one_to_one(lead_s):
    """The first episode right after the recorder (or the camera) started: the few captures before it
    and the warm-up's (each once), a camera straddling the rows with ±10 ms jitter.
    """
    for seed in range(6):
        rng = random.Random(seed)
        phase_ms = rng.uniform(-3, 3)
        stamps = sorted(
            START + round(i * PERIOD + phase_ms * MS + rng.uniform(-10, 10) * MS)
            for i in range(-round(lead_s * FPS), 61)
        )
        pairs, c = record(stamps, START, 2.0)
        repeats, drops, _ = check(pairs, stamps, c)
        assert (repeats, drops) == (0, 0) and lag(pairs, phase_ms) == {1}, (seed, phase_ms)


def test_capture_history_forgets_what_came_before_a_restart():
    h = CaptureHistory(window=4, gap_ns=500 * MS)
    for i in range(6):
        h.add(START + i * 33 * MS)
    assert h.before(START + 200 * MS) == [START + i * 33 * MS for i in range(2, 6)]  # the newest 4
    assert h.before(START + 165 * MS + 501 * MS) == []  # silent for more than the gap by the start
    h.add(START + 2 * SEC)  # back after a silence: a restart
    h.add(START + 2 * SEC - 5 * MS)  # out of order, within the gap: kept
    assert h.before(START + 2 * SEC) == [START + 2 * SEC - 5 * MS, START + 2 * SEC]
    h.add(START)  # stamps jumping back (another clock): a restart
    assert h.before(START) == [START]


def test_camera_restarted_before_the_start_locks_to_its_new_phase():
    """A camera restarted 0.45 s before the episode with another phase: what came before its silence does
    not count, the new captures (more than the warm-up) give the slot.
    """
    rng = random.Random(4)
    old = [START + round(i * PERIOD + 2 * MS + rng.uniform(-10, 10) * MS) for i in range(-90, -35)]  # to -1.2 s
    new = [START + round(i * PERIOD - 12 * MS + rng.uniform(-10, 10) * MS) for i in range(-13, 61)]  # from -0.45 s
    stamps = sorted(old + new)
    pairs, c = record(stamps, START, 2.0)
    repeats, drops, _ = check(pairs, new, c)
    assert (repeats, drops) == (0, 0) and len(lag(pairs, -12.0)) == 1  # kept, the old captures repeat
    assert max(t - s for t, s in pairs) <= PERIOD + 20 * MS + 4.2 * MS


class _Recomputing(PhaseTracker):
    """The tracker as it was: every update recomputes each offset's unit phasor and calls ``wrap``."""

    def _resultant(self) -> complex:
        import cmath
        import math

        p = self.period
        return sum(cmath.exp(2j * math.pi * o / p) for o in self._offsets) / len(self._offsets)


@pytest.mark.parametrize("seed", range(4))
def test_phase_tracker_with_cached_phasors_gives_the_same_estimates_bit_for_bit(seed):
    """``PhaseTracker`` keeps each capture's phasor (computed once when added) instead of recomputing the
    window's at every update, and inlines ``wrap``: every estimate, band and slot is the same float.
    """
    rng = random.Random(seed)
    p = 1e9 / 30
    new, old = PhaseTracker(p, 60), _Recomputing(p, 60)
    phase = rng.uniform(-p / 2, p / 2)
    for i in range(400):
        if rng.random() < 0.05:  # a drift or a phase jump now and then
            phase += rng.uniform(-p / 4, p / 4)
        o = wrap(phase + rng.uniform(-10e6, 10e6), p)
        new.add(o)
        old.add(o)
        if i % 3 == 0:
            assert (new.slot_ns, new.phase_ns, new.jitter_up, new.jitter_down, new.coherent) == (
                old.slot_ns,
                old.phase_ns,
                old.jitter_up,
                old.jitter_down,
                old.coherent,
            )
    h = p / 2
    xs = [rng.uniform(-3 * p, 3 * p) for _ in range(1000)]
    assert [(x + h) % p - h for x in xs] == [wrap(x, p) for x in xs]  # the inlined wrap

"""Which camera frame goes with which row (nominal mode and RGB-D observations): phase-locked pairing.

Why not "the newest frame at or before t_k": a camera running at the row rate whose captures sit
near a row time flips, with jitter, between just before and just after it, so one row repeats a
frame and the next drops one although every frame arrived. Any fixed rule has such a boundary
somewhere in the period; this one puts it opposite the camera:

- ``PhaseTracker`` keeps a robust running estimate of the camera's capture phase relative to the
  grid: the median (wrapped, so it stays continuous) of the offsets of the last ``window`` frames to
  their nearest row time. A camera that is not phase-coherent with the rows (another rate: the
  offsets spread around the period, mean resultant length below ``MIN_COHERENCE``, or below
  ``KEEP_COHERENCE`` once locked) gets phase 0. A first lock from few captures (the warm-up, a
  stalling camera) needs less (``lock_threshold``): their resultant is too noisy for ``MIN_COHERENCE``.
- Row k targets ``t_k + phase`` and takes the frame nearest that target among the frames newer than
  the previous row's frame, within half a period of the target; none there: the previous frame is
  repeated. Frames passed over are dropped. So a camera at the row rate whose jitter stays within
  half a period of its mean phase gives no repeat and no drop at any phase, and each row's frame is
  the capture nearest its time up to the jitter.
- The phase only wraps (one repeat, or one drop: a camera slightly slower or faster than the rows)
  once it is ``HYSTERESIS`` (a quarter) of a period past the half period, i.e. once the other side is
  better by half a period: captures centred near the half period with jitter may start the estimate
  on either side, and the median's noise must not carry it across and back (each crossing costs a
  repeat or a drop). The first estimate comes from ``WARMUP_S`` of captures (row 0 waits for them).

The bound ``|capture - t_k| <= period/2`` holds for every new frame whenever the camera's phase plus
its jitter stays within half a period of the row times. A camera whose captures sit midway between
rows with jitter cannot meet it with any assignment (some row has no capture within half a period,
and a repeated frame is farther still); the pairing stays one-to-one there and each such row is
counted (``frames_beyond_half_period``), with the largest offset (``frame_offset_max_ms``).
Everything is a function of the stamps of frames captured up to ``t_k + horizon``, so the live
recorder and the bag converter choose the same frames (rows are assembled after that horizon plus
the lateness allowance).
"""
from __future__ import annotations

import cmath
import math
from collections import deque

MIN_COHERENCE = 0.3     # mean resultant length of the phases: ±10 ms uniform jitter at 30 fps gives ~0.5,
KEEP_COHERENCE = 0.2    # ±12 ms ~0.34, another rate ~0; once locked, a lock is kept down to this
COHERENCE_FLOOR = 0.15  # a first lock from few captures needs at least this (another rate's spread captures: <~0.12)
HYSTERESIS = 0.25       # of a period, past the half period, before the phase estimate wraps (see below)
WARMUP_S = 0.3          # captures the tracker sees before row 0's frame is chosen (row 0 waits for them)


def wrap(x: float, period: float) -> float:
    """x folded into [-period/2, period/2)."""
    return (x + period / 2) % period - period / 2


class PhaseTracker:
    """Running capture-phase estimate of one camera against the row grid (ns).

    ``add`` the offsets of new captures; ``phase_ns`` brings the estimate up to date with them. The
    first estimate starts from the circular mean of what was added (the assembler gives it
    ``WARMUP_S`` of captures before row 0), later ones move continuously from the previous one."""

    def __init__(self, period_ns: float, window: int):
        self.period = float(period_ns)
        self._offsets: deque[float] = deque(maxlen=max(3, window))
        self._phase: float | None = None      # continuous: in [-P/2 - h, P/2 + h]
        self._dirty = False
        self.coherent = False

    def add(self, offset_ns: float) -> None:
        """Offset of one capture to its nearest row time, in [-P/2, P/2]."""
        self._offsets.append(float(offset_ns))
        self._dirty = True

    def _resultant(self) -> complex:
        p = self.period
        return sum(cmath.exp(2j * math.pi * o / p) for o in self._offsets) / len(self._offsets)

    def _update(self) -> None:
        self._dirty = False
        p = self.period
        z = self._resultant()
        # the first estimate: around the circular mean, so a first capture jittered across the half
        # period does not start the estimate on the far side (it would stay there: the hysteresis)
        ref = wrap(cmath.phase(z) / (2 * math.pi) * p, p) if self._phase is None else self._phase
        d = sorted(wrap(o - ref, p) for o in self._offsets)
        n = len(d)
        med = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
        phase = ref + med
        limit = p / 2 + HYSTERESIS * p
        if phase > limit:
            phase -= p
        elif phase < -limit:
            phase += p
        self._phase = phase
        self.coherent = abs(z) >= (KEEP_COHERENCE if self.coherent else lock_threshold(len(self._offsets)))

    @property
    def phase_ns(self) -> float:
        """Where this camera's captures sit relative to the row times; 0 when not locked."""
        if self._dirty:
            self._update()
        return self._phase if (self.coherent and self._phase is not None) else 0.0


def lock_threshold(n: int) -> float:
    """Resultant length a first lock needs from ``n`` captures. The warm-up gives ~10 (fewer when the
    camera stalls), and from so few a camera at the row rate with ±10 ms jitter (resultant ~0.5, spread
    ~0.41 per capture) falls below ``MIN_COHERENCE`` by chance in ~3% of episodes: its phase then reads
    0, and captures jittered past the half period repeat and drop. So the bar is lowered to what such a
    camera clears with 3 sigma, down to ``COHERENCE_FLOOR`` (other rates spread their captures evenly:
    their resultant is near 0 at any n); from ~40 captures it is ``MIN_COHERENCE``."""
    return min(MIN_COHERENCE, max(COHERENCE_FLOOR, 0.505 - 3 * 0.41 / math.sqrt(max(1, n))))


def horizon_ns(period_ns: float) -> int:
    """How far past t_k a row's frame may have been captured: half a period around a target that
    is itself at most half a period plus the hysteresis away from t_k."""
    return math.ceil(period_ns * (1 + HYSTERESIS))


def pick(stamps: list[int], after_ns: int | None, target_ns: float, period_ns: float, limit_ns: int) -> int | None:
    """Index (into the sorted ``stamps``) of the frame for a row targeting ``target_ns``: the nearest
    one newer than ``after_ns`` (the previous row's frame), within half a period of the target and
    captured at or before ``limit_ns``; earlier wins a tie. None: no such frame (repeat)."""
    best, best_d = None, None
    half = period_ns / 2
    for i, s in enumerate(stamps):
        if s > limit_ns:
            break
        if after_ns is not None and s <= after_ns:
            continue
        d = abs(s - target_ns)
        if d <= half and (best_d is None or d < best_d):
            best, best_d = i, d
    return best

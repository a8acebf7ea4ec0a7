"""Which camera frame goes with which row (nominal mode and RGB-D observations): causal, phase-locked.

Causal: row k's frame was captured at or before ``t_k`` (``CAUSAL_TOL_NS`` of clock noise allowed), as LeRobot's
own recorder and a policy at run time see it; a later capture would leak the commanded motion into the
observation. Phase-locked, not simply "the newest frame at or before t_k": a camera at the row rate whose
captures sit near a row time flips, with jitter, between just before and just after it, so one row repeats a
frame and the next drops one although every frame arrived. So each camera is locked to a slot:

- ``PhaseTracker`` estimates the camera's capture phase against the grid (the wrapped median of the last
  ``window`` frames' offsets to their nearest row time) and the jitter around it (the largest deviation either
  side, widened by (n+1)/(n-1) for a small sample). A camera not phase-coherent with the rows (another rate:
  mean resultant length below ``MIN_COHERENCE``, or ``KEEP_COHERENCE`` once locked) has no slot; a first lock
  from few captures needs less (``lock_threshold``), keeping it less again (``keep_threshold``).
- The slot is the phase moved back by whole periods until the latest capture the jitter allows is at or before
  the row; the first slot keeps a margin of twice its uncertainty (capped at ``HYSTERESIS`` / 2 of a period), so
  a later, better estimate does not move it. It then follows the phase: back a period (one repeat) as soon as
  its band reaches past ``t_k + CAUSAL_TOL_NS``, forward (one drop) only once the fresher slot's band ends
  ``HYSTERESIS`` of a period before that. A steady camera's frames are at most one period plus its jitter band
  plus that first margin old, and at most ``CAUSAL_TOL_NS`` new.
- Row k takes the frame nearest ``t_k + slot`` among those newer than the previous row's frame, within half a
  period and captured by ``t_k + CAUSAL_TOL_NS``; none there: the previous frame is repeated, and frames passed
  over are dropped. A capture jittered past the row beyond the band widens the band instead (one repeat).
- Cameras not locked take the newest frame captured at or before ``t_k`` (a 60 fps camera: every other frame
  dropped). The phase estimate only wraps ``HYSTERESIS`` of a period past the half period; the slot follows it
  continuously.
- The first estimate comes from the camera's captures before the episode (``CaptureHistory``) and the episode's
  own up to the horizon; when those before it cover less than ``WARMUP_S``, row 0 waits for the rest (a slot
  from too few captures lands a period off or steps back as the estimate grows).

Everything is a function of the stamps of frames captured up to ``t_k + horizon``, so the live recorder and the
bag converter choose the same frames. The assembler counts per camera the largest offset ahead of the row
(``frame_ahead_max_ms``) and behind it (``frame_behind_max_ms``).
"""

from __future__ import annotations

import cmath
import math
from collections import deque

MIN_COHERENCE = 0.3  # mean resultant length of the phases: ±10 ms uniform jitter at 30 fps gives ~0.5,
KEEP_COHERENCE = 0.2  # ±12 ms ~0.34, another rate ~0; once locked, a lock is kept down to this
COHERENCE_FLOOR = 0.15  # a first lock from few captures needs at least this (another rate's spread captures: <~0.12)
HYSTERESIS = 0.25  # of a period, past the half period, before the phase estimate wraps (see below)
WARMUP_S = 0.3  # captures the tracker sees before row 0's frame is chosen (row 0 waits for those missing)
HISTORY_GAP_S = 0.5  # a camera silent this long starts a new capture history (a restart: another phase)
CAUSAL_TOL_NS = 1_000_000  # a row's frame may be captured this long after it at most: the clock mapper's noise


def window_captures(fps: float) -> int:
    """Captures a phase estimate is taken from: 2 s of frames, a median steady to ~1 ms under ±10 ms jitter."""
    return max(5, round(2 * fps))


class CaptureHistory:
    """The newest ``window`` capture stamps of one camera, kept whatever the recorder is doing.

    An episode's phase estimate then starts from as many captures as it is later kept on, not from a warm-up.
    ``add`` is all an idle recorder does per frame (an append). A jump of more than ``HISTORY_GAP_S`` between stamps
    (a camera restarted or reconfigured: its phase and rate may have changed) forgets what came before, and so does
    ``before`` for a camera silent that long before the start: the episode then waits for the warm-up it lacks.
    """

    def __init__(self, window: int, gap_ns: int = round(HISTORY_GAP_S * 1e9)):
        self._stamps: deque[int] = deque(maxlen=max(1, window))
        self._gap = gap_ns
        self._newest: int | None = None

    def add(self, stamp_ns: int) -> None:
        """Keep one capture stamp (forgetting the history after a gap of ``HISTORY_GAP_S``)."""
        newest = self._newest
        if newest is None or abs(stamp_ns - newest) > self._gap:
            self._stamps.clear()
            newest = stamp_ns
        self._newest = max(newest, stamp_ns)
        self._stamps.append(stamp_ns)

    def before(self, start_ns: int) -> list[int]:
        """The kept stamps (sorted) for an episode starting at ``start_ns``.

        None if the camera has been silent for more than ``HISTORY_GAP_S`` by then.
        """
        if self._newest is None or start_ns - self._newest > self._gap:
            return []
        return sorted(self._stamps)


def wrap(x: float, period: float) -> float:
    """X folded into [-period/2, period/2)."""
    return (x + period / 2) % period - period / 2


class PhaseTracker:
    """Running capture-phase estimate of one camera against the row grid (ns).

    ``add`` the offsets of new captures; ``phase_ns`` brings the estimate up to date with them. The
    first estimate starts from the circular mean of what was added (the assembler gives it the
    captures before the episode and at least ``WARMUP_S`` of them before row 0), later ones move
    continuously from the previous one.
    """

    def __init__(self, period_ns: float, window: int):
        self.period = float(period_ns)
        self._offsets: deque[float] = deque(maxlen=max(3, window))
        self._units: deque[complex] = deque(maxlen=max(3, window))  # exp(2 pi i offset / period), per offset
        self._phase: float | None = None  # continuous: in [-P/2 - h, P/2 + h]
        self._slot: float | None = None  # causal target: phase - m * period, slot + jitter_up <= 1 ms
        self._dirty = False
        self.coherent = False
        self.jitter_up = 0.0  # measured jitter above / below the phase (ns)
        self.jitter_down = 0.0

    def add(self, offset_ns: float) -> None:
        """Offset of one capture to its nearest row time, in [-P/2, P/2]."""
        o = float(offset_ns)
        self._offsets.append(o)
        self._units.append(cmath.exp(2j * math.pi * o / self.period))  # once per capture, not per update
        self._dirty = True

    def _resultant(self) -> complex:
        # the same terms summed in the same order as when each update recomputed them: the same value
        return sum(self._units) / len(self._units)

    def _update(self) -> None:
        self._dirty = False
        p = self.period
        z = self._resultant()
        # the first estimate: around the circular mean, so a first capture jittered across the half
        # period does not start the estimate on the far side (it would stay there: the hysteresis)
        ref = wrap(cmath.phase(z) / (2 * math.pi) * p, p) if self._phase is None else self._phase
        h = p / 2
        d = sorted((o - ref + h) % p - h for o in self._offsets)  # wrap(o - ref, p), inlined
        n = len(d)
        med = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
        phase = ref + med
        limit = p / 2 + HYSTERESIS * p
        if phase > limit:
            phase -= p
        elif phase < -limit:
            phase += p
        self._phase = phase
        widen = (n + 1) / (n - 1) if n > 1 else 2.0  # n uniform samples miss 1/(n+1) of the range each side
        self.jitter_up = (d[-1] - med) * widen
        self.jitter_down = (med - d[0]) * widen
        self.coherent = abs(z) >= (keep_threshold(n) if self.coherent else lock_threshold(n))
        if self.coherent:
            self._slot = self._causal_slot(phase)

    def _causal_slot(self, phase: float) -> float:
        """The phase moved back by whole periods until its band's end ``slot + jitter_up`` is within ``CAUSAL_TOL_NS``.

        That is the freshest causal slot, continuous with the previous slot; it moves forward again only once
        ``HYSTERESIS`` of a period clear of the tolerance.
        """
        p, up = self.period, self.jitter_up
        hyst = HYSTERESIS * p
        if self._slot is None:
            # the first estimate comes from n captures (a window's worth before the episode; ~10 after a
            # recorder or camera start): its band's edge is uncertain by about the band / (n + 1); keep
            # 1 ms plus twice that inside the tolerance (at most midway to the drop bound below), so a
            # later estimate moves nothing (a repeat or a drop mid-episode)
            n = len(self._offsets)
            margin = min(hyst / 2, CAUSAL_TOL_NS + 2 * (up + self.jitter_down) / (n + 1))
            edge = CAUSAL_TOL_NS - margin
            return phase - math.ceil((phase + up - edge) / p) * p
        slot = phase - round((phase - self._slot) / p) * p  # follows the phase, across its wraps
        while slot + up > CAUSAL_TOL_NS:
            slot -= p  # the band reaches past the tolerance: one period back (a repeat)
        if slot + p + up <= CAUSAL_TOL_NS - hyst:
            slot += p  # the fresher slot is well clear of the row: one period on (a drop)
        return slot

    @property
    def phase_ns(self) -> float:
        """Where this camera's captures sit relative to the row times; 0 when not locked."""
        if self._dirty:
            self._update()
        return self._phase if (self.coherent and self._phase is not None) else 0.0

    @property
    def slot_ns(self) -> float | None:
        """Where row k's frame is sought, relative to t_k (at most ``-jitter_up``); None when not locked."""
        if self._dirty:
            self._update()
        return self._slot if self.coherent else None


def lock_threshold(n: int) -> float:
    """Resultant length a first lock needs from ``n`` captures.

    The warm-up gives few captures, and from so few a camera at the row rate with ±10 ms jitter (resultant ~0.5,
    spread ~0.41 per capture) can fall below ``MIN_COHERENCE`` by chance: its phase then reads 0, and captures
    jittered past the half period repeat and drop. So the bar is what such a camera clears with 3 sigma, down to
    ``COHERENCE_FLOOR`` (other rates spread their captures evenly: resultant near 0 at any n); from ~40 captures it
    is ``MIN_COHERENCE``.
    """
    return min(MIN_COHERENCE, max(COHERENCE_FLOOR, 0.505 - 3 * 0.41 / math.sqrt(max(1, n))))


def keep_threshold(n: int) -> float:
    """Resultant length a lock needs to be kept with ``n`` captures in the window.

    The first lock's bar minus the same hysteresis as from ``MIN_COHERENCE`` down to ``KEEP_COHERENCE``, at least
    ``COHERENCE_FLOOR``: a flat ``KEEP_COHERENCE`` would ask more than a first lock for few captures, so a lock taken
    from the warm-up could be lost at once (a drop while unlocked, then a repeat when it comes back a slot earlier).
    """
    return max(COHERENCE_FLOOR, lock_threshold(n) - (MIN_COHERENCE - KEEP_COHERENCE))


def horizon_ns(period_ns: float) -> int:
    """How far past t_k the phase tracker is fed before row k's frame is chosen.

    The frame itself is captured at or before ``t_k + CAUSAL_TOL_NS``; the horizon covers the captures of the next
    row's slot, so a capture jittered past the row beyond the measured band widens the band before a row could wait
    for it.
    """
    return math.ceil(period_ns * (1 + HYSTERESIS))


def first_row_reach_ns(period_ns: float) -> int:
    """How far before row 0 its frame may have been captured: two periods.

    The slot sits up to a period plus the jitter band before the row, and the nearest frame to it is sought within
    half a period. Row 0 chooses among the captures stamped within this reach only, whatever arrived before or after
    the start (the recorder's pre-roll, the bag converter's receive order), so the live recorder and the bag
    converter pick the same frame even when a frame reached one before the start request and the other after it.
    """
    return math.ceil(2 * period_ns)


def pick(
    stamps: list[int], after_ns: int | None, target_ns: float | None, period_ns: float, limit_ns: int
) -> int | None:
    """Index (into the sorted ``stamps``) of the frame for a row targeting ``target_ns``; None: no such frame (repeat).

    The nearest frame newer than ``after_ns`` (the previous row's frame), within half a period of the target and
    captured at or before ``limit_ns`` (the causal bound); earlier wins a tie. ``target_ns`` None (no lock): the
    newest one newer than ``after_ns`` at or before ``limit_ns``.
    """
    if target_ns is None:
        newest = None
        for i, s in enumerate(stamps):
            if s > limit_ns:
                break
            if after_ns is None or s > after_ns:
                newest = i
        return newest
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

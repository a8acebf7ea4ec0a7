"""Chunk executor: action chunks in, one due action per control tick out; never waits on a query.

Row k of a chunk answering the observation at ``t0`` is due at ``t0 + k * period`` (the training
rate). At time ``now`` the due row is ``k = floor((now - t0) / period)``; rows before it passed while
the query was in flight and are dropped (counted). ``receding``: the newest chunk covering ``now``
gives the action. ``ensemble`` (ACT temporal ensembling): every chunk covering ``now`` votes with
weight ``exp(-m * i)``, ``i = 0`` for the oldest prediction (ACT's convention; ``m`` configurable),
each arm's quaternion (``ActionLayout``: its slice of the row) sign-aligned before averaging and
renormalised. The next query is due once the newest
chunk has run ``replan_every`` steps or has no more than the lead time left (``lead_ns``: the
runtime derives it from the measured round trip, ``LeadTime``; ``query_ahead`` rows at least), so
its answer arrives before the chunk runs out. Pure and clock-free: every method takes ``now_ns``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from piper_recorder.lerobot.format.action_layout import ActionLayout

from .backend import SINGLE_ARM, ActionChunk

F64 = npt.NDArray[np.float64]


class LeadTime:
    """How long before the newest chunk runs out the next query must leave.

    The p99 of the recent query latencies (submit to answer taken, on the control ticks) plus one control period (a
    query leaves on a tick, up to a period after the ideal instant) plus ``margin_ns`` (jitter), never more than a
    whole chunk (then the next query leaves as soon as an answer arrives). Before the first answer it is 0: the
    executor's ``query_ahead`` floor applies.
    """

    def __init__(self, period_ns: int, margin_ns: int, chunk_ns: int, window: int = 32):
        self.period_ns, self.margin_ns, self.chunk_ns = int(period_ns), int(margin_ns), int(chunk_ns)
        self._recent: deque[int] = deque(maxlen=window)

    def observe(self, latency_ns: int) -> None:
        """Record one query's latency."""
        self._recent.append(int(latency_ns))

    def p99_ns(self) -> int | None:
        """The p99 of the recent latencies, or None before the first."""
        return int(np.percentile(np.asarray(self._recent, dtype=np.float64), 99)) if self._recent else None

    def lead_ns(self) -> int:
        """The lead time now (0 before the first answer)."""
        p99 = self.p99_ns()
        if p99 is None:
            return 0
        return min(p99 + self.period_ns + self.margin_ns, self.chunk_ns)


@dataclass
class _Chunk:
    rows: F64
    t0_ns: int
    first_k: int  # the row due when the chunk arrived (executed from here)


@dataclass
class ExecutorCounters:
    """What the executor counted: chunks and rows received, rows that arrived too late, stale chunks."""

    chunks: int = 0
    rows_received: int = 0
    rows_dropped_late: int = 0  # rows whose time passed before their chunk arrived
    chunks_stale: int = 0  # chunks that arrived with nothing left to execute


class ChunkExecutor:
    """Action chunks in, the action due at each control tick out (the module's rules)."""

    def __init__(
        self,
        period_ns: int,
        mode: str = "receding",
        ensemble_m: float = 0.01,
        replan_every: int = 10,
        query_ahead: int = 10,
        layout: ActionLayout = SINGLE_ARM,
    ):
        if period_ns <= 0:
            raise ValueError("period_ns must be > 0")
        if mode not in ("receding", "ensemble"):
            raise ValueError(f"mode must be receding or ensemble, got {mode!r}")
        self.period_ns, self.mode, self.m = int(period_ns), mode, float(ensemble_m)
        self.replan_every, self.query_ahead = int(replan_every), int(query_ahead)
        self.layout = layout
        self._chunks: list[_Chunk] = []  # oldest first (by observation time)
        self.counters = ExecutorCounters()

    def reset(self) -> None:
        """Forget every chunk (after a pause or takeover the old answers describe another world)."""
        self._chunks = []

    def _k(self, c: _Chunk, now_ns: int) -> int:
        return (now_ns - c.t0_ns) // self.period_ns

    def add(self, chunk: ActionChunk, now_ns: int) -> None:
        """Take a new chunk at ``now_ns``; rows already past are dropped and counted."""
        rows = np.asarray(chunk.rows, dtype=np.float64)
        c = _Chunk(rows, int(chunk.t0_ns), 0)
        k = max(0, self._k(c, now_ns))
        c.first_k = k
        self.counters.chunks += 1
        self.counters.rows_received += len(rows)
        self.counters.rows_dropped_late += min(k, len(rows))
        if k >= len(rows):
            self.counters.chunks_stale += 1
            return
        if self._chunks and c.t0_ns < self._chunks[-1].t0_ns:
            return  # an answer to an older observation than the newest held: nothing new in it
        self._chunks.append(c)

    def _covering(self, now_ns: int) -> list[tuple[_Chunk, int]]:
        self._chunks = [c for c in self._chunks if self._k(c, now_ns) < len(c.rows)]
        return [(c, k) for c in self._chunks if 0 <= (k := self._k(c, now_ns)) < len(c.rows)]

    def action(self, now_ns: int) -> F64 | None:
        """The action due at ``now_ns`` (the layout's row, quat wxyz), or None when no chunk covers it."""
        cov = self._covering(now_ns)
        if not cov:
            return None
        if self.mode == "receding" or len(cov) == 1:
            c, k = cov[-1]
            row: F64 = c.rows[k].copy()
            return row
        preds = np.stack([c.rows[k] for c, k in cov])  # oldest first
        w = np.exp(-self.m * np.arange(len(preds), dtype=np.float64))
        w /= w.sum()
        out: F64 = np.einsum("i,ij->j", w, preds)
        for arm in self.layout.arms:
            quats = preds[:, arm.quat].copy()
            ref = quats[0]
            quats[np.einsum("ij,j->i", quats, ref) < 0] *= -1.0  # one hemisphere before averaging
            q = np.einsum("i,ij->j", w, quats)
            n = float(np.linalg.norm(q))
            out[arm.quat] = q / n if n > 0 and math.isfinite(n) else ref
        return out

    def want_query(self, now_ns: int, lead_ns: int = 0) -> bool:
        """True when a new query should be sent now (the caller keeps at most one in flight).

        That is when the newest chunk ran ``replan_every`` steps, or has at most ``max(query_ahead rows, lead_ns)`` left.
        """
        if not self._chunks:
            return True
        c = self._chunks[-1]
        k = self._k(c, now_ns)
        ahead = max(self.query_ahead, -(-int(lead_ns) // self.period_ns))  # rows, rounded up
        return k - c.first_k >= self.replan_every or len(c.rows) - k <= ahead

    def remaining(self, now_ns: int) -> int:
        """Rows of the newest chunk still ahead (0 when nothing covers now)."""
        if not self._chunks:
            return 0
        c = self._chunks[-1]
        return max(0, len(c.rows) - max(0, self._k(c, now_ns)))

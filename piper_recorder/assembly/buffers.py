"""Per-input sample buffers ordered by stamp, so arrival order never changes what a tick sees."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", int, tuple[int, int])  # the stamp: ns, or (ns, arrival seq) for lines sharing a stamp
V = TypeVar("V")


@dataclass(frozen=True)
class Sample(Generic[K, V]):
    """One stamped value."""

    stamp_ns: K
    value: V


class SampleBuffer(Generic[K, V]):
    """Samples of one input sorted by stamp; ``latest_at(t)`` is the newest sample stamped <= t.

    A sample with the same stamp as a buffered one replaces it (duplicates carry no new time).
    """

    def __init__(self) -> None:
        self._stamps: list[K] = []
        self._values: list[V] = []

    def __len__(self) -> int:
        return len(self._stamps)

    def insert(self, stamp_ns: K, value: V) -> None:
        """Insert a sample in stamp order (a sample with the same stamp is replaced)."""
        i = bisect.bisect_left(self._stamps, stamp_ns)
        if i < len(self._stamps) and self._stamps[i] == stamp_ns:
            self._values[i] = value
            return
        self._stamps.insert(i, stamp_ns)
        self._values.insert(i, value)

    @property
    def stamps(self) -> list[K]:
        """The buffered stamps, sorted (read only)."""
        return self._stamps

    def at(self, i: int) -> Sample[K, V]:
        """The ``i``-th sample in stamp order."""
        return Sample(self._stamps[i], self._values[i])

    def first(self) -> Sample[K, V] | None:
        """The oldest sample, or None."""
        return Sample(self._stamps[0], self._values[0]) if self._stamps else None

    def index_at(self, t_ns: K) -> int:
        """Index of the newest sample stamped <= t_ns, or -1."""
        return bisect.bisect_right(self._stamps, t_ns) - 1

    def latest_at(self, t_ns: K) -> Sample[K, V] | None:
        """The newest sample stamped at or before ``t_ns``, or None."""
        i = self.index_at(t_ns)
        return None if i < 0 else Sample(self._stamps[i], self._values[i])

    def count_between(self, lo_ns: K, hi_ns: K) -> int:
        """Number of samples with lo < stamp < hi (open interval)."""
        return max(0, bisect.bisect_left(self._stamps, hi_ns) - bisect.bisect_right(self._stamps, lo_ns))

    def prune_before(self, t_ns: K) -> None:
        """Forget samples older than the newest one stamped <= t_ns (that one stays: it is still 'latest')."""
        i = self.index_at(t_ns)
        if i > 0:
            del self._stamps[:i]
            del self._values[:i]

    def pop_until(self, t_ns: K) -> list[Sample[K, V]]:
        """Remove and return, in stamp order, every sample stamped <= t_ns."""
        i = self.index_at(t_ns) + 1
        out = [Sample(s, v) for s, v in zip(self._stamps[:i], self._values[:i])]
        del self._stamps[:i]
        del self._values[:i]
        return out

    def drop_through(self, t_ns: K) -> int:
        """Remove every sample stamped <= t_ns; returns how many."""
        i = self.index_at(t_ns) + 1
        del self._stamps[:i]
        del self._values[:i]
        return i

"""Pair the colour and aligned-depth images of one capture by nearest stamp, within half a frame period.

realsense2_camera gives both halves the same stamp only with ``enable_sync: true``; without it (or
with another driver) depth and colour are separate exposures a few ms apart. A colour image and a
depth image pair when each is the other's nearest unpaired image and they are at most half a frame
period apart, so a stream offset of up to half a period pairs every capture, whatever order the two
topics arrive in. An image that can no longer find a partner (the other stream has passed it by more
than half a period, or more than ``window`` images wait on its side) is dropped and counted in
``unpaired``.
"""

from __future__ import annotations

import bisect
from typing import Any

Pair = tuple[int, Any, Any]  # (colour stamp, rgb, depth)


class DepthPairer:
    """``add_color``/``add_depth`` return the (stamp_ns, rgb, depth) pairs they complete, oldest first."""

    def __init__(self, period_ns: float, window: int = 8):
        self.half = period_ns / 2
        self.window = window
        self._side: dict[bool, list[tuple[int, Any]]] = {False: [], True: []}  # is_depth -> sorted (stamp, img)
        self._newest: dict[bool, int | None] = {False: None, True: None}  # newest stamp seen per side
        self.unpaired = 0

    def add_color(self, stamp_ns: int, rgb: Any) -> list[Pair]:
        """Add a colour image; returns the pairs it completes."""
        return self._add(False, int(stamp_ns), rgb)

    def add_depth(self, stamp_ns: int, depth: Any) -> list[Pair]:
        """Add a depth image; returns the pairs it completes."""
        return self._add(True, int(stamp_ns), depth)

    def _add(self, is_depth: bool, stamp: int, img: Any) -> list[Pair]:
        mine = self._side[is_depth]
        newest = self._newest[is_depth]
        self._newest[is_depth] = stamp if newest is None else max(newest, stamp)
        stamps = [s for s, _ in mine]
        i = bisect.bisect_left(stamps, stamp)
        if i < len(mine) and mine[i][0] == stamp:
            mine[i] = (stamp, img)  # a duplicate stamp carries no new capture: keep the newer image
        else:
            mine.insert(i, (stamp, img))
        pairs = self._match()
        self._evict()
        return pairs

    @staticmethod
    def _nearest(items: list[tuple[int, Any]], stamp: int) -> int | None:
        if not items:
            return None
        return min(range(len(items)), key=lambda j: (abs(items[j][0] - stamp), items[j][0]))

    def _match(self) -> list[Pair]:
        color, depth = self._side[False], self._side[True]
        out: list[Pair] = []
        i = 0
        while i < len(color):
            s = color[i][0]
            j = self._nearest(depth, s)
            if j is not None and abs(depth[j][0] - s) <= self.half and self._nearest(color, depth[j][0]) == i:
                out.append((s, color.pop(i)[1], depth.pop(j)[1]))
                i = 0
                continue
            i += 1
        out.sort(key=lambda p: p[0])
        return out

    def _evict(self) -> None:
        for side in (False, True):
            mine, other = self._side[side], self._side[not side]
            newest_other = self._newest[not side]  # that stream is in stamp order: it will not come back
            while mine and (
                len(mine) > self.window
                or (
                    newest_other is not None
                    and newest_other - mine[0][0] > self.half
                    and not any(abs(s - mine[0][0]) <= self.half for s, _ in other)
                )
            ):
                mine.pop(0)
                self.unpaired += 1

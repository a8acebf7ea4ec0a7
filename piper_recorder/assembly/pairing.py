"""Pair colour and aligned-depth images of one capture by their identical stamp (realsense convention)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any


class DepthPairer:
    """``add_color``/``add_depth`` return (stamp_ns, rgb, depth) once both halves of a capture are in.

    At most ``window`` unmatched halves are kept per side; older ones are dropped and counted in
    ``unpaired`` (a capture whose other half never arrived).
    """

    def __init__(self, window: int = 8):
        self.window = window
        self._color: OrderedDict[int, Any] = OrderedDict()
        self._depth: OrderedDict[int, Any] = OrderedDict()
        self.unpaired = 0

    def add_color(self, stamp_ns: int, rgb: Any) -> tuple[int, Any, Any] | None:
        return self._add(int(stamp_ns), rgb, self._color, self._depth, color_first=True)

    def add_depth(self, stamp_ns: int, depth: Any) -> tuple[int, Any, Any] | None:
        return self._add(int(stamp_ns), depth, self._depth, self._color, color_first=False)

    def _add(self, stamp: int, img: Any, mine: OrderedDict, other: OrderedDict, color_first: bool):
        match = other.pop(stamp, None)
        if match is None:
            mine[stamp] = img
            while len(mine) > self.window:
                mine.popitem(last=False)
                self.unpaired += 1
            return None
        return (stamp, img, match) if color_first else (stamp, match, img)

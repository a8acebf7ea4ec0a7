"""Where the episodes of a bag are: from /episode_events, from --episode ranges, or the whole bag."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeSpan:
    """One episode to convert: the grid origin ``start_ns`` and the end ``end_ns`` (ROS clock, ns).

    ``feed_ns`` is the receive time from which messages go to the assembler (the live "started"
    time when known: the live recorder fed everything from there, plus the newest sample of each input
    received before it). ``rows`` is the live row count (events only), used to verify the result.
    """

    start_ns: int
    end_ns: int
    task: str | None = None
    reason: str = "stop_episode"  # why the live episode ended; anything else is a truncation (RGB-D timeout)
    origin: str = "whole"  # "events" | "range" | "whole"
    feed_ns: int | None = None
    rows: int | None = None
    live_index: int | None = None

    @property
    def feed_from_ns(self) -> int:
        """Where feeding the episode's messages starts (its pre-roll)."""
        return self.start_ns if self.feed_ns is None else min(self.feed_ns, self.start_ns)

    @property
    def timeout(self) -> bool:
        """Whether the live episode ended otherwise than by a stop (a truncation)."""
        return self.reason != "stop_episode"


def recorders_with_saves(lines: Iterable[str]) -> list[str]:
    """Recorder names that saved at least one episode, in order of first save."""
    out: list[str] = []
    for ev in _events(lines):
        if ev.get("event") == "saved" and str(ev.get("recorder", "")) not in out:
            out.append(str(ev.get("recorder", "")))
    return out


def _events(lines: Iterable[str]) -> Iterable[dict]:
    for line in lines:
        try:
            ev = json.loads(line)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(ev, dict):
            yield ev


def spans_from_events(lines: Iterable[str], recorder: str | None = None) -> list[EpisodeSpan]:
    """Episodes a recorder saved (and did not delete afterwards), from /episode_events JSON lines.

    With ``recorder=None`` the first recorder that saved anything is used, so a bag holding both
    recorders' events does not yield every episode twice. A deleted episode's index is reused by the
    next save, so the list is kept in save order and a delete removes the newest save of that index.
    """
    lines = list(lines)
    if recorder is None:
        names = recorders_with_saves(lines)
        if not names:
            return []
        recorder = names[0]
    started: dict[int, int] = {}
    saved: list[tuple[int, EpisodeSpan]] = []
    for ev in _events(lines):
        if str(ev.get("recorder", "")) != recorder:
            continue
        try:
            idx = int(ev.get("episode_index", -1))
        except (TypeError, ValueError):
            continue
        kind = ev.get("event")
        if kind == "started" and ev.get("start_ns") is not None:
            started[idx] = int(ev["start_ns"])
        elif kind == "saved" and ev.get("start_ns") is not None and ev.get("end_ns") is not None:
            rows = ev.get("rows")
            saved.append(
                (
                    idx,
                    EpisodeSpan(
                        int(ev["start_ns"]),
                        int(ev["end_ns"]),
                        ev.get("task") or None,
                        reason=str(ev.get("reason") or "stop_episode"),
                        origin="events",
                        feed_ns=started.pop(idx, None),
                        rows=int(rows) if rows is not None else None,
                        live_index=idx,
                    ),
                )
            )
        elif kind == "deleted":
            for j in range(len(saved) - 1, -1, -1):
                if saved[j][0] == idx:
                    del saved[j]
                    break
    return [s for _, s in saved]


def spans_from_ranges(ranges: Iterable[str], bag_start_ns: int, min_gap_ns: int = 0) -> list[EpisodeSpan]:
    """Episode spans from ``START:END`` ranges in seconds from the bag's first message, e.g. ``2.5:12``.

    Sorted, at least ``min_gap_ns`` apart (one pass feeds one episode at a time).
    """
    spans = []
    for text in ranges:
        try:
            a, b = (float(x) for x in text.split(":"))
        except ValueError as exc:
            raise ValueError(f"--episode {text!r}: expected START:END in seconds, e.g. 2.5:12") from exc
        if not 0 <= a < b:
            raise ValueError(f"--episode {text!r}: need 0 <= START < END")
        spans.append(EpisodeSpan(bag_start_ns + round(a * 1e9), bag_start_ns + round(b * 1e9), origin="range"))
    spans.sort(key=lambda s: s.start_ns)
    for prev, nxt in itertools.pairwise(spans):
        if nxt.start_ns < prev.end_ns + min_gap_ns:
            raise ValueError(
                f"--episode ranges overlap or are closer than {min_gap_ns / 1e9:g} s "
                f"(the assembly delay): {(prev.end_ns - bag_start_ns) / 1e9:g} s and "
                f"{(nxt.start_ns - bag_start_ns) / 1e9:g} s"
            )
    return spans


def whole_bag(bag_start_ns: int, bag_end_ns: int) -> list[EpisodeSpan]:
    """The whole bag; its end is where recording stopped, not a task end, so it is a truncation."""
    return [EpisodeSpan(bag_start_ns, bag_end_ns, reason="end_of_bag", origin="whole")]

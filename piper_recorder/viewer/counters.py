"""Episode counters (the recorder's record in episodes.jsonl) as readable tables, problems highlighted.

A counter is a number, or a dict of numbers per camera / input (``video_dropped_frames`` nests one
level more). Problem counters (drops, repeats, late, stale, encoder drops, ...) are highlighted when
non-zero; the rest is shown for context. Unknown keys are listed as they are, so nothing is hidden.
"""

from __future__ import annotations

import json
from typing import Any

from piper_recorder.viewer.page import esc

# key -> label; any non-zero value is a problem worth a look
PROBLEMS: dict[str, str] = {
    "frames_dropped": "frames dropped (skipped between rows)",
    "frames_repeated": "frames repeated (no new frame for a row)",
    "frames_missing": "frames missing (capture gaps)",
    "frames_late": "frames late (arrived after their row)",
    "frames_stale": "frames stale (older than stale_s)",
    "frames_ahead": "frames captured after their row (within 1 ms)",
    "frames_beyond_half_period": "frames more than ½ period from their row (older recorders)",
    "frames_unpaired": "colour/depth images unpaired",
    "frames_rejected_by_encoder": "encoder drops (refused frames)",
    "video_dropped_frames": "encoder drops (writer)",
    "messages_late": "messages late (after their row)",
    "messages_invalid": "messages invalid (non-finite)",
    "values_stale": "values stale (older than stale_s)",
}
INFO: dict[str, str] = {
    "timestamp_mode": "timestamp mode",
    "rows": "rows",
    "skipped_start_ticks": "start ticks waiting for inputs",
    "frames_received": "frames received",
    "frames_sent": "frames sent",
    "frames_written": "frames written",
    "frame_offset_max_ms": "largest frame offset from its row (ms)",
    "frame_ahead_max_ms": "largest frame capture after its row (ms)",
    "frame_behind_max_ms": "oldest frame before its row (ms)",
    "tick_delay_ms": "tick delay past due (ms)",
    "raw_quest_lines": "raw headset lines",
}
# per-camera maxima: the overall figure is their maximum, not a sum
MAXIMA = {"frame_offset_max_ms", "frame_ahead_max_ms", "frame_behind_max_ms"}


def total(value: Any) -> float:
    """Sum of every number in a counter (nested dicts included); booleans and text count 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, dict):
        return sum(total(v) for v in value.values())
    return 0


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else esc(v)


def _breakdown(value: Any) -> str:
    """'cam_front 3 · cam_wrist 0' for a dict; nested dicts one level deeper in parentheses."""
    if not isinstance(value, dict):
        return ""
    parts = []
    for k, v in value.items():
        if isinstance(v, dict):
            inner = ", ".join(f"{esc(a)} {_num(b)}" for a, b in v.items())
            parts.append(f"{esc(k)} ({inner})")
        else:
            parts.append(f"{esc(k)} {_num(v)}")
    return " · ".join(parts)


def problems(record: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(key, label, total) of every non-zero problem counter of one episode record."""
    return [(k, label, total(record[k])) for k, label in PROBLEMS.items() if k in record and total(record[k])]


def summary_cell(record: dict[str, Any], anchor: str | None = None) -> str:
    """The overview's one-cell verdict: highlighted badges for the problems, or 'none'."""
    found = problems(record)
    if not found:
        return '<span class="ok">none</span>'
    badges = " ".join(
        f'<span class="badge bad" data-counter="{esc(k)}">{esc(label.split(" (")[0])} {_num(n)}</span>'
        for k, label, n in found
    )
    return f'<a href="#{esc(anchor)}">{badges}</a>' if anchor else badges


def counters_table(record: dict[str, Any], table_id: str, skip: set[str] | frozenset[str] = frozenset()) -> str:
    """Counter | total | breakdown, problems first; non-zero problems highlighted (class ``bad``)."""
    rows = []

    def row(key: str, label: str, value: Any, problem: bool) -> None:
        if isinstance(value, dict) and key == "tick_delay_ms":
            tot = ", ".join(f"{esc(a)} {_num(b)}" for a, b in value.items())
            rows.append(
                f'<tr data-counter="{esc(key)}"><td class="l">{esc(label)}</td><td class="l" colspan="2">'
                f"{tot}</td></tr>"
            )
            return
        if key in MAXIMA and isinstance(value, dict):
            tot, detail = (
                _num(max((v for v in value.values() if isinstance(v, (int, float))), default=0)),
                _breakdown(value),
            )
        elif isinstance(value, (dict, int, float)) and not isinstance(value, bool):
            tot, detail = _num(total(value)), _breakdown(value)
        else:
            tot, detail = "", f"<code>{esc(value if isinstance(value, str) else json.dumps(value))}</code>"
        bad = problem and total(value) != 0
        cls = ' class="bad"' if bad else ""
        rows.append(
            f'<tr data-counter="{esc(key)}"{cls}><td class="l">{esc(label)}</td><td>{tot}</td>'
            f'<td class="l">{detail}</td></tr>'
        )

    for key, label in PROBLEMS.items():
        if key in record and key not in skip:
            row(key, label, record[key], True)
    for key, label in INFO.items():
        if key in record and key not in skip:
            row(key, label, record[key], False)
    for key in sorted(set(record) - set(PROBLEMS) - set(INFO) - set(skip)):
        row(key, key, record[key], False)
    if not rows:
        return ""
    return (
        f'<table class="counters" id="{esc(table_id)}"><tr><th class="l">counter</th><th>total</th>'
        f'<th class="l">per camera / input</th></tr>{"".join(rows)}</table>'
    )

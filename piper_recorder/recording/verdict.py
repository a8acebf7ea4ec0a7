"""Save-time integrity verdict of one episode (no ROS): ``ok | warn | bad`` with the reasons.

Why: the most common silent failure is data that is wrong without an error (frames dropped or
repeated, a camera that stalled, arm feedback that stopped). The recorders count every one of
those; this turns the counts, and what was actually written, into one verdict a trainer or a
curator can filter on (``piper-dataset filter --verdict ok``).

Inputs, all known at the save:
* the episode's counters (``assembly.Counters`` + the writer's record): frames repeated, skipped between
  rows by the assembly (capture jitter), lost (behind the writer, refused by a full encoder queue,
  non-increasing PTS), stale,
  late; frames captured after their row (a clock step between a camera and the recorder) and the
  oldest frame any row carried (``frame_age_max_ms``: a stalled camera's rows repeat a frame that
  grows hundreds of ms old); arm inputs
  stale at a row (a gap in arm feedback longer than ``stale_s``);
* what was written: rows against the encoded frames per camera (nominal mode: one frame per row,
  the writer's own count) and, when the mp4s are given, their packet PTS read back with PyAV (no
  decoding): strictly increasing and, in nominal mode, each within LeRobot's tolerance of its row's
  grid time ``k / fps``; and the rows' own timestamps (strictly increasing, on the grid).

Every threshold is a field of ``VerdictConfig``, which the recorders expose as parameters
(``verdict.*``). A reason names the camera or input, the count and the threshold it crossed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

OK, WARN, BAD = "ok", "warn", "bad"
VERDICTS = (OK, WARN, BAD)
OUTCOMES = ("success", "failure")
VERDICT_KEY, REASONS_KEY = "verdict", "verdict_reasons"
OUTCOME_KEY, NOTE_KEY = "outcome", "outcome_note"
NOTE_MAX = 200  # characters of an outcome note: a short remark, not a log
PTS_TOLERANCE_S = 1e-4  # LeRobot's default ``tolerance_s``
# the arm's feedback (values_stale of these: feedback gaps); several arms' carry the arm's name in front
ARM_INPUTS = ("joint_states", "eef_pose")


@dataclass
class VerdictConfig:
    """Thresholds of the verdict, as fractions of the episode's rows unless named otherwise.

    A count above ``warn_*`` makes the episode ``warn``, above ``bad_*`` ``bad``. The defaults are
    what a healthy sim graph on a loaded 2-core machine stays under (a few repeats from jitter,
    no drops) and what a camera stall of a second crosses.
    """

    warn_repeated: float = 0.03  # frames repeated (a row re-used the previous frame), per camera
    bad_repeated: float = 0.10
    warn_dropped: float = 0.0  # frames skipped (capture jitter) or lost (writer, encoder), per camera
    bad_dropped: float = 0.02
    warn_stale: float = 0.0  # rows with an arm input older than stale_s (a feedback gap)
    bad_stale: float = 0.05
    warn_late: float = 0.02  # messages that arrived after their row was assembled, per input
    bad_late: float = 0.10
    warn_frame_age_ms: float = 150.0  # the oldest frame a row carried (frame_age_max_ms): a stall
    bad_frame_age_ms: float = 500.0
    warn_frame_ahead_ms: float = 5.0  # a frame captured this long after its row: a clock step
    bad_frame_ahead_ms: float = 50.0

    def validate(self) -> None:
        """Raise ``ValueError`` for a negative threshold or a bad one below its warning."""
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"verdict.{f.name} must be a finite number >= 0, got {v!r}")
        for what in ("repeated", "dropped", "stale", "late", "frame_age_ms", "frame_ahead_ms"):
            if getattr(self, f"bad_{what}") < getattr(self, f"warn_{what}"):
                raise ValueError(f"verdict.bad_{what} must be >= verdict.warn_{what}")


@dataclass(frozen=True)
class Verdict:
    """An episode's verdict (ok, warn or bad) and the reasons for it."""

    verdict: str
    reasons: tuple[str, ...]

    def fields(self) -> dict[str, Any]:
        """The episode-record keys (episodes.jsonl, the RGB-D episode attrs)."""
        return {VERDICT_KEY: self.verdict, REASONS_KEY: list(self.reasons)}


class _Judge:
    def __init__(self) -> None:
        self.level = 0
        self.reasons: list[str] = []

    def add(self, level: int, reason: str) -> None:
        self.level = max(self.level, level)
        self.reasons.append(f"{VERDICTS[level]}: {reason}")

    def frac(self, what: str, count: float, rows: int, warn: float, bad: float, per: str = "of") -> None:
        """Judge ``count`` of ``rows`` against the fractions ``warn`` / ``bad`` (strictly above).

        ``per="for"``: messages, which can outnumber the rows.
        """
        if count <= 0 or rows <= 0:
            return
        f = count / rows
        if f > bad:
            self.add(2, f"{what}: {count:g} {per} {rows} rows ({100 * f:.1f} % > {100 * bad:g} %)")
        elif f > warn:
            self.add(1, f"{what}: {count:g} {per} {rows} rows ({100 * f:.1f} % > {100 * warn:g} %)")

    def limit(self, what: str, value: float, warn: float, bad: float, unit: str) -> None:
        if value > bad:
            self.add(2, f"{what}: {value:g} {unit} > {bad:g} {unit}")
        elif value > warn:
            self.add(1, f"{what}: {value:g} {unit} > {warn:g} {unit}")


def _map(record: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = record.get(key)
    return v if isinstance(v, Mapping) else {}


def _num(d: Any, key: str) -> float:
    v = d.get(key, 0) if isinstance(d, Mapping) else 0
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def judge(
    record: Mapping[str, Any],
    cfg: VerdictConfig,
    fps: float,
    cameras: Sequence[str],
    videos: Mapping[str, Path] | None = None,
    timestamps: Sequence[float] | None = None,
    video_rows: str = "frames",
) -> Verdict:
    """The verdict of one saved episode from its ``record`` (episodes.jsonl keys: counters + the writer's).

    ``videos``: each camera's mp4 to read the PTS back from; ``timestamps``: the rows' written times; ``video_rows``:
    what a row's frame count is compared against (``frames`` for LeRobot, ``observations`` for RGB-D, where
    ``length`` is the transitions and a frame is an observation).
    """
    j = _Judge()
    rows = int(_num(record, "length") or _num(record, "rows"))
    nominal = record.get("timestamp_mode", "nominal") == "nominal"
    lengths, vdrop = _map(record, "video_frame_lengths"), _map(record, "video_dropped_frames")
    for cam in cameras:
        # rows against what was written (the writer's count of encoded frames)
        if cam in lengths:
            written = int(_num(lengths, cam))
            if nominal and written != rows:
                j.add(2, f"{cam}: {written} video frames written for {rows} rows")
            elif written == 0:
                j.add(2, f"{cam}: no video frame written")
        # frames not in the episode, by cause: skipped between two rows (the camera delivered two within one
        # row period: capture jitter, no row without its frame) or lost (shed behind the writer, refused by
        # the encoder); one threshold on the sum, each cause named in the reason
        causes = {
            "skipped between rows (capture jitter)": _num(record.get("frames_dropped"), cam),
            "lost behind the writer": _num(record.get("frames_dropped_writer_behind"), cam),
            "lost to a full encoder queue": _num(vdrop.get(cam), "queue_full")
            + _num(record.get("frames_rejected_by_encoder"), cam),
        }
        named = [(what, n) for what, n in causes.items() if n]
        what = named[0][0] if len(named) == 1 else ", ".join(f"{w} {n:g}" for w, n in named)
        j.frac(f"{cam}: frames {what}", sum(causes.values()), rows, cfg.warn_dropped, cfg.bad_dropped)
        pts_drops = _num(vdrop.get(cam), "non_increasing_pts")
        if pts_drops:
            j.add(1, f"{cam}: {pts_drops:g} frames with a non-increasing PTS dropped by the encoder")
        j.frac(
            f"{cam}: frames repeated",
            _num(record.get("frames_repeated"), cam),
            rows,
            cfg.warn_repeated,
            cfg.bad_repeated,
        )
        j.frac(f"{cam}: stale frames", _num(record.get("frames_stale"), cam), rows, cfg.warn_stale, cfg.bad_stale)
        age = _map(record, "frame_age_max_ms") or _map(record, "frame_behind_max_ms")  # older roots: new frames only
        j.limit(
            f"{cam}: oldest frame at a row (camera stall)",
            _num(age, cam),
            cfg.warn_frame_age_ms,
            cfg.bad_frame_age_ms,
            "ms",
        )
        j.limit(
            f"{cam}: frame captured after its row (clock step)",
            _num(record.get("frame_ahead_max_ms"), cam),
            cfg.warn_frame_ahead_ms,
            cfg.bad_frame_ahead_ms,
            "ms",
        )
        if _num(record.get("frames_unpaired"), cam):
            j.add(1, f"{cam}: {_num(record.get('frames_unpaired'), cam):g} colour/depth images without a partner")
    stale = _map(record, "values_stale")
    for name in ARM_INPUTS:
        j.frac(
            f"arm feedback {name} stale (gap longer than stale_s)",
            _num(stale, name),
            rows,
            cfg.warn_stale,
            cfg.bad_stale,
        )
    for name in sorted(k for k in stale if k not in ARM_INPUTS):
        arm = name.partition("_")[2] in ARM_INPUTS  # several arms: left_joint_states, ...
        what = f"arm feedback {name} stale (gap longer than stale_s)" if arm else f"input {name} stale"
        j.frac(what, _num(stale, name), rows, cfg.warn_stale, cfg.bad_stale)
    late = _map(record, "messages_late")
    for name in sorted(late):
        j.frac(f"{name}: messages late", _num(late, name), rows, cfg.warn_late, cfg.bad_late, per="for")
    if timestamps is not None:
        _check_grid(j, "rows", [float(t) for t in timestamps], fps, strict_grid=True)
    for cam, path in (videos or {}).items():
        try:
            pts = read_pts(path)
        except Exception as exc:  # noqa: BLE001 - an unreadable video is the verdict, not a crash of the save
            j.add(2, f"{cam}: video unreadable ({type(exc).__name__}: {exc})")
            continue
        if cam in lengths and len(pts) != int(_num(lengths, cam)):
            j.add(2, f"{cam}: {len(pts)} packets in the mp4, the writer counted {int(_num(lengths, cam))}")
        _check_grid(j, f"{cam} PTS", pts, fps, strict_grid=nominal)
    return Verdict(VERDICTS[j.level], tuple(j.reasons))


def _check_grid(j: _Judge, what: str, times: list[float], fps: float, strict_grid: bool) -> None:
    """Strictly increasing; with ``strict_grid`` each time within PTS_TOLERANCE_S of ``k / fps``."""
    back = sum(1 for a, b in itertools.pairwise(times) if b <= a)
    if back:
        j.add(2, f"{what}: {back} non-increasing steps")
    if strict_grid:
        off = [k for k, t in enumerate(times) if abs(t - k / fps) >= PTS_TOLERANCE_S]
        if off:
            j.add(2, f"{what}: {len(off)} off the 1/{fps:g} s grid (first at index {off[0]}: {times[off[0]]:.6f} s)")


def read_pts(path: Path) -> list[float]:
    """The mp4's video packet PTS in seconds, in presentation order, demuxed without decoding.

    With ``bf=0`` (our encoder) decode order is presentation order.
    """
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        tb = float(s.time_base) if s.time_base is not None else 0.0
        pts = [float(p.pts) * tb for p in c.demux(s) if p.pts is not None]
    return sorted(pts)


def check_outcome(outcome: Any, note: Any = "") -> str | None:
    """Why ``outcome`` / ``note`` cannot label an episode, or None."""
    if outcome not in OUTCOMES:
        return f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}"
    if not isinstance(note, str):
        return f"note must be a string, got {note!r}"
    if len(note) > NOTE_MAX or any(ord(ch) < 32 for ch in note):
        return f"note must be at most {NOTE_MAX} printable characters on one line"
    return None


def label_fields(outcome: str, note: str = "") -> dict[str, Any]:
    """The episode-record keys of a label (``outcome_note`` only when there is one)."""
    problem = check_outcome(outcome, note)
    if problem:
        raise ValueError(problem)
    return {OUTCOME_KEY: outcome, **({NOTE_KEY: note} if note else {})}

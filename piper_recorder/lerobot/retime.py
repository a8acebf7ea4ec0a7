"""Rewrite the video PTS of an existing root to the 1/90000 s grid (``piper-repair``), by remuxing.

Recorders before issue 11 wrote PTS in whole milliseconds (time base 1/1000, ``floor(float32(t) *
1000)``), which puts two rows in three at 30 fps up to 1 ms after their frame: beyond LeRobot's default
tolerance (1e-4 s). The encoded frames are fine; only their timestamps are too coarse. This module
copies every packet unchanged (no decoding, no re-encoding: packet bytes and codec extradata stay
bit-identical) into a new mp4 whose PTS follow the writer's rule (``video.pts_ticks``):

* nominal episodes (one frame per row at the row time): a whole-ms PTS ``m`` came from exactly one row,
  the one whose ``floor(float32(timestamp) * 1000) == m`` (rows are 1/fps apart, so the match is
  unique); that frame gets ``pts_ticks(timestamp)`` and both lookup rules then hold for every row. A
  frame dropped by the encoder leaves its row without a frame, before and after.
* capture episodes (frames at their capture times): the capture time was only kept to the millisecond
  below it, so the best statement the file can make is ``m`` ms exactly: new PTS = ``m * 90``. It stays
  at or before the true capture time (never later, which would break "last frame at or before t"),
  changes no frame's time, and applying the float32 floor to ``m / 1000`` instead could only move it
  up to one float32 step earlier (61 us at 10 min) for no gain. The sub-millisecond part is lost for
  good; only a new recording has it.
* the mode comes from the episode's ``timestamp_mode`` in ``meta/episodes.jsonl``; without one, an
  episode whose every frame matches a distinct row is nominal, otherwise capture.

Safety: the root's writer lock is held (a recorder or converter writing to the root makes the repair
refuse); each file is written as ``<name>.tmp`` beside it, fsynced, read back and compared (packet
bytes, count, PTS), renamed over the original and the directory fsynced, so a kill at any instant
leaves every file either old or new (a leftover ``.tmp`` is removed by the next run, or by the
writer's open-time repair). A file already in 1/90000 is skipped, so re-running resumes. A file that
cannot be mapped (unknown time base, reordered frames, a PTS that matches no row) is reported and
left untouched. Metadata does not change: frame counts, durations and rows stay the same.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq

from . import fsutil
from .errors import DatasetError
from .rootfiles import data_file, read_json, read_jsonl, video_file, video_keys
from .video import TICKS_PER_S, TIME_BASE, frame_period_ticks, pts_ticks

MS = Fraction(1, 1000)
OK, REWRITE, REFUSE = "ok", "rewrite", "refuse"


@dataclass
class FilePlan:
    """What the repair does with one video file."""

    path: Path
    episode: int
    camera: str
    action: str                       # ok | rewrite | refuse
    reason: str = ""
    mode: str = ""                    # nominal | capture (how the new PTS were derived)
    old_pts: list[int] = field(default_factory=list)
    new_pts: list[int] = field(default_factory=list)

    @property
    def max_shift_s(self) -> float:
        """Largest |new - old| presentation time change (s)."""
        return max((abs(float(n * TIME_BASE - o * MS)) for o, n in zip(self.old_pts, self.new_pts)), default=0.0)

    def describe(self, root: Path) -> str:
        rel = self.path.relative_to(root)
        if self.action == REWRITE:
            return (f"{rel}: {len(self.new_pts)} frames, time base 1/1000 -> 1/{TICKS_PER_S} ({self.mode}"
                    f"{'' if not self.reason else ', ' + self.reason}; largest shift "
                    f"{self.max_shift_s * 1e3:.3f} ms)")
        return f"{rel}: {'already 1/%d, skipped' % TICKS_PER_S if self.action == OK else 'NOT repaired: ' + self.reason}"


@dataclass
class RepairReport:
    plans: list[FilePlan]
    rewritten: int = 0
    removed_tmp: list[Path] = field(default_factory=list)
    seconds_of_video: float = 0.0     # rows / fps over every planned file

    def count(self, action: str) -> int:
        return sum(p.action == action for p in self.plans)


def _read_packets(path: Path) -> tuple[Fraction, list[int], list[int]]:
    """(time base, pts, dts) of the video packets (the empty end-of-stream packet excluded)."""
    with av.open(str(path)) as c:
        if not c.streams.video:
            raise ValueError("no video stream")
        s = c.streams.video[0]
        pts, dts = [], []
        for p in c.demux(s):
            if p.size == 0:
                continue
            if p.pts is None:
                raise ValueError("packet without PTS")
            pts.append(int(p.pts))
            dts.append(int(p.dts) if p.dts is not None else int(p.pts))
        return Fraction(s.time_base), pts, dts


def _nominal_rows(old_ms: list[int], ts: np.ndarray) -> list[int] | None:
    """For each whole-ms PTS the row it was written for (``floor(float32(t) * 1000)``; a float32 times
    1000 is exact in float64, so this is the old writer's value), or None if some frame has none."""
    row_ms = np.floor(ts.astype(np.float64) * 1000.0).astype(np.int64)
    idx = np.searchsorted(row_ms, np.asarray(old_ms, np.int64))
    if np.any(idx >= len(row_ms)) or not np.array_equal(row_ms[np.minimum(idx, len(row_ms) - 1)], old_ms):
        return None
    return idx.tolist() if len(set(idx.tolist())) == len(idx) else None


def plan_file(path: Path, episode: int, camera: str, ts: np.ndarray, mode: str | None) -> FilePlan:
    """How to retime one video: ``ts`` are the episode's float32 row timestamps; ``mode`` the
    episode's recorded timestamp_mode (None: infer it)."""
    plan = FilePlan(path, episode, camera, REFUSE)
    try:
        tb, pts, dts = _read_packets(path)
    except (OSError, ValueError, av.FFmpegError) as e:
        plan.reason = f"unreadable video: {e}"
        return plan
    if tb == TIME_BASE:
        plan.action = OK
        return plan
    if tb != MS:
        plan.reason = f"time base {tb}: only whole-ms files (1/1000) are rewritten"
        return plan
    if not pts:
        plan.reason = "no frames"
        return plan
    if dts != pts or any(b <= a for a, b in zip(pts, pts[1:])):
        plan.reason = "frames are reordered (B-frames) or PTS not increasing; not a file this recorder wrote"
        return plan
    rows = _nominal_rows(pts, ts) if mode != "capture" else None
    if mode == "nominal" and rows is None:
        plan.reason = "nominal episode, but some frame's PTS matches no row timestamp"
        return plan
    plan.old_pts = pts
    if rows is not None:
        plan.mode = "nominal" if mode else "nominal (inferred: every frame matches a row)"
        plan.new_pts = [pts_ticks(float(ts[r])) for r in rows]
        if len(rows) < len(ts):
            plan.reason = f"{len(ts) - len(rows)} rows without a frame stay so"
    else:
        plan.mode = "capture" if mode else "capture (inferred: frames off the rows)"
        plan.new_pts = [m * (TICKS_PER_S // 1000) for m in pts]
    plan.action = REWRITE
    return plan


def plan_root(root: str | Path) -> tuple[list[FilePlan], float]:
    """A plan per video of every saved episode, and the seconds of video they hold."""
    root = Path(root)
    try:
        info = read_json(root / "meta" / "info.json")
        episodes = read_jsonl(root / "meta" / "episodes.jsonl")
    except (OSError, ValueError) as e:
        raise DatasetError(f"{root}: not a readable LeRobot root ({e})") from e
    keys = video_keys(info)
    fps = float(info["fps"])
    plans, seconds = [], 0.0
    for ep in episodes:
        i = int(ep["episode_index"])
        try:
            ts = pq.read_table(data_file(root, info, i), columns=["timestamp"]).column(0).to_numpy()
        except (OSError, ValueError, KeyError) as e:
            plans += [FilePlan(video_file(root, info, i, k), i, k.split(".")[-1], REFUSE,
                               f"cannot read the episode's timestamps: {e}") for k in keys]
            continue
        ts = np.asarray(ts, np.float32)
        mode = ep.get("timestamp_mode") if ep.get("timestamp_mode") in ("nominal", "capture") else None
        for k in keys:
            plans.append(plan_file(video_file(root, info, i, k), i, k.split(".")[-1], ts, mode))
            seconds += len(ts) / fps
    return plans, seconds


def _packet_digest(path: Path) -> tuple[str, bytes | None, list[int]]:
    """Digest of every packet's bytes in order, the codec extradata and the PTS, read with PyAV."""
    h = hashlib.blake2b(digest_size=16)
    pts = []
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        extradata = s.codec_context.extradata
        for p in c.demux(s):
            if p.size == 0:
                continue
            h.update(p.size.to_bytes(8, "little"))
            h.update(bytes(p))
            pts.append(int(p.pts))
    return h.hexdigest(), extradata, pts


def remux(src: Path, dst: Path, new_pts: list[int], period: int) -> tuple[str, bytes | None]:
    """Copy ``src``'s video packets into ``dst`` (mp4, time base 1/90000) with ``new_pts`` (dts = pts:
    no reordering) and each packet lasting ``period`` ticks; returns the packets' digest and the
    source's codec extradata."""
    h = hashlib.blake2b(digest_size=16)
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4",
                                          options={"video_track_timescale": str(TICKS_PER_S)}) as out:
        s_in = inp.streams.video[0]
        extradata = s_in.codec_context.extradata
        s_out = out.add_stream_from_template(s_in)
        s_out.time_base = TIME_BASE
        k = 0
        for p in inp.demux(s_in):
            if p.size == 0:
                continue
            if k >= len(new_pts):
                raise DatasetError(f"{src}: more packets than planned ({len(new_pts)})")
            h.update(p.size.to_bytes(8, "little"))
            h.update(bytes(p))
            p.stream = s_out
            p.time_base = TIME_BASE
            p.pts = p.dts = new_pts[k]
            p.duration = period
            out.mux(p)
            k += 1
        if k != len(new_pts):
            raise DatasetError(f"{src}: {k} packets, planned {len(new_pts)}")
    return h.hexdigest(), extradata


def rewrite_file(plan: FilePlan, period: int) -> None:
    """Remux to ``<name>.tmp``, fsync, verify, rename over the original, fsync the directory."""
    src = plan.path
    tmp = src.with_name(src.name + fsutil.TMP_SUFFIX)
    try:
        digest, want_extradata = remux(src, tmp, plan.new_pts, period)
        fsutil.fsync_file(tmp)
        got, extradata, pts = _packet_digest(tmp)
        if got != digest or pts != plan.new_pts or extradata != want_extradata:
            raise DatasetError(f"{src}: the remuxed file does not read back as written; original kept")
        fsutil.replace(tmp, src)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsutil.fsync_dir(src.parent)


class _RootLock:
    """The writer's lock on ``<root>/.lock``: no recorder or converter may write while we rewrite."""

    def __init__(self, root: Path):
        self.fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise DatasetError(f"{root} is open in a writer (a recorder or converter); stop it first") from None

    def release(self) -> None:
        os.close(self.fd)


def repair_root(root: str | Path, dry_run: bool = False,
                progress: Callable[[FilePlan], None] | None = None) -> RepairReport:
    """Retime every whole-ms video of ``root`` (see the module docstring); ``dry_run`` only plans.
    ``progress`` is called once per file after it is handled."""
    root = Path(root)
    if not (root / "meta" / "info.json").is_file():
        raise DatasetError(f"{root}: not a LeRobot root (no meta/info.json)")
    lock = None if dry_run else _RootLock(root)
    try:
        report = RepairReport([])
        if not dry_run:
            for tmp in sorted((root / "videos").rglob("*" + fsutil.TMP_SUFFIX)) if (root / "videos").exists() else []:
                tmp.unlink()
                report.removed_tmp.append(tmp)
        report.plans, report.seconds_of_video = plan_root(root)
        period = frame_period_ticks(float(read_json(root / "meta" / "info.json")["fps"]))
        for plan in report.plans:
            if plan.action == REWRITE and not dry_run:
                rewrite_file(plan, period)
                report.rewritten += 1
            if progress is not None:
                progress(plan)
        return report
    finally:
        if lock is not None:
            lock.release()

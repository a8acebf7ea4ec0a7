"""Put an existing root's video PTS and nominal row timestamps on the grid (``piper-repair``), by remuxing.

Roots of older recorders hold whole-millisecond PTS (time base 1/1000, ``floor(float32(t) * 1000)``: two rows
in three at 30 fps up to 1 ms after their frame, beyond LeRobot's 1e-4 s tolerance) and row timestamps k/fps
rounded to the nearest float32 (below the grid for about half the rows, where LeRobot's lookup, the first frame
at or after ``k / fps``, gets the next frame). Every packet is copied unchanged (packet bytes and codec extradata
stay bit-identical) into a new mp4 whose PTS follow the writer's rule (``writer.video_encoder.pts_ticks``), and
nominal episodes' ``timestamp`` column becomes ``grid_timestamp`` (k/fps rounded up to float32):

* nominal episodes (one frame per row at the row time): each PTS came from exactly one row, the one whose
  ``floor(float32(t) / time_base)`` it is, with ``t`` the stored or the grid timestamp (rows are 1/fps apart, so
  the match is unique); that frame gets ``pts_ticks(grid timestamp)``. A frame dropped by the encoder leaves its
  row without a frame, before and after.
* capture episodes (frames at their capture times, kept only to the millisecond below): new PTS = ``m * 90`` for
  ``m`` ms, never later than the true capture time ("last frame at or before t" holds); rows and 1/90000 files
  are left as they are.
* the mode is the episode's ``timestamp_mode`` in ``meta/episodes.jsonl``; without one, an episode whose every
  frame matches a distinct row is nominal, otherwise capture.

Safety: the root's writer lock is held; each file is written as ``<name>.tmp`` beside it, fsynced, read back and
compared (packet bytes, count, PTS; the whole parquet table with its schema metadata), renamed over the original
and the directory fsynced, so a kill leaves every file old or new (the next run removes a leftover ``.tmp``).
Videos go before their parquet: a video already on the grid maps through the grid timestamps, so a re-run after a
kill in between skips the videos and rewrites the parquet; a file already right is skipped. A file that cannot be
mapped (unknown time base, reordered frames, a PTS matching no row) is reported and left untouched. stats.json /
episodes_stats.jsonl timestamp entries stay (they move by at most one float32 step, inside the validators'
tolerances); the writer's cached stats sketch, older than the parquet, is rebuilt when a writer next opens it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from piper_recorder.timebase import TICKS, TIME_BASE, frame_period_ticks, grid_timestamp, pts_ticks

from ..format import fsutil
from ..format.errors import DatasetError
from ..format.layout import EPISODES, INFO, data_file, video_file
from ..format.raw_read import read_json, read_jsonl, video_keys

MS = Fraction(1, 1000)
OK, REWRITE, REFUSE = "ok", "rewrite", "refuse"


@dataclass
class FilePlan:
    """What the repair does with one video file."""

    path: Path
    episode: int
    camera: str
    action: str  # ok | rewrite | refuse
    reason: str = ""
    mode: str = ""  # nominal | capture (how the new PTS were derived)
    old_pts: list[int] = field(default_factory=list)
    new_pts: list[int] = field(default_factory=list)
    old_time_base: Fraction = MS

    @property
    def max_shift_s(self) -> float:
        """Largest |new - old| presentation time change (s)."""
        return max(
            (abs(n / TICKS - float(o * self.old_time_base)) for o, n in zip(self.old_pts, self.new_pts)), default=0.0
        )

    def describe(self, root: Path) -> str:
        """One line saying what the repair does with this video."""
        rel = self.path.relative_to(root)
        if self.action == REWRITE:
            tb = (
                f"time base 1/{self.old_time_base.denominator} -> 1/{TICKS}"
                if self.old_time_base != TIME_BASE
                else "PTS moved onto the k/fps grid"
            )
            return (
                f"{rel}: {len(self.new_pts)} frames, {tb} ({self.mode}"
                f"{'' if not self.reason else ', ' + self.reason}; largest shift "
                f"{self.max_shift_s * 1e3:.3f} ms)"
            )
        if self.action == OK:
            return f"{rel}: already 1/{TICKS}, skipped"
        return f"{rel}: NOT repaired: {self.reason}"


@dataclass
class DataPlan:
    """What the repair does with one nominal episode's parquet, rewritten after the episode's videos.

    ``timestamp`` goes onto the k/fps grid (``grid_timestamp``: rounded up to float32).
    """

    path: Path
    episode: int
    action: str  # ok | rewrite | refuse
    reason: str = ""
    new_ts: np.ndarray | None = None
    rows_moved: int = 0

    def describe(self, root: Path) -> str:
        """One line saying what the repair does with this parquet."""
        rel = self.path.relative_to(root)
        if self.action == REWRITE:
            return f"{rel}: {self.rows_moved} row timestamps moved up onto the k/fps grid (one float32 step)"
        if self.action == OK:
            return f"{rel}: timestamps on the grid, skipped"
        return f"{rel}: NOT repaired: {self.reason}"


@dataclass
class RepairReport:
    """The plans of a repair and what it rewrote."""

    plans: list[FilePlan]
    rewritten: int = 0
    removed_tmp: list[Path] = field(default_factory=list)
    seconds_of_video: float = 0.0  # rows / fps over every planned file
    data: list[DataPlan] = field(default_factory=list)
    data_rewritten: int = 0

    def count(self, action: str) -> int:
        """The number of video plans with ``action``."""
        return sum(p.action == action for p in self.plans)

    def data_count(self, action: str) -> int:
        """The number of parquet plans with ``action``."""
        return sum(p.action == action for p in self.data)


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
        if s.time_base is None:
            raise ValueError("video stream without a time base")
        return Fraction(s.time_base.numerator, s.time_base.denominator), pts, dts


def _floor_rows(pts: list[int], times: np.ndarray, den: int) -> np.ndarray:
    """For each PTS the row whose ``floor(float32(t) * den)`` it is (-1: none).

    Exact: a float32 times ``den`` (1000 or 90000) is exact in float64.
    """
    row = np.floor(times.astype(np.float64) * den).astype(np.int64)
    want = np.asarray(pts, np.int64)
    idx = np.searchsorted(row, want)
    hit = (idx < len(row)) & (row[np.minimum(idx, len(row) - 1)] == want)
    return np.where(hit, idx, -1)


def _nominal_rows(pts: list[int], tb: Fraction, ts: np.ndarray, grid: np.ndarray) -> list[int] | None:
    """For each PTS the row it was written for; None if a frame matches no row or two frames one row.

    The PTS is ``floor(float32(t) / tb)`` of the row's timestamp as the parquet holds it, or of its grid timestamp
    (a file already on the grid while the parquet still holds the off-grid value).
    """
    if not pts:
        return None
    a, b = _floor_rows(pts, ts, tb.denominator), _floor_rows(pts, grid, tb.denominator)
    rows = np.where(a >= 0, a, b)
    if np.any(rows < 0) or np.any(np.diff(rows) <= 0):
        return None
    return rows.tolist()


def plan_file(
    path: Path, episode: int, camera: str, ts: np.ndarray, mode: str | None, grid: np.ndarray | None = None
) -> FilePlan:
    """How to retime one video.

    ``ts`` are the episode's float32 row timestamps as stored, ``grid`` the ones they must become
    (``grid_timestamp``; default: ``ts``); ``mode`` the episode's recorded timestamp_mode (None: infer it).
    """
    grid = ts if grid is None else grid
    plan = FilePlan(path, episode, camera, REFUSE)
    try:
        tb, pts, dts = _read_packets(path)
    except (OSError, ValueError, av.FFmpegError) as e:
        plan.reason = f"unreadable video: {e}"
        return plan
    plan.old_time_base = tb
    if tb not in (MS, TIME_BASE):
        plan.reason = f"time base {tb}: only whole-ms (1/1000) and 1/{TICKS} files are rewritten"
        return plan
    if tb == TIME_BASE and mode == "capture":
        plan.action = OK
        return plan
    if not pts:
        plan.reason = "no frames"
        return plan
    if dts != pts or any(b <= a for a, b in itertools.pairwise(pts)):
        plan.reason = "frames are reordered (B-frames) or PTS not increasing; not a file this recorder wrote"
        return plan
    rows = _nominal_rows(pts, tb, ts, grid) if mode != "capture" else None
    if mode == "nominal" and rows is None:
        plan.reason = "nominal episode, but some frame's PTS matches no row timestamp"
        return plan
    plan.old_pts = pts
    if rows is not None:
        plan.mode = "nominal" if mode else "nominal (inferred: every frame matches a row)"
        plan.new_pts = [pts_ticks(float(grid[r])) for r in rows]
        if len(rows) < len(ts):
            plan.reason = f"{len(ts) - len(rows)} rows without a frame stay so"
    elif tb == TIME_BASE:  # frames off the rows in 1/90000: capture mode, nothing to do
        plan.action = OK
        return plan
    else:
        plan.mode = "capture" if mode else "capture (inferred: frames off the rows)"
        plan.new_pts = [m * (TICKS // 1000) for m in pts]
    plan.action = OK if tb == TIME_BASE and plan.new_pts == pts else REWRITE
    return plan


def plan_data(path: Path, episode: int, ts: np.ndarray, grid: np.ndarray) -> DataPlan:
    """The parquet's ``timestamp`` column onto the grid, if it is not there yet."""
    moved = int(np.sum(ts.view(np.uint32) != grid.view(np.uint32)))
    if not moved:
        return DataPlan(path, episode, OK)
    return DataPlan(path, episode, REWRITE, new_ts=grid, rows_moved=moved)


def _grid(table_frame_index: np.ndarray, fps: float) -> np.ndarray:
    return np.array([grid_timestamp(int(k), fps) for k in table_frame_index], np.float32)


def plan_root(root: str | Path) -> tuple[list[FilePlan], float, list[DataPlan]]:
    """A plan per video of every saved episode, the seconds of video they hold, and a plan per nominal parquet.

    An episode's parquet plan is listed after its videos' plans: videos go first.
    """
    root = Path(root)
    try:
        info = read_json(root / INFO)
        episodes = read_jsonl(root / EPISODES)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{root}: not a readable LeRobot root ({e})") from e
    keys = video_keys(info)
    fps = float(info["fps"])
    plans, seconds, data = [], 0.0, []
    for ep in episodes:
        i = int(ep["episode_index"])
        path = data_file(root, info, i)
        try:
            table = pq.read_table(path, columns=["timestamp", "frame_index"])
            ts = np.asarray(table.column("timestamp").to_numpy(), np.float32)
            grid = _grid(table.column("frame_index").to_numpy(), fps)
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:
            plans += [
                FilePlan(
                    video_file(root, info, i, k),
                    i,
                    k.split(".")[-1],
                    REFUSE,
                    f"cannot read the episode's timestamps: {e}",
                )
                for k in keys
            ]
            data.append(DataPlan(path, i, REFUSE, f"cannot read the episode's timestamps: {e}"))
            continue
        mode = ep.get("timestamp_mode") if ep.get("timestamp_mode") in ("nominal", "capture") else None
        mine = [plan_file(video_file(root, info, i, k), i, k.split(".")[-1], ts, mode, grid) for k in keys]
        plans += mine
        seconds += len(ts) / fps * len(keys)
        nominal = mode == "nominal" or (mode is None and bool(mine) and all(p.mode.startswith("nominal") for p in mine))
        if nominal:
            data.append(plan_data(path, i, ts, grid))
    return plans, seconds, data


def rewrite_data(plan: DataPlan) -> None:
    """Replace the parquet's ``timestamp`` column by ``plan.new_ts``, all else unchanged.

    Every other column, the schema and its metadata stay; ``<name>.tmp`` is written beside it, fsynced, read back and
    compared, renamed over the original, and the directory fsynced.
    """
    src = plan.path
    pf = pq.ParquetFile(src)
    table = pf.read()
    md = pf.metadata
    compression = md.row_group(0).column(0).compression if md.num_row_groups else "snappy"
    row_group = max((md.row_group(r).num_rows for r in range(md.num_row_groups)), default=None)
    i = table.schema.get_field_index("timestamp")
    field_ = table.schema.field(i)
    new = table.set_column(i, field_, pa.array(plan.new_ts, type=field_.type))
    tmp = src.with_name(src.name + fsutil.TMP_SUFFIX)
    try:
        pq.write_table(
            new,
            tmp,
            compression=compression.lower() if compression != "UNCOMPRESSED" else "none",
            row_group_size=row_group,
        )
        fsutil.fsync_file(tmp)
        back = pq.read_table(tmp)
        if not back.equals(new, check_metadata=True):
            raise DatasetError(f"{src}: the rewritten parquet does not read back as written; original kept")
        fsutil.replace(tmp, src)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsutil.fsync_dir(src.parent)


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
            if p.pts is None:
                raise ValueError("packet without PTS")
            pts.append(int(p.pts))
    return h.hexdigest(), extradata, pts


def remux(src: Path, dst: Path, new_pts: list[int], period: int) -> tuple[str, bytes | None]:
    """Copy ``src``'s video packets into ``dst`` (mp4, time base 1/90000) with ``new_pts``.

    dts = pts (no reordering) and each packet lasts ``period`` ticks; returns the packets' digest and the source's
    codec extradata.
    """
    h = hashlib.blake2b(digest_size=16)
    with (
        av.open(str(src)) as inp,
        av.open(str(dst), "w", format="mp4", options={"video_track_timescale": str(TICKS)}) as out,
    ):
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


def repair_root(
    root: str | Path, dry_run: bool = False, progress: Callable[[FilePlan | DataPlan], None] | None = None
) -> RepairReport:
    """Retime every video of ``root`` and move nominal episodes' row timestamps onto the grid.

    The rules are the module's; ``dry_run`` only plans. ``progress`` is called once per file after it is handled.
    """
    root = Path(root)
    if not (root / INFO).is_file():
        raise DatasetError(f"{root}: not a LeRobot root (no {INFO})")
    lock = (
        None
        if dry_run
        else fsutil.lock_root(root, f"{root} is open in a writer (a recorder or converter); stop it first")
    )
    try:
        report = RepairReport([])
        if not dry_run:
            for sub in ("videos", "data"):
                tmps = sorted((root / sub).rglob("*" + fsutil.TMP_SUFFIX)) if (root / sub).exists() else []
                for tmp in tmps:
                    tmp.unlink()
                    report.removed_tmp.append(tmp)
        report.plans, report.seconds_of_video, report.data = plan_root(root)
        period = frame_period_ticks(float(read_json(root / INFO)["fps"]))
        data = {d.episode: d for d in report.data}
        by_episode: dict[int, list[FilePlan]] = {}
        for plan in report.plans:
            by_episode.setdefault(plan.episode, []).append(plan)
        for ep in sorted(set(by_episode) | set(data)):
            for plan in by_episode.get(ep, []):  # videos first: their PTS map to rows through
                if plan.action == REWRITE and not dry_run:  # the old or the grid timestamps alike
                    rewrite_file(plan, period)
                    report.rewritten += 1
                if progress is not None:
                    progress(plan)
            d = data.get(ep)
            if d is not None:  # then the parquet: a kill in between
                if d.action == REWRITE and not dry_run:  # leaves videos on the grid, found OK
                    rewrite_data(d)  # by the re-run, which ends the job
                    report.data_rewritten += 1
                if progress is not None:
                    progress(d)
        return report
    finally:
        if lock is not None:
            os.close(lock)  # releases the flock

"""Independent checks of a LeRobot v2.0 / v2.1 root against the spec and what common loaders need.

``validate_root(root, full=False)`` returns one line per problem, prefixed with the file (relative to the root);
``full`` decodes every frame instead of counting packets. The checks read the files with pyarrow, PyAV and json
only: never the writer, nor the typed read model the other readers share, so they stay an independent check.

Timestamps whose consecutive differences leave 1/fps by more than 1e-4 s (LeRobot's default tolerance) are an
error: LeRobot's loader refuses them.

Video timing (every row, from packet PTS only): each row's frame is the last one with ``pts * time_base <=
float32(timestamp)`` (torchcodec/torchvision) and must lie less than 1e-4 s before the row, compared exactly;
whole-ms PTS (time base 1/1000) fail this for two rows in three at 30 fps (``piper-repair`` fixes them).
LeRobot's own lookup (0.3/0.4 default: torchcodec, approximate seek) asks for frame ``round(t * fps)`` and gets
the first frame whose PTS is at or after ``index / fps``; it must give the same frame, within 1e-4 s. A row time
below the grid (k/fps rounded to the nearest float32) with a PTS floored from it fails this; ``piper-repair``
moves such rows onto the grid. ``timestamp_mode: capture`` episodes keep frames at their capture times, off the
rows by design: there only row 0 must have a frame at or before it and the time base must resolve 1e-4 s.

Frame pairing (the recorder's per-episode counters in meta/episodes.jsonl): a row's frame must have been captured
at or before the row, within ``CAUSAL_TOLERANCE_MS`` (the clock mapper's noise; DESIGN.md Timing); a frame from
the future leaks the commanded motion into the observation. Roots recording only the undirected
``frame_offset_max_ms`` are reported, not checked.
"""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from piper_recorder.lerobot.format.layout import (
    DELTA_STATS,
    EPISODES,
    EPISODES_STATS,
    INFO,
    MODALITY,
    RELATIVE_STATS,
    ROTATION_TYPES,
    STATS,
    TASKS,
    data_file,
    video_file,
)
from piper_recorder.lerobot.format.raw_read import column_array

STAT_KEYS = {"mean", "std", "min", "max", "q01", "q99"}
EPISODE_STAT_KEYS = {"min", "max", "mean", "std", "count"}  # LeRobot v2.1 meta/episodes_stats.jsonl
CODEBASE_VERSIONS = ("v2.0", "v2.1")
TIMESTAMP_TOLERANCE_S = 1e-4
CAUSAL_TOLERANCE_MS = 1.0  # a row's frame may be captured at most this long after the row (DESIGN.md, Timing)
INT_BOOKKEEPING = ("frame_index", "episode_index", "index", "task_index")
BOOKKEEPING_DTYPES = {"timestamp": "float32", **dict.fromkeys(INT_BOOKKEEPING, "int64")}
INFO_KEYS = (
    "codebase_version",
    "robot_type",
    "total_episodes",
    "total_frames",
    "total_tasks",
    "total_videos",
    "total_chunks",
    "chunks_size",
    "fps",
    "splits",
    "data_path",
    "video_path",
    "features",
)
VIDEO_INFO_KEYS = (
    "video.fps",
    "video.height",
    "video.width",
    "video.channels",
    "video.codec",
    "video.pix_fmt",
    "video.is_depth_map",
    "has_audio",
)
GR00T_ROTATION_TYPES = {*ROTATION_TYPES, "axis_angle", "rotation_6d", "matrix"}  # plus euler_angles_*
ARROW_SCALARS = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "bool": pa.bool_(),
}


@dataclass
class WorstRow:
    """The row whose frame lies furthest before it (``gap_s`` inf: no frame at or before the row)."""

    episode: int
    camera: str
    row: int
    timestamp: float
    pts: int | None
    time_base: Fraction
    gap_s: float

    def describe_row(self) -> str:
        """The row, its frame and the gap between them, in words."""
        frame = (
            "no frame at or before it"
            if self.pts is None
            else f"frame pts {self.pts} x {self.time_base} = {float(self.pts * self.time_base):.6f} s"
        )
        gap = "" if self.pts is None else f", gap {self.gap_s * 1e6:.3f} us"
        return f"row {self.row}: timestamp {self.timestamp:.6f} s, {frame}{gap}"

    def describe(self) -> str:
        """The row with its episode and camera, in words."""
        return f"episode {self.episode}, {self.camera}, {self.describe_row()}"


@dataclass
class TimingSummary:
    """Video timing over a root: rows checked against both lookup rules and the worst of them."""

    rows: int = 0
    bad_rows: int = 0
    capture_videos: int = 0
    worst: WorstRow | None = None
    lerobot_bad_rows: int = 0  # rows whose LeRobot lookup gets another frame or one >= 1e-4 s away
    lerobot_worst: WorstRow | None = None  # the worst of those (gap_s: |frame time - t|; inf: no frame)

    def describe(self) -> str:
        """The video timing figures as one line."""
        if self.worst is None:
            text = "no nominal-mode video rows"
        else:
            text = (
                f"{self.rows - self.bad_rows} of {self.rows} video rows find their frame at or before "
                f"them within {TIMESTAMP_TOLERANCE_S} s; worst: {self.worst.describe()}; "
                f"{self.rows - self.lerobot_bad_rows} of {self.rows} get the same frame from LeRobot's "
                f"lookup (frame round(t * fps))"
                + (f"; worst: {self.lerobot_worst.describe()}" if self.lerobot_worst else "")
            )
        if self.capture_videos:
            text += f"; {self.capture_videos} capture-mode video(s): frames at capture times"
        return f"video timing: {text}"


@dataclass
class PairingSummary:
    """Worst capture offsets of row frames over a root, from the episodes' counters: (ms, episode, camera)."""

    ahead: tuple[float, int, str] | None = None  # largest capture - row time (> 0: after the row)
    behind: tuple[float, int, str] | None = None  # largest row time - capture (the oldest frame)
    undirected: tuple[float, int, str] | None = None  # older roots: largest |capture - row time| only

    @staticmethod
    def _worse(old: tuple[float, int, str] | None, new: tuple[float, int, str]) -> tuple[float, int, str]:
        return new if old is None or new[0] > old[0] else old

    def describe(self) -> str:
        """The worst capture offsets as one line."""

        def one(w: tuple[float, int, str]) -> str:
            return f"{w[0]:.3f} ms (episode {w[1]}, {w[2]})"

        parts = []
        if self.ahead is not None or self.behind is not None:
            parts.append(
                f"worst frame captured after its row: {one(self.ahead) if self.ahead else 'none'}; "
                f"worst before its row: {one(self.behind) if self.behind else 'none'}"
            )
        if self.undirected is not None:
            parts.append(f"older episodes record no direction: largest offset {one(self.undirected)}")
        return "frame pairing: " + ("; ".join(parts) if parts else "no per-row frame offsets recorded")


@dataclass
class _Report:
    root: Path
    problems: list[str] = field(default_factory=list)
    timing: TimingSummary = field(default_factory=TimingSummary)
    pairing: PairingSummary = field(default_factory=PairingSummary)

    def add(self, where: Path | str, msg: str) -> None:
        where = Path(where)
        try:
            where = where.relative_to(self.root)
        except ValueError:
            pass
        self.problems.append(f"{where}: {msg}")


@dataclass
class _ColumnAccumulator:
    """Running min/max/sum per element, to check stats.json against the data without holding it."""

    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    total: np.ndarray | None = None
    count: int = 0

    def add(self, x: np.ndarray) -> None:
        self._fold(x.min(0), x.max(0), x.sum(0), len(x))

    def merge(self, other: _ColumnAccumulator) -> None:
        if other.count:
            self._fold(*other.sums(), other.count)

    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(min, max, sum) of what was folded in (count > 0)."""
        assert self.lo is not None and self.hi is not None and self.total is not None and self.count
        return self.lo, self.hi, self.total

    def summary(self) -> tuple[tuple[str, np.ndarray], ...]:
        """("min", ...), ("max", ...), ("mean", ...) of what was folded in (count > 0)."""
        lo, hi, total = self.sums()
        return ("min", lo), ("max", hi), ("mean", total / self.count)

    def _fold(self, lo: np.ndarray, hi: np.ndarray, s: np.ndarray, n: int) -> None:
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)
        self.total = s if self.total is None else self.total + s
        self.count += n


def _width(feat: dict) -> int | None:
    shape = feat.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    return int(np.prod(shape)) if shape else 1


def _read_json(rep: _Report, path: Path) -> Any:
    if not path.exists():
        rep.add(path, "missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        rep.add(path, f"not valid JSON: {e}")
        return None


def _read_jsonl(rep: _Report, path: Path) -> list[dict] | None:
    if not path.exists():
        rep.add(path, "missing")
        return None
    text = path.read_text(encoding="utf-8")
    out = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    for n, line in enumerate(lines, 1):
        if not line.strip():
            rep.add(path, f"line {n}: blank line")
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            rep.add(path, f"line {n}: not valid JSON: {e}")
            continue
        if not isinstance(rec, dict):
            rep.add(path, f"line {n}: not a JSON object")
            continue
        out.append(rec)
    return out


def _check_info(rep: _Report, path: Path, info: dict) -> bool:
    """Header and feature declarations; False when too broken to check the data against."""
    for key in INFO_KEYS:
        if key not in info:
            rep.add(path, f"missing key '{key}'")
    if info.get("codebase_version") not in CODEBASE_VERSIONS:
        rep.add(path, f"codebase_version is {info.get('codebase_version')!r}, expected 'v2.0' or 'v2.1'")
    fps = info.get("fps")
    if not isinstance(fps, (int, float)) or isinstance(fps, bool) or fps <= 0:
        rep.add(path, f"fps must be a positive number, got {fps!r}")
        return False
    cs = info.get("chunks_size")
    if not isinstance(cs, int) or cs <= 0:
        rep.add(path, f"chunks_size must be a positive integer, got {cs!r}")
        return False
    feats = info.get("features")
    if not isinstance(feats, dict):
        rep.add(path, "features must be an object")
        return False
    try:
        info["data_path"].format(episode_chunk=0, episode_index=0)
    except (KeyError, IndexError, AttributeError, ValueError) as e:
        rep.add(path, f"data_path template unusable: {e}")
        return False
    has_video = any(isinstance(f, dict) and f.get("dtype") == "video" for f in feats.values())
    if has_video:
        try:
            info["video_path"].format(episode_chunk=0, episode_index=0, video_key="k")
        except (KeyError, IndexError, AttributeError, ValueError) as e:
            rep.add(path, f"video_path template unusable: {e}")
            return False
    ok = True
    for key, feat in feats.items():
        if not isinstance(feat, dict) or "dtype" not in feat or _width(feat) is None:
            rep.add(path, f"feature '{key}': needs dtype and a shape of positive integers")
            ok = False
            continue
        if feat["dtype"] == "video":
            _check_video_feature(rep, path, key, feat)
            continue
        if feat["dtype"] not in ARROW_SCALARS:
            rep.add(path, f"feature '{key}': unsupported dtype {feat['dtype']!r}")
            ok = False
        names = feat.get("names")
        if isinstance(names, list) and len(names) != _width(feat):
            rep.add(path, f"feature '{key}': {len(names)} names for shape {feat['shape']}")
    for key, dtype in BOOKKEEPING_DTYPES.items():
        feat = feats.get(key)
        if feat is None:
            rep.add(path, f"feature '{key}' missing")
        elif feat.get("dtype") != dtype or feat.get("shape") != [1]:
            rep.add(
                path,
                f"feature '{key}' must be {{dtype: {dtype}, shape: [1]}}, "
                f"got {{dtype: {feat.get('dtype')}, shape: {feat.get('shape')}}}",
            )
    return ok


def _check_video_feature(rep: _Report, path: Path, key: str, feat: dict) -> None:
    """LeRobot's own convention only: names height/width/channels + an `info` block."""
    if "video_info" in feat:
        rep.add(path, f"feature '{key}': has 'video_info' (older convention); use the 'info' block only")
    names = feat.get("names")
    if names != ["height", "width", "channels"]:
        rep.add(path, f"feature '{key}': names must be ['height', 'width', 'channels'], got {names!r}")
    shape = feat.get("shape")
    if not (isinstance(shape, list) and len(shape) == 3 and shape[2] == 3):
        rep.add(path, f"feature '{key}': shape must be [height, width, 3], got {shape!r}")
        return
    info = feat.get("info")
    if not isinstance(info, dict):
        rep.add(path, f"feature '{key}': missing the 'info' block")
        return
    for k in VIDEO_INFO_KEYS:
        if k not in info:
            rep.add(path, f"feature '{key}': info lacks '{k}'")
    if info.get("video.height") not in (None, shape[0]) or info.get("video.width") not in (None, shape[1]):
        rep.add(
            path,
            f"feature '{key}': info size {info.get('video.width')}x{info.get('video.height')} "
            f"disagrees with shape {shape}",
        )


def _expected_arrow_type(feat: dict) -> pa.DataType:
    scalar = ARROW_SCALARS[feat["dtype"]]
    return scalar if feat["shape"] == [1] else pa.list_(scalar, _width(feat))


@dataclass
class _EpisodeContext:
    ep: dict
    episode_index: int
    start_index: int
    task_index: int | None


def _check_parquet(
    rep: _Report, root: Path, info: dict, ctx: _EpisodeContext, acc: dict[str, _ColumnAccumulator], n_tasks: int
) -> np.ndarray | None:
    """One episode's table; returns its timestamps (float64) when readable."""
    path = data_file(root, info, ctx.episode_index)
    if not path.exists():
        rep.add(path, f"missing (named by {EPISODES})")
        return None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        rep.add(path, f"unreadable parquet: {e}")
        return None
    feats = {k: f for k, f in info["features"].items() if f.get("dtype") != "video"}
    length = ctx.ep.get("length")
    if table.num_rows != length:
        rep.add(path, f"{table.num_rows} rows, {EPISODES} says length {length}")
    for name in table.column_names:
        if name not in feats:
            rep.add(path, f"column '{name}' is not declared in {INFO} features")
    n = table.num_rows
    cols: dict[str, np.ndarray] = {}
    for key, feat in feats.items():
        if key not in table.column_names:
            rep.add(path, f"column '{key}' missing")
            continue
        width = _width(feat)
        if feat.get("dtype") not in ARROW_SCALARS or width is None:
            continue
        column = table.column(key)
        want = _expected_arrow_type(feat)
        if column.type != want:
            rep.add(
                path,
                f"column '{key}' has type {column.type}, {INFO} declares {feat['dtype']} "
                f"shape {feat['shape']} (expected {want})",
            )
            continue
        flat = column.combine_chunks()
        if flat.null_count or (pa.types.is_fixed_size_list(flat.type) and flat.flatten().null_count):
            rep.add(path, f"column '{key}' has null values")
            continue
        values = column_array(column, width)
        if feat["dtype"].startswith("float") and not np.all(np.isfinite(values)):
            rep.add(path, f"column '{key}' has non-finite values")
            continue
        cols[key] = values
        if n:
            acc.setdefault(key, _ColumnAccumulator()).add(values)
    _check_bookkeeping(rep, path, ctx, cols, n, n_tasks)
    ts = cols.get("timestamp")
    if ts is None or n == 0:
        return None
    ts = ts[:, 0]
    _check_timestamps(rep, path, ts, float(info["fps"]))
    return ts


def _first_bad(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _check_bookkeeping(rep: _Report, path: Path, ctx: _EpisodeContext, cols: dict, n: int, n_tasks: int) -> None:
    if "index" in cols:
        idx = cols["index"][:, 0].astype(np.int64)
        want = np.arange(ctx.start_index, ctx.start_index + n)
        if not np.array_equal(idx, want):
            r = _first_bad(idx != want)
            rep.add(
                path,
                f"'index' not continuous: row {r} has {idx[r]}, expected {want[r]} "
                f"(global rows run 0.. across episodes in order)",
            )
    if "frame_index" in cols:
        fi = cols["frame_index"][:, 0].astype(np.int64)
        want = np.arange(n)
        if not np.array_equal(fi, want):
            r = _first_bad(fi != want)
            rep.add(path, f"'frame_index' must be 0..{n - 1}: row {r} has {fi[r]}")
    if "episode_index" in cols:
        ei = cols["episode_index"][:, 0].astype(np.int64)
        if n and not np.all(ei == ctx.episode_index):
            r = _first_bad(ei != ctx.episode_index)
            rep.add(path, f"'episode_index' row {r} is {ei[r]}, expected {ctx.episode_index}")
    if "task_index" in cols:
        ti = cols["task_index"][:, 0].astype(np.int64)
        bad = (ti < 0) | (ti >= n_tasks)
        if n and np.any(bad):
            rep.add(
                path, f"'task_index' row {_first_bad(bad)} is {ti[_first_bad(bad)]}, not in {TASKS} (0..{n_tasks - 1})"
            )
        elif n and ctx.task_index is not None and not np.all(ti == ctx.task_index):
            r = _first_bad(ti != ctx.task_index)
            rep.add(path, f"'task_index' row {r} is {ti[r]}, {EPISODES} task is index {ctx.task_index}")


def _check_timestamps(rep: _Report, path: Path, ts: np.ndarray, fps: float) -> None:
    if ts[0] < 0:
        rep.add(path, f"first timestamp {ts[0]} is negative")
    d = np.diff(ts)
    if np.any(d <= 0):
        r = _first_bad(d <= 0) + 1
        rep.add(path, f"timestamps not strictly increasing at row {r} ({ts[r - 1]:.6f} -> {ts[r]:.6f})")
        return
    off = np.abs(d - 1.0 / fps) > TIMESTAMP_TOLERANCE_S
    if np.any(off):
        r = _first_bad(off) + 1
        rep.add(
            path,
            f"timestamp step {d[r - 1]:.6f} s at row {r} is not 1/fps = {1 / fps:.6f} s within "
            f"{TIMESTAMP_TOLERANCE_S} s ({int(off.sum())} such steps); LeRobot's loader rejects this",
        )


@dataclass
class _Video:
    pts: list[int]  # in stream order, in units of time_base
    time_base: Fraction
    size: tuple[int, int]  # (width, height)

    @property
    def times(self) -> list[float]:
        return [float(p * self.time_base) for p in self.pts]


def _video_frames(path: Path, full: bool) -> _Video:
    """Every frame's PTS and the frame size, by decoding (``full``) or from the packets alone."""
    with av.open(str(path)) as container:
        if not container.streams.video:
            raise ValueError("no video stream")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise ValueError("video stream without codec parameters")
        size = (stream.codec_context.width, stream.codec_context.height)
        tb = stream.time_base
        if tb is None or tb <= 0:
            raise ValueError(f"video stream time base {tb!r}")
        pts = []
        if full:
            for frame in container.decode(stream):
                if frame.pts is None:
                    raise ValueError("decoded frame without PTS")
                pts.append(int(frame.pts))
        else:
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                if packet.pts is None:
                    raise ValueError("packet without PTS")
                pts.append(int(packet.pts))
    return _Video(pts, Fraction(tb.numerator, tb.denominator), size)


def _row_gaps(pts: np.ndarray, tb: Fraction, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row time (float32): the last frame with ``pts * tb <= t`` (-1: none) and ``t - pts * tb`` in s (inf: none).

    Exact: a float32 times the time base denominator (< 2**29) and a PTS times its numerator (< 2**53) are exact in
    float64, so the comparison is too.
    """
    if tb.denominator < 2**29 and (len(pts) == 0 or int(np.abs(pts).max()) * tb.numerator < 2**53):
        frame = pts.astype(np.float64) * tb.numerator
        row = ts.astype(np.float64) * tb.denominator
        idx = np.searchsorted(frame, row, side="right") - 1
        gap = np.where(idx >= 0, (row - frame[np.maximum(idx, 0)]) / tb.denominator, np.inf)
        return idx, gap
    frames = [p * tb for p in pts.tolist()]  # unusual time bases: plain exact arithmetic
    idx = np.empty(len(ts), np.int64)
    gap = np.empty(len(ts), np.float64)
    for r, t in enumerate(ts.tolist()):
        exact = Fraction(t)
        i = bisect.bisect_right(frames, exact) - 1
        idx[r], gap[r] = i, (float(exact - frames[i]) if i >= 0 else np.inf)
    return idx, gap


def _lerobot_frames(pts: np.ndarray, tb: Fraction, ts: np.ndarray, fps: float) -> np.ndarray:
    """LeRobot 0.3/0.4's default lookup (torchcodec, approximate seek) for each row time; ``len(pts)`` for none.

    Frame index ``i = round(t * fps)`` (half to even, as Python's round), then the first frame whose ``pts * tb`` is
    >= ``i / fps``, compared exactly in integers.
    """
    f = Fraction(fps).limit_denominator(1_000_000)
    want = np.rint(ts.astype(np.float64) * float(fps)).astype(np.int64)
    frame = [p * tb.numerator * f.numerator for p in pts.tolist()]  # pts*tb >= i/f in exact integers
    grid = [i * tb.denominator * f.denominator for i in want.tolist()]
    return np.array([bisect.bisect_left(frame, g) for g in grid], np.int64)


def _check_video_timing(
    rep: _Report, path: Path, video: _Video, ts: np.ndarray, ctx: _EpisodeContext, camera: str, fps: float
) -> None:
    """Both lookup rules for every row (see the module docstring)."""
    pts = np.sort(np.asarray(video.pts, np.int64))
    tb = video.time_base
    hint = (
        f"; time base {tb} is coarser than {TIMESTAMP_TOLERANCE_S} s (whole-ms PTS from an older "
        f"recorder): `piper-repair {rep.root}` rewrites them"
        if tb > Fraction(1, 10_000)
        else ""
    )
    idx, gap = _row_gaps(pts, tb, ts)
    if ctx.ep.get("timestamp_mode") == "capture":
        rep.timing.capture_videos += 1
        if idx[0] < 0:
            rep.add(path, f"row 0 (timestamp {ts[0]:.6f} s) has no frame at or before it (first pts {pts[0]} x {tb})")
        if hint:
            rep.add(
                path,
                f"capture mode: frames cannot be placed within {TIMESTAMP_TOLERANCE_S} s of their capture time{hint}",
            )
        return
    bad = gap >= TIMESTAMP_TOLERANCE_S
    r = int(np.argmax(gap))
    worst = WorstRow(
        ctx.episode_index, camera, r, float(ts[r]), int(pts[idx[r]]) if idx[r] >= 0 else None, tb, float(gap[r])
    )
    t = rep.timing
    t.rows += len(ts)
    t.bad_rows += int(bad.sum())
    if t.worst is None or worst.gap_s > t.worst.gap_s:
        t.worst = worst
    if bad.any():
        rep.add(
            path,
            f"{int(bad.sum())} of {len(ts)} rows have no frame at or before their timestamp within "
            f"{TIMESTAMP_TOLERANCE_S} s (LeRobot's tolerance with torchcodec's 'last frame at or before "
            f"t'); worst {worst.describe_row()}{hint}",
        )
    _check_lerobot_lookup(rep, path, pts, tb, ts, idx, ctx, camera, fps)


def _check_lerobot_lookup(
    rep: _Report,
    path: Path,
    pts: np.ndarray,
    tb: Fraction,
    ts: np.ndarray,
    idx: np.ndarray,
    ctx: _EpisodeContext,
    camera: str,
    fps: float,
) -> None:
    """Rule (b): LeRobot's frame ``round(t * fps)`` must be rule (a)'s frame, within 1e-4 s of t."""
    jb = _lerobot_frames(pts, tb, ts, fps)
    has = jb < len(pts)
    frame_s = pts.astype(np.float64) * tb.numerator / tb.denominator
    gap = np.where(
        has,
        np.abs(frame_s[np.minimum(jb, max(len(pts) - 1, 0))] - ts.astype(np.float64)) if len(pts) else np.inf,
        np.inf,
    )
    bad = ~has | (jb != idx) | (gap >= TIMESTAMP_TOLERANCE_S)
    t = rep.timing
    t.lerobot_bad_rows += int(bad.sum())
    if not bad.any():
        return
    r = int(np.flatnonzero(bad)[np.argmax(gap[bad])])
    worst = WorstRow(ctx.episode_index, camera, r, float(ts[r]), int(pts[jb[r]]) if has[r] else None, tb, float(gap[r]))
    if t.lerobot_worst is None or worst.gap_s > t.lerobot_worst.gap_s:
        t.lerobot_worst = worst
    below = int(
        sum(
            Fraction(float(x)) < Fraction(k) / Fraction(fps).limit_denominator(1_000_000)
            for k, x in enumerate(ts.tolist())
        )
    )
    hint = (
        f"; {below} row timestamps lie below the k/fps grid (rounded to the nearest float32 by an older "
        f"recorder; they must be rounded up): `piper-repair {rep.root}` rewrites them"
        if below
        else ""
    )
    got = f"frame {jb[r]}" if has[r] else "no frame"
    rep.add(
        path,
        f"{int(bad.sum())} of {len(ts)} rows get another frame from LeRobot's lookup (frame "
        f"round(t * fps): the first at or after its grid time) than the last frame at or before t, "
        f"or one {TIMESTAMP_TOLERANCE_S} s or more away; worst row {r}: timestamp {float(ts[r]):.9f} s, "
        f"LeRobot gets {got}"
        + (f" (pts {int(pts[jb[r]])} x {tb}, {gap[r] * 1e6:.3f} us away)" if has[r] else "")
        + f", the last frame at or before t is frame {int(idx[r])}{hint}",
    )


def _check_videos(
    rep: _Report, root: Path, info: dict, ctx: _EpisodeContext, ts: np.ndarray | None, full: bool
) -> None:
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    if not keys:
        return
    ep_line = f"{EPISODES} episode {ctx.episode_index}"
    declared = ctx.ep.get("video_frame_lengths")
    if not isinstance(declared, dict):
        rep.add(root / EPISODES, f"episode {ctx.episode_index}: missing 'video_frame_lengths'")
        declared = {}
    counts = []
    fps = float(info["fps"])
    for key in keys:
        path = video_file(root, info, ctx.episode_index, key)
        if not path.exists():
            rep.add(path, "missing (one mp4 per video feature and episode)")
            continue
        try:
            video = _video_frames(path, full)
        except (OSError, ValueError, av.FFmpegError) as e:
            rep.add(path, f"unreadable video: {e}")
            continue
        count, times, size = len(video.pts), video.times, video.size
        counts.append(count)
        shape = info["features"][key].get("shape", [None, None])
        if list(size) != [shape[1], shape[0]]:
            rep.add(path, f"frame size {size[0]}x{size[1]}, {INFO} shape {shape}")
        cam = key.split(".")[-1]
        want = declared.get(cam, declared.get(key))
        if want is None:
            rep.add(root / EPISODES, f"episode {ctx.episode_index}: no video_frame_lengths entry for '{cam}'")
        elif want != count:
            rep.add(path, f"{count} frames, {ep_line} says {want}")
        if not times:
            rep.add(path, "no frames")
            continue
        sorted_t = sorted(times)
        if any(b <= a for a, b in itertools.pairwise(sorted_t)):
            rep.add(path, "duplicate presentation timestamps")
        if sorted_t[0] < 0:
            rep.add(path, f"first PTS {sorted_t[0]:.4f} s is before the episode start")
        if ts is not None:
            limit = float(ts[-1]) + 1.0 / fps
            if sorted_t[-1] > limit + 1e-6:
                rep.add(
                    path, f"last PTS {sorted_t[-1]:.4f} s is past the episode end (last row {ts[-1]:.4f} s + 1/fps)"
                )
            _check_video_timing(rep, path, video, ts, ctx, cam, fps)
    if (
        counts
        and len(counts) == len(keys)
        and "video_frame_length" in ctx.ep
        and ctx.ep["video_frame_length"] != min(counts)
    ):
        rep.add(
            root / EPISODES,
            f"episode {ctx.episode_index}: video_frame_length "
            f"{ctx.ep['video_frame_length']}, minimum over cameras is {min(counts)}",
        )


def _check_stats_file(rep: _Report, path: Path, stats: Any, feats: dict, required: list[str]) -> None:
    if not isinstance(stats, dict):
        rep.add(path, "must be a JSON object")
        return
    for key in required:
        if key not in stats:
            video = feats.get(key, {}).get("dtype") == "video"
            rep.add(
                path,
                f"no entry for column '{key}'"
                + (
                    " (lerobot-train needs per-camera image stats; opening the root with the writer, e.g. "
                    "resuming a recording, adds them)"
                    if video
                    else ""
                ),
            )
    for key, entry in stats.items():
        feat = feats.get(key)
        if feat is None:
            rep.add(path, f"entry '{key}' is not a feature in {INFO}")
            continue
        if not isinstance(entry, dict):
            rep.add(path, f"entry '{key}' must be an object")
            continue
        if set(entry) != STAT_KEYS:
            extra, missing = sorted(set(entry) - STAT_KEYS), sorted(STAT_KEYS - set(entry))
            rep.add(
                path,
                f"entry '{key}' must have exactly mean,std,min,max,q01,q99"
                + (f"; extra {extra}" if extra else "")
                + (f"; missing {missing}" if missing else ""),
            )
        if feat.get("dtype") == "video":
            _check_image_entry(rep, path, f"entry '{key}'", entry, STAT_KEYS)
            continue
        width = _width(feat)
        arrays = {}
        for s in STAT_KEYS & set(entry):
            v = entry[s]
            if (
                not isinstance(v, list)
                or len(v) != width
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            ):
                rep.add(path, f"entry '{key}'.{s} must be a flat list of {width} numbers")
                continue
            arrays[s] = np.asarray(v, dtype=np.float64)
            if not np.all(np.isfinite(arrays[s])):
                rep.add(path, f"entry '{key}'.{s} has non-finite values")
        if len(arrays) == len(STAT_KEYS) and all(np.all(np.isfinite(a)) for a in arrays.values()):
            tol = 1e-6 * (1 + np.abs(arrays["max"]) + np.abs(arrays["min"]))
            if (
                np.any(arrays["min"] > arrays["max"] + tol)
                or np.any(arrays["q01"] > arrays["q99"] + tol)
                or np.any(arrays["std"] < 0)
                or np.any(arrays["min"] > arrays["q01"] + tol)
                or np.any(arrays["q99"] > arrays["max"] + tol)
            ):
                rep.add(path, f"entry '{key}': values out of order (need std >= 0, min <= q01 <= q99 <= max)")


def _check_image_entry(rep: _Report, path: Path, where: str, entry: dict, keys: set[str]) -> None:
    """Per-channel image stats as LeRobot writes them: shape (3, 1, 1), values in [0, 1]."""
    arrays = {}
    for s in keys & set(entry):
        if s == "count":
            continue
        try:
            a = np.asarray(entry[s], dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or a.shape != (3, 1, 1) or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
            rep.add(path, f"{where}.{s} must be per-channel [[[v]], [[v]], [[v]]] with values in [0, 1]")
            return
        arrays[s] = a
    if all(k in arrays for k in ("min", "max", "mean")) and (
        np.any(arrays["min"] > arrays["mean"] + 1e-9) or np.any(arrays["mean"] > arrays["max"] + 1e-9)
    ):
        rep.add(path, f"{where}: values out of order (need min <= mean <= max)")


def _check_episodes_stats(
    rep: _Report,
    path: Path,
    lines: list[dict],
    feats: dict,
    episodes: list[dict],
    per_episode: list[dict[str, _ColumnAccumulator]],
) -> None:
    """Check LeRobot v2.1 meta/episodes_stats.jsonl: one line per episode, in order.

    Every feature has min/max/mean/std/count (vectors (D,), images (3, 1, 1)); vector min/max/mean/count must match
    the data.
    """
    if len(lines) != len(episodes):
        rep.add(path, f"{len(lines)} lines for {len(episodes)} episodes in {EPISODES}")
    for pos, line in enumerate(lines):
        if set(line) != {"episode_index", "stats"} or line.get("episode_index") != pos:
            rep.add(path, f"line {pos + 1}: must be {{episode_index: {pos}, stats: {{...}}}}")
            continue
        st = line["stats"]
        if not isinstance(st, dict) or set(st) != set(feats):
            missing = sorted(set(feats) - set(st)) if isinstance(st, dict) else []
            extra = sorted(set(st) - set(feats)) if isinstance(st, dict) else []
            rep.add(
                path,
                f"line {pos + 1}: stats must cover every feature of {INFO}"
                + (f"; missing {missing}" if missing else "")
                + (f"; extra {extra}" if extra else ""),
            )
            continue
        length = episodes[pos].get("length") if pos < len(episodes) else None
        acc = per_episode[pos] if pos < len(per_episode) else {}
        for key, entry in st.items():
            where = f"line {pos + 1} '{key}'"
            if not isinstance(entry, dict) or set(entry) != EPISODE_STAT_KEYS:
                rep.add(path, f"{where}: must have exactly min, max, mean, std, count")
                continue
            count = entry["count"]
            if not (isinstance(count, list) and len(count) == 1 and isinstance(count[0], int) and count[0] > 0):
                rep.add(path, f"{where}.count must be [positive integer], got {count!r}")
                continue
            if feats[key].get("dtype") == "video":
                _check_image_entry(rep, path, where, entry, EPISODE_STAT_KEYS)
                continue
            if count[0] != length:
                rep.add(path, f"{where}.count is {count[0]}, the episode has {length} rows")
            width = _width(feats[key])
            try:
                arrays = {s: np.asarray(entry[s], dtype=np.float64) for s in ("min", "max", "mean", "std")}
            except (TypeError, ValueError):
                arrays = {}
            if any(a.shape != (width,) or not np.all(np.isfinite(a)) for a in arrays.values()) or not arrays:
                rep.add(path, f"{where}: min/max/mean/std must be lists of {width} finite numbers")
                continue
            a = acc.get(key)
            if a is not None and a.count:
                wrong = [s for s, want in a.summary() if not np.allclose(arrays[s], want, rtol=1e-5, atol=1e-6)]
                if wrong:
                    rep.add(path, f"{where}: {'/'.join(wrong)} do not match the episode's parquet data")


def _check_stats_against_data(rep: _Report, path: Path, stats: dict, acc: dict[str, _ColumnAccumulator]) -> None:
    """stats.json must describe the saved episodes (catches a file not updated after the last save)."""
    for key, a in acc.items():
        entry = stats.get(key)
        if not isinstance(entry, dict) or a.count == 0:
            continue
        wrong = []
        for s, want in a.summary():
            try:
                got = np.asarray(entry.get(s), dtype=np.float64)
            except (TypeError, ValueError):
                continue
            if got.shape == want.shape and not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                wrong.append(s)
        if wrong:
            rep.add(path, f"entry '{key}' {'/'.join(wrong)} do not match the parquet data (stale or wrong stats)")


def _check_modality(rep: _Report, path: Path, modality: Any, feats: dict) -> None:
    if not isinstance(modality, dict):
        rep.add(path, "must be a JSON object")
        return
    for section in ("state", "action", "video"):
        if section not in modality and (section != "video" or any(f.get("dtype") == "video" for f in feats.values())):
            rep.add(path, f"missing section '{section}'")
    for section, entries in modality.items():
        if not isinstance(entries, dict):
            rep.add(path, f"section '{section}' must be an object")
            continue
        for name, entry in entries.items():
            where = f"{section}.{name}"
            if not isinstance(entry, dict):
                rep.add(path, f"{where} must be an object")
                continue
            key = entry.get("original_key")
            if section in ("state", "action", "video") and key is None:
                rep.add(path, f"{where} has no original_key")
                continue
            if key is not None and key not in feats:
                rep.add(path, f"{where}: original_key '{key}' is not a feature in {INFO}")
                continue
            if section == "video" and feats[key].get("dtype") != "video":
                rep.add(path, f"{where}: original_key '{key}' is not a video feature")
            if "start" in entry or "end" in entry or section in ("state", "action"):
                _check_slice(rep, path, where, entry, feats[key])


def _check_slice(rep: _Report, path: Path, where: str, entry: dict, feat: dict) -> None:
    start, end, width = entry.get("start"), entry.get("end"), _width(feat)
    if not (isinstance(start, int) and isinstance(end, int)):
        rep.add(path, f"{where}: start/end must be integers")
        return
    if not 0 <= start < end or width is None or end > width:
        rep.add(path, f"{where}: slice [{start}:{end}] does not fit '{entry['original_key']}' of width {width}")
        return
    rot = entry.get("rotation_type")
    if rot is not None:
        if rot not in GR00T_ROTATION_TYPES and not str(rot).startswith("euler_angles_"):
            rep.add(path, f"{where}: unknown rotation_type {rot!r}")
        elif rot in ROTATION_TYPES and end - start != 4:
            rep.add(path, f"{where}: quaternion slice must be 4 wide, got {end - start}")


def _check_totals(rep: _Report, path: Path, info: dict, episodes: list[dict], n_tasks: int) -> None:
    """info.json totals against episodes.jsonl / tasks.jsonl (each file's row count is checked per episode)."""
    n_ep = len(episodes)
    n_video = sum(1 for f in info["features"].values() if f.get("dtype") == "video")
    lengths = sum(e.get("length", 0) for e in episodes if isinstance(e.get("length"), int))
    chunks = (n_ep - 1) // int(info["chunks_size"]) + 1 if n_ep else 0
    expected = {
        "total_episodes": n_ep,
        "total_frames": lengths,
        "total_tasks": n_tasks,
        "total_videos": n_ep * n_video,
        "total_chunks": chunks,
    }
    for key, want in expected.items():
        if key in info and info[key] != want:
            rep.add(path, f"{key} is {info[key]!r}, expected {want}")
    splits = info.get("splits")
    if not isinstance(splits, dict) or splits.get("train") != f"0:{n_ep}":
        rep.add(path, f"splits must be {{'train': '0:{n_ep}'}}, got {splits!r}")


def _check_stray_files(rep: _Report, root: Path, expected: set[Path]) -> None:
    """LeRobot v2.0 loads every parquet under data/; leftovers from a crash are not harmless."""
    for top in ("data", "videos"):
        base = root / top
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and p not in expected:
                rep.add(p, f"not named by {EPISODES} (leftover or temporary file)")


def _check_pairing(rep: _Report, path: Path, pos: int, ep: dict) -> None:
    """The episode's frame offsets against the causal rule; the worst of them into ``rep.pairing``."""
    pr = rep.pairing
    for key in ("frame_ahead_max_ms", "frame_behind_max_ms", "frame_offset_max_ms"):
        per_cam = ep.get(key)
        if per_cam is None:
            continue
        if not isinstance(per_cam, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in per_cam.values()
        ):
            rep.add(path, f"episode {pos}: {key!r} must map camera names to numbers, got {per_cam!r}")
            continue
        for cam, v in per_cam.items():
            w = (float(v), pos, str(cam))
            if key == "frame_ahead_max_ms":
                pr.ahead = pr._worse(pr.ahead, w)
                if v > CAUSAL_TOLERANCE_MS:
                    rep.add(
                        path,
                        f"episode {pos}: {cam}: a row's frame was captured {v:.3f} ms after the row "
                        f"(more than {CAUSAL_TOLERANCE_MS:g} ms: a frame from the future)",
                    )
            elif key == "frame_behind_max_ms":
                pr.behind = pr._worse(pr.behind, w)
            elif "frame_ahead_max_ms" not in ep:
                pr.undirected = pr._worse(pr.undirected, w)


def validate_root(
    root: str | Path, full: bool = False, timing: TimingSummary | None = None, pairing: PairingSummary | None = None
) -> list[str]:
    """Every problem found in the LeRobot v2.0 / v2.1 root, one line each; [] when valid.

    ``timing``, when given, receives the video timing figures (rows checked, the worst row); ``pairing`` the worst
    frame capture offsets ahead of and behind their rows.
    """
    root = Path(root)
    rep = _Report(
        root,
        timing=TimingSummary() if timing is None else timing,
        pairing=PairingSummary() if pairing is None else pairing,
    )
    if not root.is_dir():
        return [f"{root}: not a directory"]
    info_path = root / INFO
    info = _read_json(rep, info_path)
    episodes = _read_jsonl(rep, root / EPISODES)
    tasks = _read_jsonl(rep, root / TASKS)
    if not isinstance(info, dict):
        if info is not None:
            rep.add(info_path, "must be a JSON object")
        return rep.problems
    if not _check_info(rep, info_path, info):
        return rep.problems
    feats = info["features"]
    episodes = episodes or []
    tasks = tasks or []

    task_of: dict[str, int] = {}
    for pos, t in enumerate(tasks):
        if t.get("task_index") != pos:
            rep.add(root / TASKS, f"line {pos + 1}: task_index {t.get('task_index')!r}, expected {pos}")
        if not isinstance(t.get("task"), str):
            rep.add(root / TASKS, f"line {pos + 1}: 'task' must be a string")
        elif t["task"] in task_of:
            rep.add(root / TASKS, f"line {pos + 1}: task {t['task']!r} listed twice")
        else:
            task_of[t["task"]] = pos

    acc: dict[str, _ColumnAccumulator] = {}
    per_episode: list[dict[str, _ColumnAccumulator]] = []
    expected_files: set[Path] = set()
    video_keys = [k for k, f in feats.items() if f.get("dtype") == "video"]
    start = 0
    ep_path = root / EPISODES
    for pos, ep in enumerate(episodes):
        if ep.get("episode_index") != pos:
            rep.add(
                ep_path,
                f"line {pos + 1}: episode_index {ep.get('episode_index')!r}, expected {pos} "
                f"(episodes listed in order from 0)",
            )
        length = ep.get("length")
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            rep.add(ep_path, f"episode {pos}: length must be a positive integer, got {length!r}")
            length = 0
        ep_tasks = ep.get("tasks")
        task_index = None
        if not (isinstance(ep_tasks, list) and ep_tasks and all(isinstance(t, str) for t in ep_tasks)):
            rep.add(ep_path, f"episode {pos}: 'tasks' must be a non-empty list of strings")
        else:
            for t in ep_tasks:
                if t not in task_of:
                    rep.add(ep_path, f"episode {pos}: task {t!r} is not in {TASKS}")
            task_index = task_of.get(ep_tasks[0])
        if "task_index" in ep:
            if task_index is not None and ep_tasks and ep["task_index"] != task_index:
                rep.add(
                    ep_path,
                    f"episode {pos}: task_index {ep['task_index']!r} but {TASKS} maps {ep_tasks[0]!r} to {task_index}",
                )
            task_index = ep["task_index"] if isinstance(ep["task_index"], int) else task_index
        _check_pairing(rep, ep_path, pos, ep)
        ctx = _EpisodeContext(ep=ep, episode_index=pos, start_index=start, task_index=task_index)
        expected_files.add(data_file(root, info, pos))
        expected_files.update(video_file(root, info, pos, k) for k in video_keys)
        ep_acc: dict[str, _ColumnAccumulator] = {}
        ts = _check_parquet(rep, root, info, ctx, ep_acc, len(tasks))
        per_episode.append(ep_acc)
        for key, a in ep_acc.items():
            acc.setdefault(key, _ColumnAccumulator()).merge(a)
        _check_videos(rep, root, info, ctx, ts, full)
        start += length
    data_clean = not rep.problems  # compare stats with the data only when the data itself is sound
    _check_totals(rep, info_path, info, episodes, len(tasks))
    _check_stray_files(rep, root, expected_files)

    vector = {k: f for k, f in feats.items() if f.get("dtype") != "video"}
    # an empty root (created, nothing saved yet) has no statistics to give
    required = ([k for k in vector if k not in INT_BOOKKEEPING] + video_keys) if episodes else []
    stats_path = root / STATS
    stats = _read_json(rep, stats_path)
    if stats is not None:
        _check_stats_file(rep, stats_path, stats, feats, required)
        if isinstance(stats, dict) and data_clean:
            _check_stats_against_data(rep, stats_path, stats, acc)
    if info.get("codebase_version") == "v2.1":
        es_path = root / EPISODES_STATS
        if not es_path.exists():
            rep.add(es_path, "missing (a v2.1 root keeps per-episode stats there)")
        else:
            lines = _read_jsonl(rep, es_path)
            if lines is not None:
                _check_episodes_stats(rep, es_path, lines, feats, episodes, per_episode if data_clean else [])
    modality_path = root / MODALITY
    modality = _read_json(rep, modality_path)
    if modality is not None:
        _check_modality(rep, modality_path, modality, feats)
    for rel in (RELATIVE_STATS, DELTA_STATS):  # piper-finalize output, when present
        p = root / rel
        if p.exists():
            extra = _read_json(rep, p)
            if extra is not None:
                _check_stats_file(rep, p, extra, feats, [k for k in vector if k.startswith("observation.")])
    return rep.problems


def summary(root: str | Path) -> str:
    """One line describing a root that passed validation."""
    info = json.loads((Path(root) / INFO).read_text())
    return (
        f"OK: {root}: LeRobot {info['codebase_version']}, {info['total_episodes']} episodes, "
        f"{info['total_frames']} frames, {info['total_videos']} videos, {info['total_tasks']} tasks"
    )

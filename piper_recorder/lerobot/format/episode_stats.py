"""Per-episode statistics in LeRobot v2.1's layout, and per-camera image statistics.

Follows lerobot 0.3.3 ``lerobot/datasets/compute_stats.py`` (``get_feature_stats``,
``compute_episode_stats``, ``aggregate_stats``) and ``utils.write_episode_stats``:

* vectors: ``min/max/mean/std`` over rows (population std, numpy on the column's own dtype: float32
  columns give float32 stats, int64 bookkeeping gives int min/max), shape ``(D,)`` (``(1,)`` for
  scalar columns) and ``count`` ``[rows]``;
* images: uint8 frames downsampled as LeRobot does (stride ``int(width / 150)`` when the larger side
  is >= 300 px: 640x480 -> 160x120), stats per channel over (frames, height, width) divided by 255,
  shape ``(3, 1, 1)``; ``count`` is the number of frames in the sample.

Which frames: LeRobot samples ``sample_indices(n)`` (evenly spaced, 100 to 10,000 frames) from the PNGs it keeps.
A streaming recorder knows no ``n`` in advance and keeps no frames, so the writer folds every
``SAMPLE_STRIDE``-th frame it encodes into per-channel 256-bin histograms (``ImageSampler``, fed where the frame
is queued for encoding): constant memory, and every statistic exact for the sampled pixels, q01/q99 included,
merging exactly across episodes (sum). ``root_episode_stats`` recomputes the same sample from a saved episode by
decoding its videos (differing from the live values only by compression loss).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .errors import DatasetError
from .layout import data_file, record_relpath, video_file

SAMPLE_STRIDE = 5
EPISODE_STATS_KEYS = ("min", "max", "mean", "std", "count")  # episodes_stats.jsonl entries
IMAGE_STATS_KEYS = ("mean", "std", "min", "max", "q01", "q99")  # stats.json image entries


# ---- vectors ------------------------------------------------------------------------------------
def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's ``get_feature_stats(values, axis=0, keepdims=values.ndim == 1)``."""
    a = np.asarray(values)
    if a.ndim not in (1, 2) or len(a) == 0:
        raise ValueError(f"vector_stats needs a non-empty (N,) or (N, D) array, got {a.shape}")
    keep: Literal[True, False] = a.ndim == 1  # numpy's stubs type keepdims by its literal value
    return {
        "min": np.min(a, axis=0, keepdims=keep),
        "max": np.max(a, axis=0, keepdims=keep),
        "mean": np.mean(a, axis=0, keepdims=keep),
        "std": np.std(a, axis=0, keepdims=keep),
        "count": np.array([len(a)]),
    }


# ---- images -------------------------------------------------------------------------------------
def lerobot_sample_indices(n: int) -> list[int]:
    """The frames LeRobot 0.3.3 samples from an n-frame episode (``compute_stats.sample_indices``)."""
    k = max(min(100, n), min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, k)).astype(int).tolist()


def downsample(rgb: np.ndarray) -> np.ndarray:
    """LeRobot's ``auto_downsample_height_width`` on an HxWx3 frame (a strided view, no copy)."""
    h, w = rgb.shape[:2]
    if max(w, h) < 300:
        return rgb
    f = int(w / 150) if w > h else int(h / 150)
    return rgb[::f, ::f]


def histogram(frames: np.ndarray) -> np.ndarray:
    """Per-channel 256-bin histograms ``(3, 256)`` int64 of (N, H, W, 3) uint8 frames, downsampled."""
    a = np.asarray(frames)
    if a.dtype != np.uint8 or a.ndim != 4 or a.shape[-1] != 3:
        raise ValueError(f"histogram needs (N, H, W, 3) uint8 frames, got {a.shape} {a.dtype}")
    out = np.zeros((3, 256), np.int64)
    for f in a:
        out += _frame_histogram(f)
    return out


def _frame_histogram(rgb: np.ndarray) -> np.ndarray:
    ds = downsample(rgb)  # one bincount per channel: faster than one over offset values
    return np.stack([np.bincount(ds[..., c].ravel(), minlength=256) for c in range(3)]).astype(np.int64)


class ImageSampler:
    """Folds every ``stride``-th offered frame of one camera into histograms (bounded memory)."""

    def __init__(self, stride: int = SAMPLE_STRIDE):
        self.stride = stride
        self.hist = np.zeros((3, 256), np.int64)
        self.frames = 0  # frames in the sample
        self.offered = 0

    def offer(self, frame: Any) -> None:
        """Call once per frame that goes into the video, in order.

        ``frame`` is an HxWx3 uint8 array or a PyAV rgb24 ``VideoFrame`` (converted only when sampled).
        """
        if self.offered % self.stride == 0:
            rgb = frame if isinstance(frame, np.ndarray) else frame.to_ndarray(format="rgb24")
            self.hist += _frame_histogram(rgb)
            self.frames += 1
        self.offered += 1


def hist_stats(hist: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """LeRobot's image stats (``(3, 1, 1)`` in [0, 1], ``count`` [frames]) from ``(3, 256)`` counts."""
    h = np.asarray(hist, np.int64)
    n = h.sum(axis=1)
    if frames <= 0 or np.any(n == 0):
        raise ValueError("hist_stats needs a non-empty sample")
    v = np.arange(256, dtype=np.float64)
    nz = h > 0
    lo = np.argmax(nz, axis=1)
    hi = 255 - np.argmax(nz[:, ::-1], axis=1)
    mean = (h * np.arange(256, dtype=np.int64)).sum(axis=1) / n  # exact integer sum, as np.mean
    var = (h * (v - mean[:, None]) ** 2).sum(axis=1) / n
    col = (3, 1, 1)
    return {
        "min": (lo / 255.0).reshape(col),
        "max": (hi / 255.0).reshape(col),
        "mean": (mean / 255.0).reshape(col),
        "std": (np.sqrt(var) / 255.0).reshape(col),
        "count": np.array([int(frames)]),
    }


def hist_quantile(hist: np.ndarray, p: float) -> np.ndarray:
    """``np.quantile(pixels, p)`` (linear) per channel, / 255, from ``(3, 256)`` counts; ``(3, 1, 1)``."""
    h = np.asarray(hist, np.int64)
    out = np.empty(3)
    for c in range(3):
        cum = np.cumsum(h[c])
        pos = p * (cum[-1] - 1)
        k = int(np.floor(pos))
        x0 = np.searchsorted(cum, k, side="right")
        x1 = np.searchsorted(cum, min(k + 1, cum[-1] - 1), side="right")
        out[c] = x0 + (pos - k) * (x1 - x0)
    return (out / 255.0).reshape(3, 1, 1)


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's image stats of the given (N, H, W, 3) uint8 frames.

    All of them: they are the sample (``frames[lerobot_sample_indices(len(frames))]`` reproduces LeRobot's own
    choice).
    """
    a = np.asarray(frames)
    return hist_stats(histogram(a), len(a))


def image_entry(hist: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """A stats.json image entry: mean/std/min/max/q01/q99, each (3, 1, 1), no ``count``."""
    s = hist_stats(hist, frames)
    out = {k: s[k] for k in ("mean", "std", "min", "max")}
    out["q01"] = hist_quantile(hist, 0.01)
    out["q99"] = hist_quantile(hist, 0.99)
    return out


# ---- episodes_stats.jsonl lines -----------------------------------------------------------------
def to_jsonable(stats: Mapping[str, Mapping[str, Any]]) -> dict:
    """LeRobot's ``serialize_dict``: numpy arrays -> nested lists (ints stay ints)."""
    return {k: {s: (np.asarray(v).tolist()) for s, v in d.items()} for k, d in stats.items()}


def episode_stats(columns: Mapping[str, np.ndarray], frames: Mapping[str, np.ndarray]) -> dict:
    """The ``stats`` of one episodes_stats.jsonl line, JSON-ready.

    ``columns``: parquet columns in their stored dtypes, (N,) or (N, D), by feature key; ``frames``: each camera's
    sample, (K, H, W, 3) uint8, by video key.
    """
    out = {k: vector_stats(v) for k, v in columns.items()}
    out.update({k: image_stats(f) for k, f in frames.items()})
    return to_jsonable(out)


def stats_line(episode_index: int, stats: dict) -> dict:
    """One line of meta/episodes_stats.jsonl, as ``lerobot.datasets.utils.write_episode_stats``."""
    return {"episode_index": int(episode_index), "stats": stats}


# ---- aggregation --------------------------------------------------------------------------------
def aggregate_stats(stats_list: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, np.ndarray]]:
    """LeRobot's ``aggregate_stats``.

    Union of keys; min of mins, max of maxes, count-weighted mean, parallel-combined (population) variance, summed
    count. Accepts numpy or JSON (list) values.
    """
    items = [{k: {s: np.asarray(v) for s, v in d.items()} for k, d in st.items()} for st in stats_list]
    keys = {k for st in items for k in st}
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        fs = [st[key] for st in items if key in st]
        means = np.stack([s["mean"] for s in fs])
        variances = np.stack([s["std"] ** 2 for s in fs])
        counts = np.stack([s["count"] for s in fs])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, -1)
        mean = (means * counts).sum(axis=0) / total
        var = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        out[key] = {
            "min": np.min(np.stack([s["min"] for s in fs]), axis=0),
            "max": np.max(np.stack([s["max"] for s in fs]), axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": total,
        }
    return out


# ---- from a saved root --------------------------------------------------------------------------
def decode_sample(path: Path, stride: int = SAMPLE_STRIDE) -> tuple[np.ndarray, int]:
    """(3, 256) histograms and frame count of video frames 0, stride, 2*stride, ... of an mp4."""
    import av

    hist, frames = np.zeros((3, 256), np.int64), 0
    try:
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise DatasetError(f"{path}: no video stream")
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for i, frame in enumerate(c.decode(stream)):
                if i % stride == 0:  # only the sampled frames are converted to RGB
                    hist += _frame_histogram(frame.to_ndarray(format="rgb24"))
                    frames += 1
    except av.FFmpegError as e:  # garbled or truncated payload: bad input, named, not a crash
        raise DatasetError(f"{path}: cannot decode video ({e})") from e
    return hist, frames


def read_columns(path: Path, info: dict) -> dict[str, np.ndarray]:
    """An episode parquet's non-video feature columns, (N,) or (N, D), in their stored dtypes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    out: dict[str, np.ndarray] = {}
    for key, feat in info["features"].items():
        if feat.get("dtype") in ("video", "image", "string") or key not in table.column_names:
            continue
        col = table.column(key).combine_chunks()
        if isinstance(col.type, (pa.FixedSizeListType, pa.ListType)):
            width = int(feat["shape"][0])
            out[key] = col.flatten().to_numpy().reshape(-1, width)
        else:
            out[key] = col.to_numpy()
    return out


def root_episode_stats(root: Path, info: dict, episode_index: int, *, cached: bool = True) -> dict:
    """The episodes_stats.jsonl ``stats`` of a saved episode of a v2.x root.

    With ``cached`` the writer's per-episode record (``meta/.cache/stats/episode_XXXXXX.episode.json``,
    written with every save) is used when it matches the parquet's row count; otherwise the stats are
    computed from the parquet and the ``SAMPLE_STRIDE`` sample of each decoded video.
    """
    root = Path(root)
    data = data_file(root, info, episode_index)
    columns = read_columns(data, info)
    n = len(next(iter(columns.values())))
    videos = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    if cached:
        rec = load_record(root / record_relpath(episode_index))
        if rec is not None and rec.get("length") == n and set(videos) <= set(rec.get("stats", {})):
            return rec["stats"]
    out = {}
    for key in info["features"]:  # info.json order, as the writer's lines
        if key in columns:
            out[key] = vector_stats(columns[key])
        elif key in videos:
            out[key] = hist_stats(*decode_sample(video_file(root, info, episode_index, key)))
    return to_jsonable(out)


# ---- the writer's per-episode record (layout.record_relpath) ------------------------------------
def make_record(episode_index: int, length: int, stats: dict, images: Mapping[str, tuple[np.ndarray, int]]) -> dict:
    """The writer's per-episode stats record: the vector stats and each camera's sample histograms."""
    return {
        "episode_index": int(episode_index),
        "length": int(length),
        "stride": SAMPLE_STRIDE,
        "stats": stats,
        "images": {k: {"frames": int(f), "hist": np.asarray(h, np.int64).tolist()} for k, (h, f) in images.items()},
    }


def load_record(path: Path) -> dict | None:
    """The record at ``path``, or None when missing or unreadable."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None

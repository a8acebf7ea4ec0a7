"""LeRobot v3.0 export in the layout of lerobot 0.4.4.

The reference is lerobot's ``src/lerobot/datasets/utils.py``, ``lerobot_dataset.py`` and
``v30/convert_dataset_v21_to_v30.py`` at tag v0.4.4:

* ``data/chunk-XXX/file-YYY.parquet``: the episodes' rows, unchanged, many episodes per file; a new
  file when the next episode would take the file to ``data_files_size_in_mb`` (default 100) counted
  as LeRobot's converter counts it (uncompressed parquet size of the episode files).
* ``videos/<video_key>/chunk-XXX/file-YYY.mp4``: episode mp4s concatenated by remux (see
  ``video_concat``); a new file at ``video_files_size_in_mb`` (default 200, on-disk size as
  LeRobot), at ``video_concat.MAX_FILE_S`` of video, or when the stream parameters change.
* ``meta/episodes/chunk-XXX/file-YYY.parquet``: one row per episode with LeRobot's columns in the
  order its ``save_episode`` writes them: ``episode_index, tasks, length, data/chunk_index,
  data/file_index, dataset_from_index, dataset_to_index, videos/<key>/{chunk_index, file_index,
  from_timestamp, to_timestamp}``, ``stats/<feature>/<stat>`` (the v2.1 episode stats: min, max,
  mean, std, count, as the converter carries them) and ``meta/episodes/{chunk_index, file_index}``.
* ``meta/tasks.parquet`` (task strings as the pandas index, column ``task_index``),
  ``meta/info.json`` (``convert_info``: v3.0, no total_chunks/total_videos, file size limits, new
  path templates, ``fps`` on every non-video feature), ``meta/stats.json`` (``aggregate_stats`` of
  the episode stats, plus the source's q01/q99 where it has them).

Appending follows LeRobot's own resume rule ("when resuming, move to the next file"): a re-run
writes the new episodes into new data, video and meta/episodes files and never rewrites a file of
the previous export (those are hard links in the staging tree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..format import episode_stats, layout
from ..format.raw_read import read_json
from .files import carry_meta, iter_progress, link_tree, write_json
from .source import ExportError, Source
from .state import State, camera_totals
from .video_concat import MAX_FILE_S, TICKS, ConcatError, StreamSignature, VideoFileWriter

CODEBASE_VERSION = "v3.0"
# lerobot 0.4.4 datasets/utils.py
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
EPISODES_DIR = f"{layout.META_DIR}/episodes"  # v3.0 meta files beside the v2.x ones (layout.INFO, STATS)
EPISODES_PATH = f"{EPISODES_DIR}/{CHUNK_FILE_PATTERN}.parquet"
TASKS_PATH = f"{layout.META_DIR}/tasks.parquet"
STAT_KEYS = episode_stats.EPISODE_STATS_KEYS  # min, max, mean, std, count


def next_file(index: tuple[int, int], chunks_size: int = DEFAULT_CHUNK_SIZE) -> tuple[int, int]:
    """LeRobot's ``update_chunk_file_indices``."""
    chunk, file = index
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def parquet_size_mb(path: Path) -> float:
    """LeRobot's ``get_parquet_file_size_in_mb``: total uncompressed size of the column chunks."""
    md = pq.read_metadata(path)
    return (
        sum(
            md.row_group(g).column(c).total_uncompressed_size
            for g in range(md.num_row_groups)
            for c in range(md.row_group(g).num_columns)
        )
        / 1024**2
    )


# ---- output files being filled --------------------------------------------------------------
@dataclass
class _DataFile:
    index: tuple[int, int]
    path: Path
    writer: pq.ParquetWriter
    schema: pa.Schema
    size_mb: float = 0.0


@dataclass
class _VideoFile:
    index: tuple[int, int]
    writer: VideoFileWriter
    size_mb: float = 0.0


class _Builder:
    def __init__(self, src: Source, staging: Path, extra: dict, data_mb: float, video_mb: float):
        self.src, self.staging, self.data_mb, self.video_mb = src, staging, data_mb, video_mb
        self.chunks_size = src.meta.info.chunks_size  # files per chunk dir
        last = extra.get("last_files") or {}
        cs = self.chunks_size
        self.next_data = next_file(tuple(last["data"]), cs) if last.get("data") else (0, 0)
        self.next_video = {
            k: next_file(tuple(last["videos"][k]), cs) if k in last.get("videos", {}) else (0, 0)
            for k in src.video_keys
        }
        self.meta_index = next_file(tuple(last["episodes"]), cs) if last.get("episodes") else (0, 0)
        self.frames = int(extra.get("frames", 0))
        self.data: _DataFile | None = None
        self.videos: dict[str, _VideoFile | None] = dict.fromkeys(src.video_keys)
        self.last_files: dict[str, Any] = {
            "data": last.get("data"),
            "videos": dict(last.get("videos", {})),
            "episodes": self.meta_index,
        }

    # data
    def add_data(self, i: int, row: dict) -> int:
        path = self.src.root / self.src.data_rel(i)
        try:
            table = pq.read_table(path)
            size = parquet_size_mb(path)
        except pa.ArrowException as e:
            raise ExportError(f"episode {i}: {path} cannot be read ({e})") from None
        if self.data is not None and self.data.size_mb + size >= self.data_mb:
            self._close_data()
        if self.data is None:
            index = self.next_data
            out = self.staging / DATA_PATH.format(chunk_index=index[0], file_index=index[1])
            out.parent.mkdir(parents=True, exist_ok=True)
            self.data = _DataFile(
                index, out, pq.ParquetWriter(out, table.schema, compression="snappy", use_dictionary=True), table.schema
            )
            self.next_data = next_file(index, self.chunks_size)
            self.last_files["data"] = index
        if table.schema.remove_metadata() != self.data.schema.remove_metadata():
            raise ExportError(f"{path}: columns {table.schema} differ from the previous episodes'")
        self.data.writer.write_table(pa.Table.from_arrays(table.columns, schema=self.data.schema))
        self.data.size_mb += size
        n = table.num_rows
        row.update(
            {
                "data/chunk_index": self.data.index[0],
                "data/file_index": self.data.index[1],
                "dataset_from_index": self.frames,
                "dataset_to_index": self.frames + n,
            }
        )
        self.frames += n
        return n

    def _close_data(self) -> None:
        if self.data is not None:
            self.data.writer.close()
            self.data = None

    # videos
    def add_video(self, key: str, i: int, timestamps: np.ndarray, row: dict) -> None:
        path = self.src.root / self.src.video_rel(i, key)
        try:
            self._add_video(key, path, timestamps, row)
        except ConcatError as e:
            raise ExportError(f"episode {i}, {key}: {e}") from None
        except av.FFmpegError as e:
            raise ExportError(f"episode {i}, {key}: {path} cannot be read ({e})") from None

    def _add_video(self, key: str, path: Path, timestamps: np.ndarray, row: dict) -> None:
        size = path.stat().st_size / 1024**2
        cur = self.videos[key]
        if cur is not None:
            frames_s = (cur.writer.frames + len(timestamps)) / self.src.fps
            if (
                cur.size_mb + size >= self.video_mb
                or frames_s > MAX_FILE_S
                or StreamSignature.of(path) != cur.writer.signature
            ):
                self._close_video(key)
                cur = None
        if cur is None:
            index = self.next_video[key]
            out = self.staging / VIDEO_PATH.format(video_key=key, chunk_index=index[0], file_index=index[1])
            cur = _VideoFile(index, VideoFileWriter(out, path, self.src.fps))
            self.videos[key] = cur
            self.next_video[key] = next_file(index, self.chunks_size)
            self.last_files["videos"][key] = index
        from_tick, end_tick = cur.writer.add_episode(path, timestamps)
        cur.size_mb += size
        row.update(
            {
                f"videos/{key}/chunk_index": cur.index[0],
                f"videos/{key}/file_index": cur.index[1],
                f"videos/{key}/from_timestamp": from_tick / TICKS,
                f"videos/{key}/to_timestamp": end_tick / TICKS,
            }
        )

    def _close_video(self, key: str) -> None:
        cur = self.videos[key]
        if cur is not None:
            cur.writer.close()
            self.videos[key] = None

    def close(self) -> None:
        self._close_data()
        for key in self.videos:
            self._close_video(key)

    def abort(self) -> None:
        if self.data is not None:
            try:
                self.data.writer.close()
            except Exception:  # an abort closes what it can  # noqa: BLE001
                pass
        for cur in self.videos.values():
            if cur is not None:
                cur.writer.abort()


# ---- meta -----------------------------------------------------------------------------------
def _stat_type(feature: dict, stat: str) -> pa.DataType:
    if stat == "count":
        return pa.list_(pa.int64())
    if feature["dtype"] in ("video", "image"):
        return pa.list_(pa.list_(pa.list_(pa.float64())))
    if stat in ("min", "max") and feature["dtype"].startswith(("int", "uint", "bool")):
        return pa.list_(pa.int64())
    return pa.list_(pa.float64())


# the episodes.jsonl curation keys carried into meta/episodes (null where an episode has none): LeRobot
# 0.4+ keeps every meta/episodes column but stats/* in ``dataset.meta.episodes`` (``load_episodes``)
CURATION_COLUMNS: dict[str, pa.DataType] = {
    "outcome": pa.string(),
    "outcome_note": pa.string(),
    "verdict": pa.string(),
    "verdict_reasons": pa.list_(pa.string()),
}


def episodes_schema(src: Source) -> pa.Schema:
    """meta/episodes columns and types, fixed so that every file of every run has the same schema."""
    fields = [
        pa.field("episode_index", pa.int64()),
        pa.field("tasks", pa.list_(pa.string())),
        pa.field("length", pa.int64()),
        pa.field("data/chunk_index", pa.int64()),
        pa.field("data/file_index", pa.int64()),
        pa.field("dataset_from_index", pa.int64()),
        pa.field("dataset_to_index", pa.int64()),
    ]
    for key in src.video_keys:
        fields += [
            pa.field(f"videos/{key}/chunk_index", pa.int64()),
            pa.field(f"videos/{key}/file_index", pa.int64()),
            pa.field(f"videos/{key}/from_timestamp", pa.float64()),
            pa.field(f"videos/{key}/to_timestamp", pa.float64()),
        ]
    for key, feat in src.info["features"].items():
        for stat in STAT_KEYS:
            fields.append(pa.field(f"stats/{key}/{stat}", _stat_type(feat, stat)))
    fields += [pa.field("meta/episodes/chunk_index", pa.int64()), pa.field("meta/episodes/file_index", pa.int64())]
    fields += [pa.field(k, t, nullable=True) for k, t in CURATION_COLUMNS.items()]
    return pa.schema(fields)


def read_episode_stats(out: Path, src: Source) -> list[dict]:
    """Per-episode stats of a previous v3.0 export, from its meta/episodes files."""
    files = sorted((out / EPISODES_DIR).glob("*/*.parquet"))
    cols = [f"stats/{k}/{s}" for k in src.meta.info.features for s in STAT_KEYS]
    result = []
    for f in files:
        t = pq.read_table(f, columns=["episode_index"] + cols).to_pylist()
        for r in t:
            result.append({k: {s: r[f"stats/{k}/{s}"] for s in STAT_KEYS} for k in src.meta.info.features})
    return result


def tasks_table(tasks: list[dict]) -> pa.Table:
    """meta/tasks.parquet as ``pandas.DataFrame({"task_index": ...}, index=tasks).to_parquet()``."""
    names = [t["task"] for t in tasks]
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    schema = pa.schema(
        [pa.field("task_index", pa.int64()), pa.field("__index_level_0__", pa.string())],
        metadata={b"pandas": json.dumps(pandas_meta).encode()},
    )
    return pa.Table.from_arrays(
        [pa.array([int(t["task_index"]) for t in tasks], pa.int64()), pa.array(names, pa.string())], schema=schema
    )


def info_json(src: Source, total_frames: int, data_mb: float, video_mb: float) -> dict:
    """``convert_info`` of lerobot 0.4.4 applied to our info.json, totals for the whole export."""
    old = src.info
    features = {}
    for key, feat in old["features"].items():
        feat = dict(feat)
        if feat.get("dtype") != "video":
            feat["fps"] = int(old["fps"])
        features[key] = feat
    n = len(src.episodes)
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": old.get("robot_type"),
        "total_episodes": n,
        "total_frames": total_frames,
        "total_tasks": len(src.tasks),
        "chunks_size": int(old.get("chunks_size", DEFAULT_CHUNK_SIZE)),
        "data_files_size_in_mb": data_mb,
        "video_files_size_in_mb": video_mb,
        "fps": int(old["fps"]),
        "splits": {"train": f"0:{n}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if src.video_keys else None,
        "features": features,
    }


def stats_json(src: Source, per_episode: list[dict], cameras: dict[str, dict]) -> dict:
    """``aggregate_stats`` over all episodes, plus q01/q99 where known.

    q01/q99 come from the source's stats.json (over the same episodes) or, for cameras it lacks, from the summed
    sample histograms (``cameras``).
    """
    agg = episode_stats.aggregate_stats(per_episode) if per_episode else {}
    path = src.root / layout.STATS
    extra = read_json(path) if path.is_file() else {}
    extra.update(cameras)
    out = {}
    for key in src.meta.info.features:
        if key not in agg:
            continue
        entry = {s: np.asarray(agg[key][s]).tolist() for s in ("min", "max", "mean", "std", "count")}
        for q in ("q01", "q99"):
            if q in extra.get(key, {}):
                entry[q] = extra[key][q]
        out[key] = entry
    return out


# ---- the build ------------------------------------------------------------------------------
def build(
    src: Source,
    state: State | None,
    prev: Path | None,
    staging: Path,
    progress: bool = False,
    data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_IN_MB,
    video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_SIZE_IN_MB,
) -> State:
    """Build the v3.0 export of ``src`` in ``staging``, after the ``state`` of the previous one in ``prev``."""
    done = len(state.fingerprints) if state else 0
    extra = state.extra if state else {}
    if state is not None:
        data_files_size_in_mb = extra.get("data_files_size_in_mb", data_files_size_in_mb)
        video_files_size_in_mb = extra.get("video_files_size_in_mb", video_files_size_in_mb)
        if extra.get("video_keys") != src.video_keys:
            raise ExportError(
                f"the export has cameras {extra.get('video_keys')}, the source now "
                f"{src.video_keys}; export to a fresh directory"
            )
    per_episode: list[dict] = []
    if prev is not None:
        link_tree(
            prev,
            staging,
            skip=lambda rel: rel.startswith(f"{layout.META_DIR}/") and not rel.startswith(f"{EPISODES_DIR}/"),
        )
        per_episode = read_episode_stats(prev, src)
        if len(per_episode) != done:
            raise ExportError(
                f"{prev / EPISODES_DIR} holds {len(per_episode)} episodes, its state "
                f"{done}; export to a fresh directory"
            )
    b = _Builder(src, staging, extra, data_files_size_in_mb, video_files_size_in_mb)
    schema = episodes_schema(src)
    rows: list[dict] = []
    todo = range(done, len(src.episodes))
    own = src.own_episode_stats()
    cams = src.cameras_without_stats()
    totals = camera_totals(src, state, own)
    try:
        for i in iter_progress(todo, len(todo), "export v3.0", progress):
            e = src.meta.episodes[i]
            row = {"episode_index": i, "tasks": list(e.tasks), "length": e.length}
            n = b.add_data(i, row)
            if n != e.length:
                raise ExportError(f"episode {i}: parquet has {n} rows, {layout.EPISODES} says {e.length}")
            ts = pq.read_table(src.root / src.data_rel(i), columns=["timestamp"]).column(0).to_numpy()
            for key in src.video_keys:
                b.add_video(key, i, ts, row)
            stats, hists = src.episode_stats(i, own, cams)
            totals.add(hists)
            per_episode.append(stats)
            for key in src.meta.info.features:
                for stat in STAT_KEYS:
                    row[f"stats/{key}/{stat}"] = stats[key][stat] if key in stats else None
            row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = b.meta_index
            for k in CURATION_COLUMNS:
                row[k] = e.extras.get(k)
            rows.append(row)
        b.close()
    except BaseException:
        b.abort()
        raise
    missing = [c for c in schema.names if c not in CURATION_COLUMNS and any(r.get(c) is None for r in rows)]
    if missing:
        raise ExportError(f"no episode stats for {missing[:3]}... (episode_stats gave fewer features)")
    meta_path = staging / EPISODES_PATH.format(chunk_index=b.meta_index[0], file_index=b.meta_index[1])
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), meta_path, compression="snappy")
    pq.write_table(tasks_table(src.tasks), staging / TASKS_PATH)
    write_json(staging / layout.INFO, info_json(src, b.frames, data_files_size_in_mb, video_files_size_in_mb))
    write_json(staging / layout.STATS, stats_json(src, per_episode, totals.entries()))
    carry_meta(src, staging)
    last = {
        "data": list(b.last_files["data"]),
        "episodes": list(b.meta_index),
        "videos": {k: list(v) for k, v in b.last_files["videos"].items()},
    }
    return State(
        CODEBASE_VERSION,
        str(src.root),
        extra={
            "last_files": last,
            "frames": b.frames,
            "video_keys": src.video_keys,
            "camera_hist": totals.to_json(),
            "data_files_size_in_mb": data_files_size_in_mb,
            "video_files_size_in_mb": video_files_size_in_mb,
        },
    )

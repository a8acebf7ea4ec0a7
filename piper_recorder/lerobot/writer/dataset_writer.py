"""Streaming, crash-safe LeRobot v2.0 / v2.1 dataset writer (no ROS imports).

Usage::

    w = LeRobotWriter(root, WriterConfig(cameras={"cam_front": CameraSpec()}))  # create or resume
    w.begin_session(record)                      # provenance; warns/refuses on binding changes
    w.start_episode("pick the cube")
    w.add_row(t, {"observation.arm_joint": q, ...})   # every configured feature, every row
    w.add_frame("cam_front", rgb, t)             # encoded on a background thread
    w.save_episode({"late_rows": 0})             # or discard_episode()
    w.close()

Life of an episode: everything in flight lives in ``<root>/.staging/episode_XXXXXX/`` (mp4s being
encoded, raw headset lines). ``save_episode`` flushes the encoders, writes the parquet, the
stats sketch and the episode's stats record (episodes_stats line + sampled image histograms)
there, prepares all new metadata as fsynced ``*.tmp`` files, moves the payload into ``data/``,
``videos/``, ``extras/``, ``meta/.cache/``, then renames tasks/stats/(episodes_stats)/info and
finally ``episodes.jsonl`` (the commit point) into place. Any failure before the commit moves everything back and leaves the
dataset exactly as it was (the episode stays pending: retry ``save_episode`` or discard). A crash at
any instant is repaired by the next open (see ``crash_repair.py``).

Thread safety: ``add_row``, ``add_frame`` and ``add_raw_quest`` may be called from different
threads and only take a short state lock: they never wait for a save in progress (frames arriving
then are refused with False) and ``add_frame`` waits for encoder queue space without any lock.
The other calls are serialised by the operation lock.
Empty episodes (no rows) are discarded by ``save_episode`` (it returns None): they leave nothing.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from piper_recorder import __version__

from ..format import episode_stats, fsutil, layout, metacheck, provenance
from ..format.errors import DatasetError, EpisodeStateError, SaveFailedError, SchemaError
from ..format.features import BOOKKEEPING, combined_specs
from . import crash_repair, meta_builders, stats_sketch
from .config import WriterConfig
from .video_encoder import VideoEncoder

log = logging.getLogger(__name__)
# (the episode's record, its cameras' finished mp4s, its rows' timestamps) -> more record keys
Annotate = Callable[[Mapping[str, Any], Mapping[str, Path], Sequence[float]], Mapping[str, Any]]


class _Episode:
    """State of the episode in flight."""

    def __init__(self, index: int, task: str, task_index: int, staging: Path, width: int):
        self.index, self.task, self.task_index, self.staging = index, task, task_index, staging
        self.rows: np.ndarray = np.empty((256, width), np.float32)
        self.times: list[float] = []
        self.encoders: dict[str, VideoEncoder] = {}
        self.samplers: dict[str, episode_stats.ImageSampler] = {}  # fed by VideoEncoder.add (each frame queued)
        self.images: dict[str, tuple[np.ndarray, int]] | None = None  # (hist, frames) set by import
        self.quest: TextIO | None = None
        self.quest_lines = 0
        self.frame_counts: dict[str, int] | None = None  # set once the encoders are flushed
        self.saving = False  # set by save_episode: no more rows, frames or raw lines
        self.record_ms = 0.0  # time spent building the stats record at save (bench figure)

    @property
    def n(self) -> int:
        return len(self.times)

    def append(self, row: np.ndarray, t: float) -> None:
        if self.n == len(self.rows):
            self.rows = np.concatenate([self.rows, np.empty_like(self.rows)])
        self.rows[self.n] = row
        self.times.append(t)


def io_reason(e: OSError) -> str:
    """An I/O failure as what happened to the files: the errno's meaning first, then the OS's text."""
    what = {
        errno.EFBIG: "a file grew past the file-size limit (ulimit -f) or the file system's largest file",
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exhausted",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
    }.get(e.errno or 0)
    text = " ".join(str(e).split())
    return f"{what}: {text}" if what else text


class LeRobotWriter:
    """Writes episodes into a LeRobot v2.0 or v2.1 root; see the module docstring."""

    _ep: _Episode | None  # the episode in flight (guarded by _state_lock)
    _lock_fd: int | None  # the root lock (fsutil.lock_root) until close

    _episodes: list[dict]  # episodes.jsonl as committed

    def __init__(self, root: str | os.PathLike, cfg: WriterConfig | None = None):
        self.cfg = cfg = cfg or WriterConfig()
        cfg.validate()
        self.root = Path(root)
        (self.root / layout.META_DIR).mkdir(parents=True, exist_ok=True)
        self._lock_fd = fsutil.lock_root(self.root, f"{self.root} is open in another writer")
        try:
            self._open()
        except BaseException:
            self._release()
            raise

    # ---- public API -------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        """Whether an episode is open."""
        return self._ep is not None

    @property
    def total_episodes(self) -> int:
        """The number of saved episodes."""
        return len(self._episodes)

    @property
    def total_frames(self) -> int:
        """The number of saved rows."""
        return self._next_index

    def begin_session(self, record: dict) -> list[tuple[str, Any, Any]]:
        """Record a collection session; returns binding-key changes as (key, old, new).

        Warns on stderr and via logging when binding keys changed since the previous session, or
        raises ``BindingChangeError`` (appending nothing) when ``on_binding_change="refuse"``.
        """
        with self._lock:
            if self._ep is not None:
                raise EpisodeStateError("begin_session while an episode is being recorded")
            _, changes = provenance.begin_session(
                self.root, record, __version__, self.cfg.on_binding_change == "refuse"
            )
            return changes

    def _new_episode(self, task: str) -> _Episode:
        """The next episode with an empty staging directory (caller holds ``self._lock``)."""
        if self._ep is not None:
            raise EpisodeStateError(f"episode {self._ep.index} is still being recorded")
        idx = len(self._episodes)
        staging = self.root / layout.STAGING / layout.episode_name(idx)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        return _Episode(idx, task, self._task_index.get(task, len(self._task_index)), staging, self._width)

    def start_episode(self, task: str) -> int:
        """Start recording an episode of ``task``; returns its episode_index."""
        if not isinstance(task, str) or not task.strip():
            raise SchemaError("task: must be a non-empty string")
        with self._lock:
            ep = self._new_episode(task)
            idx, staging = ep.index, ep.staging
            try:
                for cam, spec in self.cfg.cameras.items():
                    ep.encoders[cam] = VideoEncoder(
                        staging / f"{cam}.mp4", cam, spec.height, spec.width, self.cfg.fps, self.cfg.video
                    )
                    ep.samplers[cam] = episode_stats.ImageSampler()
                    ep.encoders[cam].on_frame = ep.samplers[cam].offer
                if self.cfg.save_raw_quest:
                    # written until the save; _flush or _abort closes it
                    ep.quest = open(staging / "quest.jsonl", "w", encoding="utf-8")  # noqa: SIM115
            except BaseException:
                self._abort(ep)
                raise
            self._set_episode(ep)
            return idx

    def add_row(self, timestamp: float, values: Mapping[str, np.ndarray]) -> None:
        """Append one row: ``timestamp`` s since episode start (strictly increasing) + every feature."""
        row = self._check_row(timestamp, values)
        with self._state_lock:
            ep = self._require_episode("add_row")
            if ep.saving:
                raise EpisodeStateError("add_row after save_episode started")
            if ep.times and not float(np.float32(timestamp)) > ep.times[-1]:
                raise SchemaError(f"timestamp: {timestamp} is not after the previous row ({ep.times[-1]}) in float32")
            ep.append(row, float(np.float32(timestamp)))

    def add_frame(self, camera: str, rgb: np.ndarray, t: float) -> bool:
        """Queue an RGB uint8 HxWx3 frame taken ``t`` s after episode start; False if dropped.

        Dropped (and counted): PTS ``floor(float32(t) * 90000)`` not after the previous frame's, or the
        encoder queue still full after ``VideoConfig.max_block_s``.
        """
        with self._state_lock:
            ep = self._require_episode("add_frame")
            enc = ep.encoders.get(camera)
            if enc is None:
                raise SchemaError(
                    f"{layout.video_key(camera)}: unknown camera (configured: {sorted(self.cfg.cameras)})"
                )
            if ep.saving:
                return False
        if not np.isfinite(t):
            raise SchemaError(f"{layout.video_key(camera)}: frame time {t} is not finite")
        return enc.add(rgb, t)

    def add_raw_quest(self, line: str) -> None:
        """Keep one raw headset line for ``extras/episode_XXXXXX.quest.jsonl`` (if enabled)."""
        with self._state_lock:
            ep = self._require_episode("add_raw_quest")
            if ep.saving or ep.quest is None:
                return
            text = line.strip()
            if text:
                ep.quest.write(text.replace("\n", " ") + "\n")
                ep.quest_lines += 1

    def save_episode(self, counters: Mapping[str, Any] | None = None, annotate: Annotate | None = None) -> dict | None:
        """Finish and commit the episode; returns its episodes.jsonl record (None if it was empty).

        ``counters`` (JSON-serialisable) are merged into the record. ``annotate(record, videos,
        timestamps)``, called once the encoders are flushed and before the commit, returns more keys
        for the record from what was written (the integrity verdict reads the finished mp4s back).
        On failure raises ``DatasetError`` with the dataset unchanged and the episode still pending.
        """
        with self._lock:
            with self._state_lock:
                ep = self._require_episode("save_episode")
                ep.saving = True
            if ep.n == 0:
                self._abort(ep)
                self._set_episode(None)
                return None
            t0 = time.perf_counter()
            if ep.frame_counts is None:
                ep.frame_counts = self._flush(ep)
            empty = [c for c, n in ep.frame_counts.items() if n == 0]
            if empty:
                raise DatasetError(f"episode {ep.index}: no video frames from {empty}; discard_episode() it")
            t1 = time.perf_counter()
            record = self._record(ep, counters)
            if annotate is not None:
                videos = {cam: ep.staging / f"{cam}.mp4" for cam in self.cfg.cameras}
                extra = dict(annotate(record, videos, ep.times[: ep.n]))
                clash = sorted(set(extra) & set(record))
                if clash:
                    raise DatasetError(f"save_episode: annotations {clash} clash with the record's keys")
                record.update(extra)
            self._commit_save(ep, record)
            self._set_episode(None)
            self._session_saved.append(ep.index)
            log.debug(
                "episode %d saved: encoder flush %.0f ms, write + commit %.0f ms (stats record %.1f ms)",
                ep.index,
                (t1 - t0) * 1000,
                (time.perf_counter() - t1) * 1000,
                ep.record_ms,
            )
            return record

    def import_episode(
        self,
        task: str,
        timestamps: np.ndarray,
        columns: Mapping[str, np.ndarray],
        videos: Mapping[str, str | os.PathLike],
        raw_quest: str | os.PathLike | None,
        record: Mapping[str, Any],
        images: Mapping[str, tuple[np.ndarray, int]] | None = None,
    ) -> dict:
        """Commit an episode another writer with the same config already finished, without re-encoding.

        E.g. a parallel converter's staging root: its split-feature ``columns`` (n x dim each), ``timestamps``, finished
        mp4s and raw-line file are MOVED in; ``record`` is its episodes.jsonl line (indices and task index are reassigned
        here, its counters kept). ``images`` are the cameras' sampled histograms ``{camera: (hist, frames)}`` from the
        other writer's record; without them they come from the moved videos (``episode_stats.decode_sample``). Same
        commit path and crash safety as ``save_episode``; returns the new record.
        """
        if not isinstance(task, str) or not task.strip():
            raise SchemaError("task: must be a non-empty string")
        times = np.asarray(timestamps, np.float32).reshape(-1)
        n = len(times)
        if n == 0 or not np.all(np.isfinite(times)) or times[0] < 0 or np.any(np.diff(times) <= 0):
            raise SchemaError("timestamp: need >= 1 finite, non-negative, strictly increasing values")
        rows = np.empty((n, self._width), np.float32)
        pos = 0
        for f in self._features:
            if f.key not in columns:
                raise SchemaError(f"{f.key}: missing from the imported episode")
            v = np.asarray(columns[f.key], np.float32)
            if v.size != n * f.dim or not np.all(np.isfinite(v)):
                raise SchemaError(f"{f.key}: expected {n} finite rows of {f.dim}, got shape {v.shape}")
            rows[:, pos : pos + f.dim] = v.reshape(n, f.dim)
            pos += f.dim
        missing = [c for c in self.cfg.cameras if c not in videos]
        if missing:
            raise SchemaError(f"import_episode: no video for cameras {missing}")
        lengths = record.get("video_frame_lengths") or {}
        reserved = {
            "episode_index",
            "tasks",
            "task_index",
            "length",
            "video_frame_length",
            "video_frame_lengths",
            "video_dropped_frames",
            "raw_quest_lines",
        }
        with self._lock:
            ep = self._new_episode(task)
            idx, staging = ep.index, ep.staging
            ep.rows, ep.times = rows, [float(t) for t in times]
            try:
                for cam in self.cfg.cameras:
                    shutil.move(os.fspath(videos[cam]), staging / f"{cam}.mp4")
                if self.cfg.save_raw_quest:
                    if raw_quest is not None and Path(raw_quest).exists():
                        shutil.move(os.fspath(raw_quest), staging / "quest.jsonl")
                    else:
                        (staging / "quest.jsonl").touch()
                ep.frame_counts = {cam: int(lengths.get(cam, 0)) for cam in self.cfg.cameras}
                ep.images = {
                    cam: (
                        images[cam] if images and cam in images else episode_stats.decode_sample(staging / f"{cam}.mp4")
                    )
                    for cam in self.cfg.cameras
                }
                ep.quest_lines = int(record.get("raw_quest_lines", 0) or 0)
                rec = self._record(ep, {k: v for k, v in record.items() if k not in reserved})
                if "video_dropped_frames" in record:
                    rec["video_dropped_frames"] = record["video_dropped_frames"]
                self._commit_save(
                    ep,
                    rec,
                    retry="this episode was not written and the root is as it was "
                    "before it; fix the cause and run the command again",
                )
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._session_saved.append(idx)
            return rec

    def update_episode(self, index: int, fields: Mapping[str, Any]) -> dict:
        """Set ``fields`` in saved episode ``index``'s episodes.jsonl line (a label given after the save).

        The line is rewritten by one atomic replace of episodes.jsonl (fsynced); nothing else changes. The writer's own
        keys (indices, length, video counts) cannot be set this way.
        """
        reserved = {
            "episode_index",
            "tasks",
            "task_index",
            "length",
            "video_frame_length",
            "video_frame_lengths",
            "video_dropped_frames",
            "raw_quest_lines",
        }
        bad = sorted(set(fields) & reserved)
        if bad:
            raise DatasetError(f"update_episode: {bad} are the writer's own keys")
        with self._lock:
            if not 0 <= index < len(self._episodes):
                raise EpisodeStateError(f"no saved episode {index} (the root has {len(self._episodes)})")
            rec: dict = {**self._episodes[index], **fields}
            try:
                json.dumps(rec)
            except (TypeError, ValueError) as e:
                raise DatasetError(f"update_episode: fields are not JSON-serialisable: {e}") from None
            episodes: list[dict] = list(self._episodes)
            episodes[index] = rec
            try:
                fsutil.atomic_write(self.root / layout.EPISODES, fsutil.jsonl_bytes(episodes))
            except OSError as e:
                raise SaveFailedError(
                    f"labelling episode {index} failed ({io_reason(e)}); {layout.EPISODES} is unchanged"
                ) from e
            self._episodes = episodes
            return rec

    def discard_episode(self) -> None:
        """Drop the episode in flight; it leaves nothing behind."""
        with self._lock:
            with self._state_lock:
                ep = self._require_episode("discard_episode")
                self._ep = None
            self._abort(ep)

    def delete_last_episode(self) -> dict:
        """Delete the last episode saved in this session; returns its record."""
        with self._lock:
            if self._ep is not None:
                raise EpisodeStateError("delete_last_episode while an episode is being recorded")
            if not self._session_saved or self._session_saved[-1] != len(self._episodes) - 1:
                raise EpisodeStateError("no episode saved in this session to delete")
            record = self._commit_delete()
            self._session_saved.pop()
            return record

    def close(self) -> None:
        """Discard any episode in flight and release the root."""
        with self._lock:
            if self._lock_fd is None:
                return
            if self._ep is not None:
                log.warning("close(): discarding unsaved episode %d", self._ep.index)
                ep = self._ep
                self._set_episode(None)
                self._abort(ep)
            staging = self.root / layout.STAGING
            if staging.exists() and not any(staging.iterdir()):
                staging.rmdir()
            self._release()

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- opening ------------------------------------------------------------------------------
    def _open(self) -> None:
        cfg = self.cfg
        self._lock = threading.RLock()  # operations (start/save/discard/delete/...)
        self._state_lock = threading.Lock()  # the episode in flight, for the add_* calls
        self._ep = None
        self._session_saved: list[int] = []
        self._features = list(cfg.features)
        self._width = sum(f.dim for f in self._features)
        # stats layout: one sketch row per scalar of every split feature + bookkeeping column
        self._layout = [(f.key, f.dim) for f in self._features] + [(k, 1) for k in BOOKKEEPING]
        self._combined = combined_specs(cfg.features) if cfg.combined_columns else {}
        info_path = self.root / layout.INFO
        info = None
        if info_path.exists():
            try:
                info = metacheck.load_info(self.root)
            except DatasetError as e:
                raise crash_repair.DamagedRootError(
                    f"{e}; the root was left untouched; {crash_repair.recover_hint(self.root)}"
                ) from None
            self._check_compatible(info)
        metacheck.load_episodes(self.root), metacheck.load_tasks(self.root)  # shapes checked before repair uses them
        self._episodes, tasks, self.repairs = crash_repair.repair(self.root, list(cfg.cameras), cfg.chunks_size, info)
        self._tasks = tasks
        self._task_index = {t["task"]: int(t["task_index"]) for t in tasks}
        self._next_index = sum(int(e["length"]) for e in self._episodes)
        self._sketches = [self._load_sketch(e) for e in self._episodes]
        self._decoded_stats = 0
        t0 = time.perf_counter()
        self._records = [_StatsRecord.of(self._load_record(e)) for e in self._episodes]
        if self._decoded_stats:
            log.warning(
                "%s: image statistics of %d episodes rebuilt from their videos in %.1f s "
                "(their stats records were missing; kept from now on)",
                self.root,
                self._decoded_stats,
                time.perf_counter() - t0,
            )
        self._write_derived_if_changed()

    def _check_compatible(self, info: dict) -> None:
        have_version = info.get("codebase_version")
        if have_version != self.cfg.lerobot_version:
            raise DatasetError(
                f"{self.root} is a LeRobot {have_version} root but lerobot_version is "
                f"{self.cfg.lerobot_version!r}; resume it with lerobot_version "
                f"{have_version!r} or record into a fresh root (piper-export converts)"
            )
        want = meta_builders.features_json(self.cfg)
        if info.get("fps") != self.cfg.fps or info.get("features") != want:
            have = info.get("features", {})
            diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            raise DatasetError(
                f"{self.root} was recorded with a different configuration "
                f"(fps {info.get('fps')} vs {self.cfg.fps}; features differing: "
                f"{diff}); use a fresh root"
            )
        if info.get("chunks_size") != self.cfg.chunks_size:
            raise DatasetError(
                f"{self.root}: chunks_size {info.get('chunks_size')} != configured {self.cfg.chunks_size}"
            )

    def _load_sketch(self, e: dict) -> np.ndarray:
        """The episode's stats sketch from the cache, rebuilt from parquet when missing or stale."""
        i = int(e["episode_index"])
        path = self.root / layout.cache_relpath(i)
        data = self.root / layout.data_relpath(i, self.cfg.chunks_size)
        rows = len(stats_sketch.LEVELS) + stats_sketch.HEAD
        try:  # valid if newer than the parquet (written after it) and of the right shape and count
            if path.stat().st_mtime_ns >= data.stat().st_mtime_ns:
                sk = np.load(path)
                if sk.shape == (self._width + len(BOOKKEEPING), rows) and np.all(sk[:, 0] == e["length"]):
                    return sk
        except (OSError, ValueError):
            pass
        table = pq.read_table(data)
        sk = stats_sketch.sketch(self._table_matrix(table))
        path.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(path, _npy_bytes(sk))
        return sk

    def _load_record(self, e: dict) -> dict:
        """The episode's stats record (episodes_stats line + image histograms), rebuilt when missing or stale.

        Vectors come from the parquet, images from the record if they still fit, else from the same frames decoded from
        the videos (``episode_stats.decode_sample``).
        """
        i, n = int(e["episode_index"]), int(e["length"])
        path = self.root / layout.record_relpath(i)
        data = self.root / layout.data_relpath(i, self.cfg.chunks_size)
        rec = episode_stats.load_record(path)
        keys = self._stats_keys()
        cams = {layout.video_key(c): c for c in self.cfg.cameras}
        images: dict[str, tuple[np.ndarray, int]] = {}
        if rec is not None and rec.get("episode_index") == i:
            lengths = e.get("video_frame_lengths") or {}
            for key, cam in cams.items():
                try:
                    im = rec["images"][key]
                    hist, frames = np.asarray(im["hist"], np.int64), int(im["frames"])
                except (KeyError, TypeError, ValueError):
                    continue
                if hist.shape == (3, 256) and 0 < frames <= int(lengths.get(cam, frames)):
                    images[cam] = (hist, frames)
            try:
                fresh = path.stat().st_mtime_ns >= data.stat().st_mtime_ns
            except OSError:
                fresh = False
            if fresh and rec.get("length") == n and len(images) == len(cams) and list(rec.get("stats", {})) == keys:
                return rec
        if len(images) < len(cams):
            self._decoded_stats += 1
        for cam in cams.values():
            if cam not in images:
                images[cam] = episode_stats.decode_sample(
                    self.root / layout.video_relpath(i, cam, self.cfg.chunks_size)
                )
        columns = episode_stats.read_columns(data, {"features": meta_builders.features_json(self.cfg)})
        rec = self._make_record(i, n, columns, images)
        path.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(path, fsutil.json_bytes(rec))
        return rec

    def _stats_keys(self) -> list[str]:
        """Feature keys of an episodes_stats line, in info.json ``features`` order."""
        return list(meta_builders.features_json(self.cfg))

    def _make_record(
        self, i: int, n: int, columns: Mapping[str, np.ndarray], images: Mapping[str, tuple[np.ndarray, int]]
    ) -> dict:
        st: dict[str, dict[str, np.ndarray]] = {}
        for key in self._stats_keys():
            if key in columns:
                st[key] = episode_stats.vector_stats(columns[key])
            else:
                cam = layout.camera_of(key)
                st[key] = episode_stats.hist_stats(*images[cam])
        return episode_stats.make_record(
            i, n, episode_stats.to_jsonable(st), {layout.video_key(c): images[c] for c in self.cfg.cameras}
        )

    def _episode_columns(self, ep: _Episode) -> dict[str, np.ndarray]:
        """The episode's parquet columns (stored dtypes; shape-[1] columns 1-D), from memory."""
        n, first = ep.n, self._next_index
        cols: dict[str, np.ndarray] = {}
        pos = 0
        for f in self._features:
            cols[f.key] = ep.rows[:n, pos : pos + f.dim]
            pos += f.dim
        for key, parts in self._combined.items():
            cols[key] = np.concatenate([cols[p.key] for p in parts], axis=1)
        cols = {k: np.ascontiguousarray(v[:, 0] if v.shape[1] == 1 else v) for k, v in cols.items()}
        cols.update(
            timestamp=np.asarray(ep.times, np.float32),
            frame_index=np.arange(n, dtype=np.int64),
            episode_index=np.full(n, ep.index, np.int64),
            index=np.arange(first, first + n, dtype=np.int64),
            task_index=np.full(n, ep.task_index, np.int64),
        )
        return cols

    def _episode_matrix(self, ep: _Episode) -> np.ndarray:
        """The values ``_table_matrix`` would read back from the episode's parquet, from memory."""
        n = ep.n
        first = self._next_index
        book = np.column_stack(
            [
                np.asarray(ep.times, np.float32),
                np.arange(n),
                np.full(n, ep.index),
                np.arange(first, first + n),
                np.full(n, ep.task_index),
            ]
        )
        return np.concatenate([ep.rows[:n].astype(np.float64), book.astype(np.float64)], axis=1)

    def _table_matrix(self, table: pa.Table) -> np.ndarray:
        cols = []
        for key, width in self._layout:
            col = table.column(key).combine_chunks()
            if isinstance(col.type, pa.FixedSizeListType):
                cols.append(col.flatten().to_numpy().reshape(-1, width).astype(np.float64))
            else:
                cols.append(col.to_numpy().astype(np.float64).reshape(-1, 1))
        return np.concatenate(cols, axis=1)

    # ---- rows ---------------------------------------------------------------------------------
    def _check_row(self, timestamp: float, values: Mapping[str, np.ndarray]) -> np.ndarray:
        try:
            ts = float(timestamp)
        except (TypeError, ValueError):
            raise SchemaError(f"timestamp: not a number ({timestamp!r})") from None
        if not np.isfinite(np.float32(ts)) or ts < 0:
            raise SchemaError(f"timestamp: must be finite and >= 0, got {timestamp!r}")
        unknown = set(values) - {f.key for f in self._features}
        if unknown:
            raise SchemaError(f"{sorted(unknown)[0]}: not a configured feature")
        row = np.empty(self._width, np.float32)
        pos = 0
        for f in self._features:
            if f.key not in values:
                raise SchemaError(f"{f.key}: missing from the row")
            v = np.asarray(values[f.key])
            if v.dtype.kind not in "fiu":
                raise SchemaError(f"{f.key}: dtype {v.dtype} is not a real number type")
            if v.shape != (f.dim,):
                raise SchemaError(f"{f.key}: shape {v.shape}, expected ({f.dim},)")
            with np.errstate(over="ignore", invalid="ignore"):
                v32 = v.astype(np.float32)
            if not np.all(np.isfinite(v32)):
                raise SchemaError(f"{f.key}: non-finite value {v.tolist()} (in float32)")
            row[pos : pos + f.dim] = v32
            pos += f.dim
        return row

    def _set_episode(self, ep: _Episode | None) -> None:
        with self._state_lock:
            self._ep = ep

    def _require_episode(self, what: str) -> _Episode:
        if self._ep is None:
            raise EpisodeStateError(f"{what}: no episode started")
        return self._ep

    # ---- saving -------------------------------------------------------------------------------
    def _flush(self, ep: _Episode) -> dict[str, int]:
        """Flush all encoders in parallel and close the raw-line file."""
        for enc in ep.encoders.values():
            enc.request_finish()
        counts = {cam: enc.finish() for cam, enc in ep.encoders.items()}
        if ep.quest is not None:
            ep.quest.flush()
            os.fsync(ep.quest.fileno())
            ep.quest.close()
            ep.quest = None
        return counts

    def _record(self, ep: _Episode, counters: Mapping[str, Any] | None) -> dict:
        rec: dict[str, Any] = {
            "episode_index": ep.index,
            "tasks": [ep.task],
            "task_index": ep.task_index,
            "length": ep.n,
        }
        if self.cfg.cameras:
            fc = ep.frame_counts or {}
            rec["video_frame_length"] = min(fc.values())
            rec["video_frame_lengths"] = dict(fc)
            rec["video_dropped_frames"] = {
                c: {"non_increasing_pts": e.dropped_pts, "queue_full": e.dropped_queue} for c, e in ep.encoders.items()
            }
        if self.cfg.save_raw_quest:
            rec["raw_quest_lines"] = ep.quest_lines
        for k, v in (counters or {}).items():
            if k in rec:
                raise DatasetError(f"save_episode: counter {k!r} clashes with a reserved key")
            rec[k] = v
        try:
            json.dumps(rec)
        except (TypeError, ValueError) as e:
            raise DatasetError(f"save_episode: counters are not JSON-serialisable: {e}") from None
        return rec

    def _episode_table(self, ep: _Episode) -> pa.Table:
        n = ep.n
        rows = ep.rows[:n]
        cols: dict[str, np.ndarray] = {}
        pos = 0
        for f in self._features:
            cols[f.key] = rows[:, pos : pos + f.dim]
            pos += f.dim
        for key, parts in self._combined.items():
            cols[key] = np.concatenate([cols[p.key] for p in parts], axis=1)
        arrays, fields = [], []
        for key, v in cols.items():
            if v.shape[1] == 1:
                arr = pa.array(np.ascontiguousarray(v[:, 0]), pa.float32())
            else:
                flat = pa.array(np.ascontiguousarray(v).reshape(-1), pa.float32())
                arr = pa.FixedSizeListArray.from_arrays(flat, v.shape[1])
            arrays.append(arr)
            fields.append(pa.field(key, arr.type, nullable=False))
        first = self._next_index
        book = {
            "timestamp": pa.array(np.asarray(ep.times, np.float32), pa.float32()),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, ep.index, np.int64)),
            "index": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "task_index": pa.array(np.full(n, ep.task_index, np.int64)),
        }
        for key, arr in book.items():
            arrays.append(arr)
            fields.append(pa.field(key, arr.type, nullable=False))
        hf = {"info": {"features": {f.name: _hf_feature(f.type) for f in fields}}}
        schema = pa.schema(fields, metadata={"huggingface": json.dumps(hf)})
        return pa.Table.from_arrays(arrays, schema=schema)

    def _payload(self, ep: _Episode) -> list[tuple[Path, Path]]:
        """(staging file, final path) for every file the episode owns."""
        cs = self.cfg.chunks_size
        moves = [
            (ep.staging / "data.parquet", self.root / layout.data_relpath(ep.index, cs)),
            (ep.staging / "stats.npy", self.root / layout.cache_relpath(ep.index)),
            (ep.staging / "episode.json", self.root / layout.record_relpath(ep.index)),
        ]
        moves += [
            (ep.staging / f"{cam}.mp4", self.root / layout.video_relpath(ep.index, cam, cs)) for cam in self.cfg.cameras
        ]
        if self.cfg.save_raw_quest:
            moves.append((ep.staging / "quest.jsonl", self.root / layout.extras_relpath(ep.index)))
        return moves

    def _commit_save(
        self,
        ep: _Episode,
        record: dict,
        retry: str = "the dataset is unchanged, retry save_episode() or discard_episode()",
    ) -> None:
        """Commit one episode.

        ``retry`` says what the caller can do after an I/O failure, in its own terms: the recorder API's save_episode(),
        or a command line that imports episodes.
        """
        episodes = self._episodes + [record]
        tasks = list(self._tasks)
        if ep.task_index == len(tasks):
            tasks.append({"task_index": ep.task_index, "task": ep.task})
        moved: list[tuple[Path, Path]] = []
        tmps: list[tuple[Path, Path]] = []
        done: list[tuple[Path, bytes | None]] = []
        try:
            table = self._episode_table(ep)
            write_parquet(table, ep.staging / "data.parquet")
            sk = stats_sketch.sketch(self._episode_matrix(ep))
            fsutil.write_tmp(ep.staging / "stats.npy", _npy_bytes(sk)).rename(ep.staging / "stats.npy")
            t0 = time.perf_counter()
            images = ep.images if ep.images is not None else {c: (s.hist, s.frames) for c, s in ep.samplers.items()}
            rec = self._make_record(ep.index, ep.n, self._episode_columns(ep), images)
            ep.record_ms = (time.perf_counter() - t0) * 1000
            fsutil.write_tmp(ep.staging / "episode.json", fsutil.json_bytes(rec)).rename(ep.staging / "episode.json")
            contents = self._derived(episodes, tasks, self._sketches + [sk], self._records + [_StatsRecord.of(rec)])
            contents.append((layout.EPISODES, fsutil.jsonl_bytes(episodes)))
            for rel, data in contents:
                path = self.root / rel
                tmps.append((fsutil.write_tmp(path, data), path))
            for src, dst in self._payload(ep):
                dst.parent.mkdir(parents=True, exist_ok=True)
                fsutil.replace(src, dst)
                moved.append((src, dst))
            for d in {dst.parent for _, dst in moved}:
                fsutil.fsync_dir(d)
            for tmp, path in tmps:  # episodes.jsonl last: the commit point
                old = path.read_bytes() if path.exists() else None
                fsutil.replace(tmp, path)
                done.append((path, old))
            fsutil.fsync_dir(self.root / layout.META_DIR)
        except BaseException as e:
            self._rollback(tmps, done, moved)
            if isinstance(e, OSError):
                raise SaveFailedError(f"saving episode {ep.index} failed ({io_reason(e)}); {retry}") from e
            raise
        self._episodes, self._tasks = episodes, tasks
        self._task_index[ep.task] = ep.task_index
        self._sketches.append(sk)
        self._records.append(_StatsRecord.of(rec))
        self._next_index += ep.n
        shutil.rmtree(ep.staging, ignore_errors=True)

    def _rollback(
        self, tmps: list[tuple[Path, Path]], done: list[tuple[Path, bytes | None]], moved: list[tuple[Path, Path]]
    ) -> None:
        """Undo a failed save/delete as far as the OS lets us; the next open repairs the rest."""
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)
        for path, old in reversed(done):
            try:
                if old is None:
                    path.unlink(missing_ok=True)
                else:
                    fsutil.atomic_write(path, old)
            except OSError as e:
                log.error("rollback of %s failed (%s); the next open repairs it", path, e)
        for src, dst in reversed(moved):
            try:
                os.replace(dst, src)
            except OSError as e:
                log.error("rollback of %s failed (%s); the next open repairs it", dst, e)

    def _derived(
        self, episodes: list[dict], tasks: list[dict], sketches: list[np.ndarray], records: list[_StatsRecord]
    ) -> list[tuple[str, bytes]]:
        """New content of the files derived from episodes.jsonl (written before it)."""
        out = [(layout.TASKS, fsutil.jsonl_bytes(tasks))]
        if sketches:
            merged = stats_sketch.merge(np.stack(sketches))
            combined = {k: tuple(p.key for p in parts) for k, parts in self._combined.items()}
            st = stats_sketch.to_json(merged, self._layout, combined)
            st.update(self._image_stats(records))
            out.append((layout.STATS, fsutil.json_bytes(st)))
        else:
            out.append((layout.STATS, fsutil.json_bytes({})))
        if self.cfg.lerobot_version != "v2.0":
            out.append((layout.EPISODES_STATS, b"".join(r.line for r in records)))
        out.append((layout.INFO, fsutil.json_bytes(meta_builders.info_json(self.cfg, episodes, len(tasks)))))
        out.append((layout.MODALITY, fsutil.json_bytes(meta_builders.modality_json(self.cfg))))
        return out

    def _image_stats(self, records: list[_StatsRecord]) -> dict:
        """stats.json camera entries: the episodes' sampled histograms merged (exact).

        mean/std/min/max/q01/q99 of shape (3, 1, 1); no ``count`` (GR00T reads every key).
        """
        out = {}
        for cam in self.cfg.cameras:
            key = layout.video_key(cam)
            hist = np.sum([r.images[key][0] for r in records], axis=0)
            frames = sum(r.images[key][1] for r in records)
            out[key] = episode_stats.to_jsonable({key: episode_stats.image_entry(hist, frames)})[key]
        return out

    def _write_derived_if_changed(self) -> None:
        files = self._derived(self._episodes, self._tasks, self._sketches, self._records)
        files.append((layout.EPISODES, fsutil.jsonl_bytes(self._episodes)))
        for rel, data in files:
            path = self.root / rel
            if not path.exists() or path.read_bytes() != data:
                fsutil.atomic_write(path, data)

    # ---- delete / discard ---------------------------------------------------------------------
    def _commit_delete(self) -> dict:
        last = self._episodes[-1]
        episodes = self._episodes[:-1]
        tasks = meta_builders.tasks_from_episodes(episodes, self._tasks)
        sketches, records = self._sketches[:-1], self._records[:-1]
        tmps: list[tuple[Path, Path]] = []
        done: list[tuple[Path, bytes | None]] = []
        try:
            contents = [(layout.EPISODES, fsutil.jsonl_bytes(episodes))]  # commit point first
            contents += self._derived(episodes, tasks, sketches, records)
            for rel, data in contents:
                path = self.root / rel
                tmps.append((fsutil.write_tmp(path, data), path))
            for tmp, path in tmps:
                old = path.read_bytes() if path.exists() else None
                fsutil.replace(tmp, path)
                done.append((path, old))
            fsutil.fsync_dir(self.root / layout.META_DIR)
        except BaseException as e:
            self._rollback(tmps, done, [])
            if isinstance(e, OSError):
                raise DatasetError(
                    f"deleting episode {last['episode_index']} failed ({e}); the dataset is unchanged"
                ) from e
            raise
        i = int(last["episode_index"])
        for path in self._payload_paths(i):
            path.unlink(missing_ok=True)  # unreferenced now; repair would move leftovers aside
        self._episodes, self._tasks, self._sketches, self._records = episodes, tasks, sketches, records
        self._task_index = {t["task"]: int(t["task_index"]) for t in tasks}
        self._next_index -= int(last["length"])
        return last

    def _payload_paths(self, i: int) -> list[Path]:
        cs = self.cfg.chunks_size
        paths = [
            self.root / layout.data_relpath(i, cs),
            self.root / layout.cache_relpath(i),
            self.root / layout.record_relpath(i),
            self.root / layout.extras_relpath(i),
        ]
        paths += [self.root / layout.video_relpath(i, cam, cs) for cam in self.cfg.cameras]
        return paths

    def _abort(self, ep: _Episode) -> None:
        for enc in ep.encoders.values():
            enc.abort()
        if ep.quest is not None:
            ep.quest.close()
            ep.quest = None
        shutil.rmtree(ep.staging, ignore_errors=True)

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


@dataclass(frozen=True)
class _StatsRecord:
    """An episode's stats record as the derived files need it.

    Its episodes_stats.jsonl line (bytes, serialised once) and its cameras' sampled histograms by video key.
    """

    line: bytes
    images: dict[str, tuple[np.ndarray, int]]

    @classmethod
    def of(cls, rec: dict) -> _StatsRecord:
        line = fsutil.jsonl_bytes([episode_stats.stats_line(rec["episode_index"], rec["stats"])])
        return cls(line, {k: (np.asarray(v["hist"], np.int64), int(v["frames"])) for k, v in rec["images"].items()})


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write and fsync an episode table (patched by the failure-injection tests)."""
    pq.write_table(table, path)
    fsutil.fsync_file(path)


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _hf_feature(t: pa.DataType) -> dict:
    """HF datasets feature description stored in the parquet schema metadata (as LeRobot does)."""

    def value(v: pa.DataType) -> dict:
        return {"dtype": {"float": "float32", "double": "float64"}.get(str(v), str(v)), "_type": "Value"}

    if isinstance(t, pa.FixedSizeListType):
        return {"feature": value(t.value_type), "length": t.list_size, "_type": "Sequence"}
    return value(t)

"""Streaming writer for ``rlroverlab.offline_rgbd_v2`` files (one observation timeline, T+1 obs per T actions).

Threads: the caller validates and copies frames; a pool of encoder threads (JPEG via Pillow,
JPEG 2000 via libopenjp2/OpenJPH; all release the GIL) compresses them; one sink thread appends the
payloads in order. The number of frames submitted but not yet in the file is bounded by
``queue_size``: when full, ``add_observation`` blocks and the wait is counted in ``stats``
(explicit back-pressure; frames are never dropped, since that would break the T+1 timeline).

Crash safety (see journal.py): each episode (and each delete or status change) is one transaction
on the file, which HDF5 reaches only through an undo journal: payloads are appended past the
committed end, changes to committed bytes wait in memory until commit. Commit = write index and
metadata, journal the original pages, write them, fsync, delete the journal. A SIGKILL at any
instant leaves either the committed state or a journal that the next open rolls back, so at most
the episode in flight is lost. New files are built aside and linked into place. One writer per
file: an exclusive OFD lock on the data file itself (see ``_lock``), so a symlink, a hard link or
another mount path reaches the same lock, and releasing it is just closing the descriptor (no lock
file to unlink, so nothing can race a third writer). The journal sits next to the resolved real
path, where any symlink or mount path finds it; a file with several hard links is refused (the
journal could not be found through the other names). ``writer_status`` is "incomplete" while a
writer session is open (or crashed), "closing" during the final validation, "complete" after
``close()``, "failed" if that validation fails. Readers that open the file between commits see the
episodes committed so far.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import fcntl
import glob
import json
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import h5py
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from piper_recorder.storage.durable import fsync_parent

from . import codecs, schema
from .config import RgbdConfig
from .errors import EpisodeStateError, FileStateError, RgbdError, SchemaError
from .journal import JournaledFile, rollback

log = logging.getLogger(__name__)
_VLEN = h5py.vlen_dtype(np.uint8)
_SINK_BATCH = 8
_Encoded: TypeAlias = "tuple[bytes, bytes, float]"  # RGB JPEG, depth JP2, encode seconds
# a compressed payload handed to add_encoded_observation: bytes, or a uint8 row read from a file
EncodedPayload: TypeAlias = "bytes | bytearray | memoryview | np.ndarray"


@dataclass
class WriterStats:
    """What the writer counted: frames submitted and written, and its back-pressure waits."""

    frames_submitted: int = 0
    frames_written: int = 0
    backpressure_waits: int = 0  # add_observation calls that found the queue full
    backpressure_wait_s: float = 0.0
    max_backlog: int = 0
    encode_s: float = 0.0  # summed worker time
    episodes_committed: int = 0
    episodes_discarded: int = 0
    episodes_rolled_back_on_open: int = 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _encode_job(rgb: np.ndarray, depth: np.ndarray, cfg: RgbdConfig) -> _Encoded:
    t0 = time.perf_counter()
    mm = codecs.quantize_depth(depth, cfg.depth_min_m, cfg.depth_max_m)
    r = codecs.encode_rgb_jpeg(rgb, cfg.rgb_jpeg_quality)
    d = codecs.encode_depth(mm, cfg.depth_codec)
    return r, d, time.perf_counter() - t0


def _as_attr(value: object) -> schema.AttrValue | np.generic:
    if isinstance(value, (bool, int, float, str, np.integer, np.floating, np.bool_)):
        return value
    return json.dumps(value)


class _Episode:
    def __init__(
        self, index: int, obs_offset: int, tr_offset: int, seed: int | None, meta: Mapping[str, Any] | None
    ) -> None:
        self.index, self.obs_offset, self.tr_offset = index, obs_offset, tr_offset
        self.seed, self.meta = seed, dict(meta or {})
        self.n_obs = 0
        self.states: dict[str, list] = {}
        self.actions: list = []
        self.rewards: list = []
        self.terminals: list = []
        self.timeouts: list = []
        self.extras: dict[str, list] = {}
        self.start_ns = time.time_ns()


class RgbdWriter:
    """Create ``path`` or append to it (a complete file, or one a crashed writer left behind)."""

    def __init__(self, path: str | os.PathLike, config: RgbdConfig | None = None):
        self.given_path = os.fspath(path)
        self.path = os.path.realpath(self.given_path)  # journal and temp files live next to the real file
        self.cfg = config or RgbdConfig()
        self.cfg.validate()
        self.stats = WriterStats()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)  # like a LeRobot root
        self._lock_fd = -1
        self._closed = False
        self._ep: _Episode | None = None
        self._h5: h5py.File | None = None
        self._jf: JournaledFile | None = None
        self._error: BaseException | None = None
        try:
            if not self._create():  # the file exists (or another writer just created it)
                self._lock_fd = self._lock_existing()
                self._open_existing()
        except BaseException:
            self._release_lock()
            raise
        self._pool = cf.ThreadPoolExecutor(self.cfg.workers, thread_name_prefix="rgbd-encode")
        self._slots = threading.BoundedSemaphore(self.cfg.queue_size)
        self._pending: queue.Queue[cf.Future[_Encoded] | None] = queue.Queue()
        self._sink: threading.Thread | None = None

    # ---------------------------------------------------------------- file lifecycle
    @staticmethod
    def _lock(fd: int) -> bool:
        """Exclusive open-file-description lock on the whole file; False if another writer holds it.

        OFD locks (Linux) belong to the inode, whatever name opened it, and unlike POSIX record locks
        they survive this process closing other descriptors of the file (h5py, the journal). They do
        not conflict with the ``flock`` HDF5 takes, so readers keep opening the file while it is written.
        """
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def _in_use(self) -> FileStateError:
        where = f" (through {self.given_path})" if self.given_path != self.path else ""
        return FileStateError(
            f"{self.path}{where} is open in another writer (the file is locked; one writer per "
            "file, whatever path reaches it)"
        )

    def _lock_existing(self) -> int:
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR)
            try:
                if not self._lock(fd):
                    raise self._in_use()
                st = os.fstat(fd)
                try:
                    same = os.stat(self.path).st_ino == st.st_ino
                except FileNotFoundError:
                    same = False
                if not same:  # replaced between open and lock: lock what the name now holds
                    os.close(fd)
                    continue
                if st.st_nlink > 1:
                    raise FileStateError(
                        f"{self.path} has {st.st_nlink} hard links: a crash journal is named after one of them "
                        "and could not be found through the others; write to a copy (cp) or remove the extra links"
                    )
            except BaseException:
                os.close(fd)
                raise
            return fd
        raise FileStateError(f"{self.path} keeps being replaced while opening it")

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # drops the OFD lock; no lock file to unlink
            self._lock_fd = -1

    def _create(self) -> bool:
        """Build a new file aside, locked, and link it into place; False if ``path`` already exists."""
        prefix = self.path + ".creating."
        for stale in glob.glob(glob.escape(prefix) + "*"):  # also a second link left by a crash after os.link
            pid = stale[len(prefix) :]
            if pid.isdigit() and not _alive(int(pid)):  # a live creator's file is not ours to remove
                os.unlink(stale)
        if os.path.lexists(self.path):
            return False
        tmp = f"{prefix}{os.getpid()}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self._lock(fd)
            self._build(tmp)
            os.fsync(fd)
            try:
                os.link(tmp, self.path)  # never replaces: a writer that got here first keeps its file
            except FileExistsError:
                os.close(fd)
                fd = -1
                return False
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
                    raise
                os.rename(tmp, self.path)  # a file system without hard links
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._lock_fd = fd
        self._n_episodes = 0
        fsync_parent(self.path)
        return True

    def _build(self, tmp: str) -> None:
        c = self.cfg
        with h5py.File(tmp, "w") as f:
            f.attrs.update(schema.root_attrs(c))
            obs = f.create_group("observations")
            for name, attrs in ((schema.RGB, schema.rgb_attrs(c)), (schema.DEPTH, schema.depth_attrs(c))):
                ds = f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=_VLEN, chunks=(schema.VLEN_CHUNK,))
                ds.attrs.update(attrs)
            obs.create_group("state")
            tr = f.create_group("transitions")
            self._create_numeric(tr, "rewards", (), np.float32)
            for flag in schema.FLAGS:
                self._create_numeric(tr, flag, (), np.bool_)
            idx = f.create_group("index")
            for name in schema.PER_TRANSITION_INDEX + schema.PER_EPISODE_INDEX:
                idx.create_dataset(name, shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(schema.INDEX_CHUNK,))
            f.create_group("episodes")
            data = f.create_group("data")
            data.attrs["total"] = 0
            data.attrs["env_args"] = json.dumps(c.env_args)

    @staticmethod
    def _create_numeric(group: h5py.Group, name: str, row_shape: tuple[int, ...], dtype: DTypeLike) -> h5py.Dataset:
        return group.create_dataset(
            name,
            shape=(0, *row_shape),
            maxshape=(None, *row_shape),
            dtype=dtype,
            chunks=schema.numeric_chunks(tuple(row_shape), dtype),
        )

    def _open_existing(self) -> None:
        if rollback(self.path):
            self.stats.episodes_rolled_back_on_open += 1
            log.warning("%s: rolled back an interrupted transaction", self.path)

        try:
            with h5py.File(self.path, "r") as f:
                attrs = dict(f.attrs)
                depth_attrs = dict(f[schema.DEPTH].attrs) if schema.DEPTH in f else {}
        except (OSError, TypeError, ValueError, RuntimeError) as e:  # h5py's errors for damaged headers/attributes
            raise FileStateError(f"{self.path}: not a readable HDF5 file ({type(e).__name__}: {e})") from e
        if attrs.get("schema_name") != schema.SCHEMA_NAME:
            raise FileStateError(f"{self.path}: schema_name is {attrs.get('schema_name')!r}, not {schema.SCHEMA_NAME}")
        status = attrs.get("writer_status")
        # imported where used: the package's face loads the writer, and ``python -m rgbd_writer.validate`` must
        # find the validator not yet imported when it runs it as __main__
        from .validate import validate_file

        try:
            problems = [p for p in validate_file(self.path) if not p.startswith("writer_status")]
        except Exception as e:  # noqa: BLE001 - damaged beyond what the validator can read
            problems = [f"cannot validate: {type(e).__name__}: {e}"]
        if problems:
            raise FileStateError(
                f"{self.path} (writer_status={status!r}) cannot be appended to: " + "; ".join(problems[:5])
            )
        c = self.cfg
        want = {
            "rgb_jpeg_quality": c.rgb_jpeg_quality,
            schema.DEPTH_PROFILE_ATTR: c.depth_codec,
            "depth_min_m": c.depth_min_m,
            "depth_max_m": c.depth_max_m,
            "rgb_source": c.rgb_source,
            "depth_source": c.depth_source,
        }
        have = dict(attrs)
        have[schema.DEPTH_PROFILE_ATTR] = depth_attrs.get(
            schema.DEPTH_PROFILE_ATTR, attrs.get(schema.DEPTH_PROFILE_ATTR)
        )
        if "camera_width" in attrs:
            want.update(camera_width=c.width, camera_height=c.height)
        diff = [f"{k}: file {have.get(k)!r} vs config {v!r}" for k, v in want.items() if have.get(k) != v]
        if diff:
            raise FileStateError(f"{self.path}: config does not match the file: " + "; ".join(diff))
        if status != "incomplete":
            self._set_status("incomplete")
        self._n_episodes = int(attrs.get("total_episodes", 0))

    def _begin(self) -> h5py.File:
        self._jf = jf = JournaledFile(self.path, durable=self.cfg.durable)
        try:
            self._h5 = h5 = h5py.File(jf, "r+")
        except BaseException:
            jf.rollback()
            self._jf = None
            raise
        return h5

    def _commit(self) -> None:
        assert self._h5 is not None and self._jf is not None  # in a transaction (_begin)
        self._h5.close()
        self._h5 = None
        self._jf.commit()
        self._jf = None

    def _abort(self) -> None:
        if self._h5 is not None:
            try:
                self._h5.close()
            except Exception:  # the rollback below restores the bytes regardless  # noqa: BLE001
                pass
            self._h5 = None
        if self._jf is not None:
            self._jf.rollback()
            self._jf = None

    def _set_status(self, status: str) -> None:
        f = self._begin()
        try:
            f.attrs["writer_status"] = status
        except BaseException:
            self._abort()
            raise
        self._commit()

    # ---------------------------------------------------------------- episode API
    @property
    def recording(self) -> bool:
        """Whether an episode is open."""
        return self._ep is not None

    @property
    def total_episodes(self) -> int:
        """The number of committed episodes."""
        return self._n_episodes

    @property
    def backlog(self) -> int:
        """Frames submitted to the encoders but not yet appended to the file."""
        return self.stats.frames_submitted - self.stats.frames_written

    def start_episode(self, seed: int | None = None, meta: Mapping[str, Any] | None = None) -> int:
        """Open the episode transaction; returns the episode index (N in /episodes/demo_N)."""
        self._check_open()
        if self._ep is not None:
            raise EpisodeStateError("an episode is already recording; end or discard it first")
        f = self._begin()
        a = f.attrs
        self._ep = _Episode(
            int(a["total_episodes"]), int(a["total_observations"]), int(a["total_transitions"]), seed, meta
        )
        # Specs fixed by earlier episodes, cached so the caller's thread never waits on HDF5.
        self._state_spec = self._spec(schema.STATE)
        self._extra_spec = self._spec(schema.EXTRA)
        self._action_shape = f[schema.ACTIONS].shape[1:] if schema.ACTIONS in f else None
        self._error = None
        self._obs_written = 0
        self._sink = threading.Thread(target=self._sink_loop, name="rgbd-sink", daemon=True)
        self._sink.start()
        return self._ep.index

    def add_observation(self, rgb: np.ndarray, depth: np.ndarray, state: Mapping[str, np.ndarray] | None = None) -> int:
        """Queue one observation (RGB uint8 HxWx3|4; depth float metres or uint16 mm, HxW[x1]).

        Returns its index within the episode. Blocks (counted in ``stats``) while ``queue_size``
        frames are in flight.
        """
        ep = self._require_episode()
        self._raise_sink_error()
        c = self.cfg
        problem = codecs.depth_profile_problem(c.depth_codec)  # here, not as an encoder thread's failure
        if problem:
            raise RgbdError(problem)
        rgb = np.asarray(rgb)
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] not in (3, 4):
            raise SchemaError(f"rgb must be uint8 HxWx3 (or x4), got {rgb.dtype} {rgb.shape}")
        if rgb.shape[:2] != (c.height, c.width):
            raise SchemaError(f"rgb is {rgb.shape[1]}x{rgb.shape[0]}, camera is configured {c.width}x{c.height}")
        depth = np.asarray(depth)
        if depth.ndim == 3 and depth.shape[2] == 1:
            depth = depth[:, :, 0]
        if depth.ndim != 2 or depth.shape != (c.height, c.width):
            raise SchemaError(f"depth must be HxW ({c.height}x{c.width}) like rgb, got {depth.shape}")
        if not (depth.dtype == np.uint16 or np.issubdtype(depth.dtype, np.floating)):
            raise SchemaError(f"depth must be float metres or uint16 millimetres, got {depth.dtype}")
        state_rows = self._check_rows("state", state or {}, ep.states, self._state_spec, ep.n_obs)
        rgb_c = np.ascontiguousarray(rgb[:, :, :3])
        depth_c = depth.copy()
        self._acquire_slot()
        for k, v in state_rows.items():
            ep.states.setdefault(k, []).append(v)
        self._pending.put(self._pool.submit(_encode_job, rgb_c, depth_c, c))
        return self._submitted(ep)

    def add_encoded_observation(
        self, rgb_jpeg: EncodedPayload, depth_encoded: EncodedPayload, state: Mapping[str, np.ndarray] | None = None
    ) -> int:
        """Queue an observation already compressed with this file's codecs: stored as given, no re-encoding.

        Bytes or uint8 arrays, e.g. rows copied from a staged file. The JPEG/JP2 headers must match the camera size and
        the depth codestream the configured profile. Same ordering and back-pressure as ``add_observation``.
        """
        ep = self._require_episode()
        self._raise_sink_error()
        c = self.cfg
        payloads = []
        for kind, data in (("rgb", rgb_jpeg), ("depth", depth_encoded)):
            raw = (
                bytes(data)
                if isinstance(data, (bytes, bytearray, memoryview))
                else np.asarray(data, np.uint8).tobytes()
            )
            try:
                size = codecs.probe(raw, kind)
                if kind == "depth" and codecs.jp2_profile(raw) != c.depth_codec:
                    raise ValueError(f"codestream is {codecs.jp2_profile(raw)}, the file uses {c.depth_codec}")
                if kind == "depth" and (problem := codecs.codestream_problem(codecs.jp2_codestream(raw), *size[::-1])):
                    raise ValueError(f"codestream is broken: {problem}")
            except Exception as e:  # whatever the codec raises rejects the payload  # noqa: BLE001
                raise SchemaError(f"encoded {kind} payload rejected: {e}") from None
            if size != (c.width, c.height):
                raise SchemaError(f"encoded {kind} payload is {size[0]}x{size[1]}, camera is {c.width}x{c.height}")
            payloads.append(raw)
        state_rows = self._check_rows("state", state or {}, ep.states, self._state_spec, ep.n_obs)
        done: cf.Future[_Encoded] = cf.Future()
        done.set_result((payloads[0], payloads[1], 0.0))
        self._acquire_slot()
        for k, v in state_rows.items():
            ep.states.setdefault(k, []).append(v)
        self._pending.put(done)
        return self._submitted(ep)

    def _submitted(self, ep: _Episode) -> int:
        self.stats.frames_submitted += 1
        self.stats.max_backlog = max(self.stats.max_backlog, self.backlog)
        ep.n_obs += 1
        return ep.n_obs - 1

    def _acquire_slot(self) -> None:
        """Bounded pipeline: block (counted in stats) while queue_size frames are in flight."""
        if not self._slots.acquire(blocking=False):
            self.stats.backpressure_waits += 1
            t0 = time.perf_counter()
            while not self._slots.acquire(timeout=0.5):
                self._raise_sink_error()
            self.stats.backpressure_wait_s += time.perf_counter() - t0

    def add_transition(
        self,
        action: np.ndarray,
        reward: float,
        terminal: bool = False,
        timeout: bool = False,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> int:
        """Record the transition from observation t (already added) to t+1. Returns t."""
        ep = self._require_episode()
        t = len(ep.actions)
        if t >= ep.n_obs:
            raise EpisodeStateError(f"transition {t} needs observation {t} first (episode has {ep.n_obs})")
        a = np.asarray(action)
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise SchemaError(f"action must be numeric, got {a.dtype}")
        a = a.astype(np.float32)
        if not np.all(np.isfinite(a)):
            raise SchemaError("action contains non-finite values")
        spec = self._action_shape if self._action_shape is not None else (ep.actions[0].shape if ep.actions else None)
        if spec is not None and a.shape != tuple(spec):
            raise SchemaError(f"action shape {a.shape} differs from {tuple(spec)} used in this file")
        r = np.float32(reward)
        if np.ndim(reward) != 0 or not np.isfinite(r):
            raise SchemaError(f"reward must be a finite scalar, got {reward!r}")
        extra_rows = self._check_rows("extra", extras or {}, ep.extras, self._extra_spec, t)
        ep.actions.append(a)
        ep.rewards.append(r)
        ep.terminals.append(bool(terminal))
        ep.timeouts.append(bool(timeout))
        for k, v in extra_rows.items():
            ep.extras.setdefault(k, []).append(v)
        return t

    def end_episode(self, success: bool | None = None, meta: Mapping[str, Any] | None = None) -> dict:
        """Commit the episode. Needs observations == transitions + 1 >= 2, else EpisodeStateError (episode stays open).

        ``meta``: more attrs of ``/episodes/demo_N`` known only at the end (an outcome label, the
        integrity verdict), stored like ``start_episode``'s (non-scalars as JSON).

        The last transition always ends the episode: if the caller flagged neither terminal nor
        timeout on it, it is stored as a timeout (truncation by the recorder, not a real terminal).
        """
        ep = self._require_episode()
        T = len(ep.actions)
        if T == 0 or ep.n_obs != T + 1:
            raise EpisodeStateError(
                f"episode has {ep.n_obs} observations and {T} transitions; "
                f"need observations == transitions + 1 with at least one transition"
            )
        self._drain()
        self._raise_sink_error()
        truncated = not (ep.terminals[-1] or ep.timeouts[-1])
        if truncated:
            ep.timeouts[-1] = True
        if meta:
            ep.meta = {**ep.meta, **meta}
        try:
            summary = self._write_episode(ep, success, truncated)
            self._commit()
        except BaseException:
            self._abort()
            self._ep = None
            raise
        self._ep = None
        self._n_episodes = ep.index + 1
        self.stats.episodes_committed += 1
        return summary

    def update_episode_attrs(self, index: int, attrs: Mapping[str, Any]) -> None:
        """Set attrs of committed episode ``index`` (``/episodes/demo_N``; a label given after the save).

        One journaled transaction, under the writer's lock like every other change of the file. The layout attrs
        (offsets, counts, times) cannot be set this way.
        """
        self._check_open()
        if self._ep is not None:
            raise EpisodeStateError("end or discard the episode in flight before labelling a saved one")
        if not 0 <= index < self._n_episodes:
            raise EpisodeStateError(f"no committed episode {index} (the file has {self._n_episodes})")
        layout = {
            "num_samples",
            "num_observations",
            "obs_offset",
            "transition_offset",
            "start_time_ns",
            "end_time_ns",
            "truncated",
        }
        bad = sorted(set(attrs) & layout)
        if bad:
            raise SchemaError(f"update_episode_attrs: {bad} are layout attrs")
        f = self._begin()
        try:
            f[f"episodes/demo_{index}"].attrs.update({k: _as_attr(v) for k, v in attrs.items()})
        except BaseException:
            self._abort()
            raise
        self._commit()

    def discard_episode(self) -> None:
        """Drop the episode in flight: its frames are rolled back out of the file."""
        self._require_episode()
        self._drain(ignore_errors=True)
        self._abort()
        self._ep = None
        self._error = None
        self.stats.episodes_discarded += 1

    def delete_last_episode(self) -> int:
        """Remove the last committed episode (one journaled transaction); returns its index.

        Every dataset is cut back to the previous episode's end. HDF5 does not return the freed
        payload space to the file system; the next episodes simply follow.
        """
        self._check_open()
        if self._ep is not None:
            raise EpisodeStateError("end or discard the episode in flight before deleting the last one")
        if self._n_episodes == 0:
            raise EpisodeStateError("the file has no episode to delete")
        f = self._begin()
        try:
            e = int(f.attrs["total_episodes"]) - 1
            o0 = int(f["index/obs_offsets"][e])
            t0 = int(f["index/transition_offsets"][e])
            cut = {schema.RGB: o0, schema.DEPTH: o0}
            cut.update({f"{schema.STATE}/{k}": o0 for k in f[schema.STATE]})
            cut.update({f"transitions/{k}": t0 for k, v in f["transitions"].items() if isinstance(v, h5py.Dataset)})
            if schema.EXTRA in f:
                cut.update({f"{schema.EXTRA}/{k}": t0 for k in f[schema.EXTRA]})
            cut.update({f"index/{k}": t0 for k in schema.PER_TRANSITION_INDEX})
            cut.update({f"index/{k}": e for k in schema.PER_EPISODE_INDEX})
            for path, n in cut.items():
                ds = f[path]
                ds.resize((n, *ds.shape[1:]))
            del f[f"episodes/demo_{e}"]
            f.attrs["total_episodes"] = e
            f.attrs["total_transitions"] = t0
            f.attrs["total_observations"] = o0
            f["data"].attrs["total"] = t0
        except BaseException:
            self._abort()
            raise
        self._commit()
        self._n_episodes = e
        return e

    def close(self) -> None:
        """Discard an unfinished episode, validate, and mark the file complete (or failed)."""
        if self._closed:
            return
        try:
            if self._ep is not None:
                log.warning("%s: closing with an episode in flight; discarding it", self.path)
                self.discard_episode()
            self._pool.shutdown(wait=True)
            self._set_status("closing")
            from .validate import validate_file  # where used: see above

            problems = [p for p in validate_file(self.path) if not p.startswith("writer_status")]
            self._set_status("failed" if problems else "complete")
            if problems:
                raise FileStateError(f"{self.path} failed validation on close: " + "; ".join(problems[:5]))
        finally:
            self._closed = True
            self._release_lock()

    def __enter__(self) -> RgbdWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeStateError("writer is closed")

    def _require_episode(self) -> _Episode:
        self._check_open()
        if self._ep is None:
            raise EpisodeStateError("no episode is recording; call start_episode() first")
        return self._ep

    def _spec(self, group: str) -> dict | None:
        """{name: (dtype, row_shape)} fixed by the file, or None while nothing has fixed it yet."""
        assert self._h5 is not None  # the file is open while an episode records
        g = self._h5.get(group)
        if g is not None and len(g):
            return {k: (g[k].dtype, g[k].shape[1:]) for k in g}
        return None if self._h5.attrs["total_episodes"] == 0 else {}

    def _check_rows(
        self, what: str, rows: Mapping[str, np.ndarray], seen: dict, file_spec: dict | None, n: int
    ) -> dict:
        out = {}
        for k, v in rows.items():
            v = np.array(v)
            if not (np.issubdtype(v.dtype, np.number) or v.dtype == np.bool_):
                raise SchemaError(f"{what} {k!r} must be numeric, got {v.dtype}")
            if np.issubdtype(v.dtype, np.floating) and not np.all(np.isfinite(v)):
                raise SchemaError(f"{what} {k!r} contains non-finite values")
            out[k] = v
        if file_spec is not None:
            spec = file_spec
        elif n > 0:
            spec = {k: (vals[0].dtype, vals[0].shape) for k, vals in seen.items()}
        else:
            spec = None
        if spec is not None:
            if set(out) != set(spec):
                raise SchemaError(f"{what} keys {sorted(out)} differ from {sorted(spec)} used before")
            for k, v in out.items():
                dt, shape = spec[k]
                if v.shape != tuple(shape):
                    raise SchemaError(f"{what} {k!r} has shape {v.shape}, expected {tuple(shape)}")
                if not np.can_cast(v.dtype, dt, casting="same_kind"):
                    raise SchemaError(f"{what} {k!r} has dtype {v.dtype}, expected {dt}")
                out[k] = v.astype(dt)
        return out

    def _raise_sink_error(self) -> None:
        if self._error is not None:
            raise RgbdError(f"encoding/writing failed; discard the episode: {self._error!r}") from self._error

    def _drain(self, ignore_errors: bool = False) -> None:
        if self._sink is not None:
            self._pending.put(None)
            self._sink.join()
            self._sink = None
        if not ignore_errors:
            self._raise_sink_error()

    def _sink_loop(self) -> None:
        """Append encoded frames in submission order, in small batches."""
        f, ep = self._h5, self._ep
        assert f is not None and ep is not None  # started by start_episode, joined before it ends
        rgb_ds, depth_ds = f[schema.RGB], f[schema.DEPTH]
        base = ep.obs_offset
        batch: list[_Encoded] = []
        stop = False
        while not stop:
            item = self._pending.get()
            if item is None:
                stop = True
            else:
                try:
                    if self._error is None:
                        batch.append(item.result())
                except BaseException as e:  # surfaced to the caller by _raise_sink_error  # noqa: BLE001
                    self._error = e
                    batch = []
                if self._error is not None:
                    self.stats.frames_written += 1
                    self._slots.release()
                    continue
            if batch and (stop or len(batch) >= _SINK_BATCH or self._pending.empty()):
                try:
                    n0 = base + self._obs_written
                    k = len(batch)
                    for ds, payloads in ((rgb_ds, [b[0] for b in batch]), (depth_ds, [b[1] for b in batch])):
                        ds.resize((n0 + k,))
                        for i, payload in enumerate(payloads):  # row by row: equal-length rows must not broadcast
                            ds[n0 + i] = np.frombuffer(payload, dtype=np.uint8)
                    self.stats.encode_s += sum(b[2] for b in batch)
                    self._obs_written += k
                except BaseException as e:  # surfaced to the caller by _raise_sink_error  # noqa: BLE001
                    self._error = e
                for _ in batch:
                    self.stats.frames_written += 1
                    self._slots.release()
                batch = []

    def _write_episode(self, ep: _Episode, success: bool | None, truncated: bool) -> dict:
        f = self._h5
        assert f is not None  # in the episode's transaction
        T = len(ep.actions)
        n_obs = ep.n_obs
        o0, t0, e = ep.obs_offset, ep.tr_offset, ep.index
        if self._obs_written != n_obs or f[schema.RGB].shape[0] != o0 + n_obs:
            raise RgbdError(f"sink wrote {self._obs_written} frames, expected {n_obs}")

        def append(group_path: str, name: str, values: ArrayLike, dtype: DTypeLike | None = None) -> None:
            rows = np.asarray(values) if dtype is None else np.asarray(values, dtype=dtype)
            g = f.require_group(group_path)
            if name not in g:
                self._create_numeric(g, name, rows.shape[1:], rows.dtype)
            ds = g[name]
            n = ds.shape[0]
            ds.resize((n + len(rows), *ds.shape[1:]))
            ds[n:] = rows

        for k, vals in ep.states.items():
            append(schema.STATE, k, np.stack(vals))
        append(schema.TRANSITIONS, "actions", np.stack(ep.actions), np.float32)
        append(schema.TRANSITIONS, "rewards", ep.rewards, np.float32)
        terminals = np.asarray(ep.terminals, dtype=bool)
        timeouts = np.asarray(ep.timeouts, dtype=bool)
        append(schema.TRANSITIONS, "dones", terminals | timeouts)
        append(schema.TRANSITIONS, "terminals", terminals)
        append(schema.TRANSITIONS, "timeouts", timeouts)
        for k, vals in ep.extras.items():
            append(schema.EXTRA, k, np.stack(vals))
        j = np.arange(T, dtype=np.int64)
        append("index", "obs_index", o0 + j)
        append("index", "next_obs_index", o0 + j + 1)
        append("index", "episode_id", np.full(T, e, dtype=np.int64))
        append("index", "episode_transition_index", j)
        append("index", "episode_lengths", np.array([T], dtype=np.int64))
        append("index", "obs_offsets", np.array([o0], dtype=np.int64))
        append("index", "transition_offsets", np.array([t0], dtype=np.int64))
        demo = f.require_group("episodes").create_group(f"demo_{e}")
        da: dict[str, schema.AttrValue | np.generic]
        da = {
            "num_samples": T,
            "num_observations": n_obs,
            "obs_offset": o0,
            "transition_offset": t0,
            "start_time_ns": ep.start_ns,
            "end_time_ns": time.time_ns(),
            "truncated": truncated,
        }
        if success is not None:
            da["success"] = bool(success)
        if ep.seed is not None:
            da["seed"] = int(ep.seed)
        for k, v in ep.meta.items():
            if k not in da:
                da[k] = _as_attr(v)
        demo.attrs.update(da)
        a = f.attrs
        if e == 0:
            a["camera_width"], a["camera_height"], a["camera_channels"] = self.cfg.width, self.cfg.height, 3
        a["total_episodes"] = e + 1
        a["total_transitions"] = t0 + T
        a["total_observations"] = o0 + n_obs
        f["data"].attrs["total"] = t0 + T
        return {
            "episode_index": e,
            "num_samples": T,
            "num_observations": n_obs,
            "obs_offset": o0,
            "transition_offset": t0,
            "success": success,
            "truncated": truncated,
            "backpressure_waits": self.stats.backpressure_waits,
        }

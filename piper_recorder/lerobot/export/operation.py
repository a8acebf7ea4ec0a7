"""Export one of our LeRobot v2.0/v2.1 roots to LeRobot v2.1 or v3.0 (``piper-export``).

``export(root, to, out)`` is the whole operation; ``export.v21`` and ``export.v30`` build the
target layouts. What this module owns:

* **Reading the source** (``open_source``): only roots this project writes (our path templates,
  ``meta/episodes.jsonl``, ``modality.json``, the bookkeeping columns); every episode must have
  every camera. Anything else is an ``ExportError`` (the CLI exits 2).
* **Appending**: the output's ``meta/piper_export.json`` lists what was exported, with a
  fingerprint of each source episode (its episodes.jsonl line, file sizes, a hash of its parquet
  and of both ends of each mp4). A re-run checks that the exported episodes are unchanged in the
  source and exports only the new ones; a source that lost or changed an exported episode is an
  error (export to a fresh directory).
* **Crash safety**: the new state is built in ``.<out>.export-staging`` next to the output (files
  kept from the previous export are hard links, never written to), fsynced, and swapped with the
  output in one ``renameat2(RENAME_EXCHANGE)``; the old tree is then deleted. A killed export leaves
  the previous export untouched (the next run deletes the staging tree); a reader opening the output
  at any instant finds one complete export (where the filesystem cannot exchange, two renames leave a
  moment without the directory, never a mixed one; the next run restores it if killed in between).
  An append never rewrites a payload file of the previous export (v2.1: one file per episode; v3.0:
  new episodes go to new files), so a reader that loaded the previous meta before the swap keeps
  reading the same bytes after it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import av
import numpy as np
import pyarrow as pa

from piper_recorder import __version__
from piper_recorder.storage.outpaths import located, nested
from piper_recorder.storage.sidelock import SideLock

from ..format import fsutil, layout
from ..format.errors import DatasetError
from ..format.features import BOOKKEEPING
from ..format.raw_read import read_json
from ..format.root import Root

T = TypeVar("T")

TARGETS = ("v2.1", "v3.0")
SOURCE_VERSIONS = ("v2.0", "v2.1")
# meta files carried along unchanged (small: copied, since the recorder may rewrite them)
CARRIED_META = (layout.MODALITY, layout.COLLECTION_META, layout.SESSIONS, layout.RELATIVE_STATS, layout.DELTA_STATS)
_HASH_SPAN = 256 * 1024  # bytes hashed at each end of an mp4 (covers the moov box either way)


class ExportError(DatasetError):
    """The source cannot be exported as asked (the message says why); the output is unchanged."""


@dataclass
class Source:
    """A validated source root: its meta (``root.Root``; ``info``, ``episodes``, ``tasks`` as the documents
    the exports copy from) and the per-episode payload paths."""

    root: Path
    info: dict
    episodes: list[dict]
    tasks: list[dict]
    video_keys: list[str]
    meta: Root

    @property
    def version(self) -> str:
        return self.meta.info.codebase_version

    @property
    def fps(self) -> int:
        return int(self.meta.info.fps)

    def data_rel(self, i: int) -> str:
        return self.meta.info.data_relpath(i)

    def video_rel(self, i: int, key: str) -> str:
        return self.meta.info.video_relpath(i, key)

    def extras_rel(self, i: int) -> str:
        return layout.extras_relpath(i)

    def own_episode_stats(self) -> dict[int, dict]:
        """A v2.1 source's own meta/episodes_stats.jsonl ``stats`` by episode index (else empty)."""
        path = self.root / layout.EPISODES_STATS
        if self.version != "v2.1" or not path.is_file():
            return {}
        try:
            return {int(line["episode_index"]): line["stats"] for line in fsutil.read_jsonl(path)}
        except (ValueError, KeyError, TypeError) as e:
            raise ExportError(f"{path}: unreadable ({e})") from None

    def cameras_without_stats(self) -> list[str]:
        """Cameras the source's stats.json has no entry for (roots recorded before camera stats)."""
        path = self.root / layout.STATS
        have = read_json(path) if path.is_file() else {}
        return [k for k in self.video_keys if k not in have]

    def episode_stats(self, i: int, own: dict[int, dict],
                      cameras: Sequence[str] = ()) -> tuple[dict, dict[str, tuple[np.ndarray, int]]]:
        """Episode ``i``'s LeRobot v2.1 stats and, for ``cameras``, its (histograms, frames) sample.

        Stats: the source's own line (``own``), else ``episode_stats.root_episode_stats`` (the
        recorder's per-episode record, else parquet + decoded video sample). Histograms: the
        record's, else decoded once (``episode_stats.decode_sample``) and then also used for the line.
        """
        from ..format import episode_stats as es

        rec = es.load_record(self.root / layout.record_relpath(i)) or {}
        images = rec.get("images") or {}
        hists, decoded = {}, {}
        for key in cameras:
            if key in images:
                hists[key] = (np.asarray(images[key]["hist"], np.int64), int(images[key]["frames"]))
            else:
                hists[key] = decoded[key] = es.decode_sample(self.root / self.video_rel(i, key))
        if i in own:
            return own[i], hists
        if decoded and set(decoded) == set(self.video_keys):  # no record: one decode serves both
            columns = es.read_columns(self.root / self.data_rel(i), self.info)
            stats = {k: es.vector_stats(columns[k]) if k in columns else es.hist_stats(*decoded[k])
                     for k in self.info["features"] if k in columns or k in decoded}  # info.json order
            return es.to_jsonable(stats), hists
        return es.root_episode_stats(self.root, self.info, i), hists

    def fingerprint(self, i: int) -> str:
        """Changes whenever episode ``i``'s record, parquet or any of its videos change."""
        h = hashlib.sha256(json.dumps(self.episodes[i], sort_keys=True).encode())
        data = self.root / self.data_rel(i)
        h.update(data.read_bytes())
        for key in self.video_keys:
            path = self.root / self.video_rel(i, key)
            size = path.stat().st_size
            h.update(f"{key}:{size}".encode())
            with open(path, "rb") as f:
                h.update(f.read(_HASH_SPAN))
                if size > _HASH_SPAN:
                    f.seek(max(_HASH_SPAN, size - _HASH_SPAN))
                    h.update(f.read())
        return h.hexdigest()


def open_source(root: str | os.PathLike, model: Root | None = None) -> Source:
    """Read and check a root written by this project (``model``: its meta, when already read);
    ``ExportError`` for anything else."""
    root = Path(root)
    if model is None:
        if not Root.is_root(root):
            raise ExportError(f"{root}: no {layout.INFO}; not a LeRobot root")
        try:
            model = Root.open(root)
        except DatasetError as exc:
            raise ExportError(str(exc)) from None
    info = model.info
    if info.codebase_version not in SOURCE_VERSIONS:
        raise ExportError(f"{root}: codebase_version {info.raw.get('codebase_version')!r} cannot be exported "
                          f"(piper-export reads {', '.join(SOURCE_VERSIONS)})")
    keys = list(info.video_keys)
    ours = (info.data_path == layout.DATA_PATH
            and info.video_path in ((layout.VIDEO_PATH,) if keys else (None, layout.VIDEO_PATH))
            and all(k in info.features and info.features[k].dtype == d for k, d in BOOKKEEPING.items())
            and model.modality is not None
            and (root / layout.EPISODES).is_file()
            and (root / layout.TASKS).is_file()
            and isinstance(info.raw.get("fps"), int))
    if not ours:
        raise ExportError(f"{root}: not a root written by piper_recorder (its path templates, "
                          f"bookkeeping columns, {layout.MODALITY}, {layout.EPISODES} or {layout.TASKS} differ)")
    bad_keys = [k for k in keys if not k.startswith(layout.VIDEO_KEY_PREFIX)]
    if bad_keys:
        raise ExportError(f"{root}: video features {bad_keys} are not {layout.VIDEO_KEY_PREFIX}<camera>")
    cams = set(info.cameras)
    task_indices = {t.index for t in model.tasks}
    src = Source(root, info.to_json(), [e.to_json() for e in model.episodes], [t.to_json() for t in model.tasks],
                 keys, model)
    for i, e in enumerate(model.episodes):
        if e.index != i:
            raise ExportError(f"{root}: {layout.EPISODES} line {i + 1} has episode_index "
                              f"{e.index}, expected {i}")
        if (-1 if e.task_index is None else e.task_index) not in task_indices:
            raise ExportError(f"{root}: episode {i} has task_index {e.extras.get('task_index')} "
                              f"missing from {layout.TASKS}")
        lengths = e.extras.get("video_frame_lengths")
        if keys and (not isinstance(lengths, Mapping) or set(lengths) != cams):
            have = sorted(lengths) if isinstance(lengths, Mapping) else None
            raise ExportError(f"{root}: episode {i} has cameras {have}, the root declares "
                              f"{sorted(cams)}; cameras must be the same in every episode")
        missing = [r for r in [src.data_rel(i)] + [src.video_rel(i, k) for k in keys]
                   if not (root / r).is_file()]
        if missing:
            raise ExportError(f"{root}: episode {i} is missing {missing}")
    return src


# ---- state of a previous export -------------------------------------------------------------
@dataclass
class State:
    """``meta/piper_export.json``: what the output holds (plus layout-specific ``extra``)."""

    to: str
    source: str
    fingerprints: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"tool": "piper-export", "version": __version__, "to": self.to, "source": self.source,
                "episodes": len(self.fingerprints), "fingerprints": self.fingerprints,
                "extra": self.extra}


@dataclass
class CameraTotals:
    """Summed sample histograms per camera, for stats.json camera entries the source lacks
    (``episode_stats.image_entry``: mean/std/min/max/q01/q99); kept in the export state so a re-run
    only adds the new episodes' samples."""

    hist: dict[str, np.ndarray] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def from_json(obj: dict | None) -> CameraTotals:
        t = CameraTotals()
        for key, v in (obj or {}).items():
            t.hist[key] = np.asarray(v["hist"], np.int64)
            t.frames[key] = int(v["frames"])
        return t

    def to_json(self) -> dict:
        return {k: {"hist": self.hist[k].tolist(), "frames": self.frames[k]} for k in self.hist}

    def add(self, hists: dict[str, tuple[np.ndarray, int]]) -> None:
        for key, (h, n) in hists.items():
            self.hist[key] = self.hist.get(key, np.zeros((3, 256), np.int64)) + np.asarray(h, np.int64)
            self.frames[key] = self.frames.get(key, 0) + int(n)

    def entries(self) -> dict[str, dict]:
        from ..format.episode_stats import image_entry, to_jsonable

        return {k: to_jsonable({k: image_entry(self.hist[k], self.frames[k])})[k] for k in self.hist}


def camera_totals(src: Source, state: State | None, own: dict[int, dict]) -> CameraTotals:
    """Totals of the exported episodes for the cameras without stats (recomputed if the state lacks them)."""
    cams = src.cameras_without_stats()
    totals = CameraTotals.from_json((state.extra if state else {}).get("camera_hist"))
    totals.hist = {k: v for k, v in totals.hist.items() if k in cams}
    totals.frames = {k: v for k, v in totals.frames.items() if k in cams}
    lacking = [k for k in cams if k not in totals.hist]
    if state is not None and lacking:
        for i in range(len(state.fingerprints)):
            totals.add(src.episode_stats(i, own, lacking)[1])
    return totals


def load_state(out: Path, to: str) -> State | None:
    """The previous export's state; None for a missing or empty ``out``."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a directory")
    path = out / layout.EXPORT_STATE
    if not path.is_file():
        if any(out.iterdir()):
            raise ExportError(f"{out} is not empty and holds no piper-export output "
                              f"({layout.EXPORT_STATE} missing); choose an empty or new directory")
        return None
    try:
        raw = read_json(path)
        state = State(raw["to"], raw["source"], list(raw["fingerprints"]), dict(raw.get("extra") or {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{path} is unreadable ({e}); export to a fresh directory") from None
    if state.to != to:
        raise ExportError(f"{out} holds a {state.to} export; cannot add {to} episodes to it")
    return state


def check_prefix(src: Source, state: State) -> None:
    """The exported episodes must still be the source's first episodes, unchanged."""
    n = len(state.fingerprints)
    if n > len(src.episodes):
        raise ExportError(f"the export holds {n} episodes but {src.root} has only "
                          f"{len(src.episodes)} (episodes deleted since); export to a fresh directory")
    for i in range(n):
        if src.fingerprint(i) != state.fingerprints[i]:
            raise ExportError(f"episode {i} of {src.root} changed since it was exported "
                              "(re-recorded, repaired or edited); export to a fresh directory")


# ---- files ----------------------------------------------------------------------------------
def link_or_copy(src: Path, dst: Path) -> None:
    """Hard link ``src`` at ``dst`` (same filesystem), else copy it; never re-encodes anything."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dst)


def link_tree(src: Path, dst: Path, skip: Callable[[str], bool] = lambda rel: False) -> None:
    """Hard-link every file under ``src`` into ``dst`` (relative paths kept) except skipped ones."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_file() and not skip(rel):
            link_or_copy(path, dst / rel)


def write_file(path: Path, data: bytes) -> None:
    """A new file at ``path`` (replacing a hard link there by a new inode, never writing into it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + fsutil.TMP_SUFFIX)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    write_file(path, fsutil.json_bytes(obj))


def carry_meta(src: Source, staging: Path) -> None:
    for rel in CARRIED_META:
        path = src.root / rel
        if path.is_file():
            write_file(staging / rel, path.read_bytes())


# ---- commit ---------------------------------------------------------------------------------
def _paths(out: Path) -> tuple[Path, Path, Path]:
    return (out.with_name(f".{out.name}.export-staging"), out.with_name(f".{out.name}.export-old"),
            out.with_name(f".{out.name}.export-lock"))


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            fsutil.fsync_file(path)
    for d in sorted({p for p in root.rglob("*") if p.is_dir()} | {root}, key=lambda p: -len(p.parts)):
        fsutil.fsync_dir(d)


_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    AT_FDCWD = -100
    res = fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if res == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def recover(out: Path) -> None:
    """Undo what a killed run left: a half-built staging tree, or an output moved aside."""
    staging, old, _ = _paths(out)
    if old.exists():
        if out.exists():
            shutil.rmtree(old)
        else:
            os.rename(old, out)  # killed between the two fallback renames
    if staging.exists():
        shutil.rmtree(staging)


def commit(staging: Path, out: Path) -> None:
    """Make the fully written ``staging`` tree the output (see the module docstring)."""
    _, old, _ = _paths(out)
    _fsync_tree(staging)
    if not out.exists():
        os.rename(staging, out)
    elif exchange(staging, out):
        shutil.rmtree(staging)  # now the previous export
    else:
        os.rename(out, old)
        os.rename(staging, out)
        shutil.rmtree(old)
    fsutil.fsync_dir(out.parent)


class _Lock(SideLock):
    """One export per output directory at a time (``.<name>.export-lock``, removed when the run ends)."""

    def __init__(self, path: Path):
        super().__init__(path, lambda: ExportError(f"another piper-export is writing {path.parent}"))


# ---- the operation --------------------------------------------------------------------------
@dataclass
class ExportResult:
    to: str
    out: Path
    episodes: int  # total in the output
    added: int  # exported by this run
    frames: int  # rows in the output
    seconds_of_data: float  # added rows / fps


def export(root: str | os.PathLike, to: str, out: str | os.PathLike, progress: bool = False,
           **options: Any) -> ExportResult:
    """Export ``root`` (ours, v2.0 or v2.1) as LeRobot ``to`` ("v2.1" or "v3.0") into ``out``.

    A re-run into the same ``out`` appends the episodes added to ``root`` since; ``options`` go to
    the layout builder (v3.0: ``data_files_size_in_mb``, ``video_files_size_in_mb``). Raises
    ``ExportError`` for anything it cannot express; the output is then unchanged.
    """
    if to not in TARGETS:
        raise ExportError(f"--to {to!r}: must be one of {', '.join(TARGETS)}")
    given = Path(out)
    root, out = Path(root).resolve(), located(given)
    if nested(given, root):   # symlinks resolved on both sides: --out Alink/v30 is inside A
        raise ExportError(f"--out {given} must be outside the source root {root} and not contain it "
                          f"(resolved: {given.resolve()})")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging, _, lock_path = _paths(out)
    lock = _Lock(lock_path)
    try:
        recover(out)
        src = open_source(root)
        if not src.episodes:
            raise ExportError(f"{root} has no saved episodes; nothing to export")
        state = load_state(out, to)
        if state is not None:
            check_prefix(src, state)
        done = len(state.fingerprints) if state else 0
        if state is not None and done == len(src.episodes):
            return ExportResult(to, out, done, 0, sum(int(e["length"]) for e in src.episodes), 0.0)
        if to == "v2.1":
            from .v21 import build
        else:
            from .v30 import build
        staging.mkdir()
        try:
            new_state = build(src, state, out if state else None, staging, progress=progress, **options)
        except (av.FFmpegError, pa.ArrowException) as e:
            raise ExportError(f"{root}: a payload file cannot be read ({e})") from None
        new_state.fingerprints = (state.fingerprints if state else []) + [
            src.fingerprint(i) for i in range(done, len(src.episodes))]
        write_json(staging / layout.EXPORT_STATE, new_state.to_json())
        commit(staging, out)
        added = src.episodes[done:]
        return ExportResult(to, out, len(src.episodes), len(added),
                            sum(int(e["length"]) for e in src.episodes),
                            sum(int(e["length"]) for e in added) / src.fps)
    except BaseException:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        lock.close()


def iter_progress(items: Iterable[T], total: int, desc: str, enabled: bool) -> Iterator[T]:
    if not enabled:
        yield from items
        return
    from tqdm import tqdm

    with tqdm(items, total=total, desc=desc, unit="ep") as bar:
        yield from bar

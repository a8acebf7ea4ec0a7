"""Editing LeRobot v2.0 / v2.1 roots: the picked episodes go through ``LeRobotWriter.import_episode``.

A source is read with ``export.source.open_source`` (only roots this project writes: our path templates,
bookkeeping columns, every camera in every episode, files present), and its writer configuration
is rebuilt from ``info.json`` + ``modality.json`` and checked to reproduce both exactly, so the
output root is what the writer would have written had it recorded the picked episodes in this order:
episode, frame and global indices and task indices renumbered (tasks by first use), parquet rebuilt
with the writer's schema and metadata (values copied bit for bit), ``info.json``, ``tasks.jsonl``,
``stats.json`` and (v2.1) ``episodes_stats.jsonl`` recomputed by the writer from the rows and the
source episodes' sampled image histograms (its per-episode stats records; decoded from the mp4 only
where a record is missing). Videos and raw headset lines are hard links to the source files (copies
across file systems), never re-encoded; the writer moves them into place.

Provenance: the output's ``collection_sessions.jsonl`` holds every session record of every source,
in source order (``collection_meta.json`` the last one), and ``meta/dataset_edits.jsonl`` the
sources' own edit history plus one line for this edit: the operation, the sources, and for each
output episode the source and episode it came from.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from piper_recorder import __version__
from piper_recorder.lerobot.export.files import link_or_copy
from piper_recorder.lerobot.export.source import ExportError, Source, open_source
from piper_recorder.lerobot.format import episode_stats, fsutil, layout
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.format.features import BOOKKEEPING, COMBINED, FeatureSpec, Slice
from piper_recorder.lerobot.format.root import Root
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig, meta_builders
from piper_recorder.lerobot.writer.video_encoder import VideoConfig
from piper_recorder.names import IMAGES_PREFIX

from .common import TOOL, EditError, EpisodeInfo, Pick

CURATION_KEYS = ("outcome", "outcome_note", "verdict", "verdict_reasons")
INCOMPLETE = "data/INCOMPLETE.parquet"  # present in a staging root until its build is complete
_CODECS = {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1", "vp9": "libvpx-vp9"}


@dataclass
class LeRobotSource:
    """One source root: what ``export.source.open_source`` checked, plus the writer config it was written with."""

    src: Source
    cfg: WriterConfig
    modality: dict[str, Any]
    lock_fd: int | None

    @property
    def root(self) -> Path:
        """The source root."""
        return self.src.root

    @property
    def episodes(self) -> list[EpisodeInfo]:
        """The source's episodes as the edit plans them: task, length and curation fields."""
        return [
            EpisodeInfo(e.tasks[0], e.length, {k: e.extras[k] for k in CURATION_KEYS if k in e.extras})
            for e in self.src.meta.episodes
        ]

    def close(self) -> None:
        """Release the root's writer lock."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def is_root(path: Path) -> bool:
    """Whether ``path`` is a LeRobot root."""
    return Root.is_root(path)


def open_root(path: Path, lock: bool = True) -> LeRobotSource:
    """Open a source root; with ``lock``, hold its writer lock so no recorder changes it meanwhile."""
    lock_fd = None
    if lock:
        try:
            lock_fd = fsutil.lock_root(path, f"{path} is open in a writer (a recorder or another edit); stop it first")
        except PermissionError:
            lock_fd = None  # a read-only root cannot be written by anyone else either
        except DatasetError as e:
            raise EditError(str(e)) from None
    try:
        model = Root.open(path)  # the shapes of the meta files, checked before anything reads them
        for n, ep in enumerate(model.episodes, 1):
            if not ep.tasks or "task_index" not in ep.extras:
                raise EditError(f"{path / layout.EPISODES}: line {n} has no task")
        try:
            src = open_source(path, model)
        except ExportError as e:
            raise EditError(
                str(e).replace("cannot be exported", "cannot be edited").replace("piper-export reads", f"{TOOL} edits")
            ) from None
        assert model.modality is not None  # open_source refuses a root without one
        modality = model.modality.to_json()
        cfg = config_of(src, modality)
        return LeRobotSource(src, cfg, modality, lock_fd)
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise


def _guess_combined(key: str, names: tuple[str, ...], feats: dict[str, dict[str, Any]]) -> str | None:
    """The combined column (observation.state, action) whose element names hold this column's.

    For roots whose info.json does not record it (``meta.COMBINED_RECORD``): "arm_eef.qw" for observation.arm_eef's
    "qw"; the features check in ``config_of`` proves the guess.
    """
    part = key.split(".", 1)[-1]
    for combined in COMBINED:
        same_group = combined.split(".")[0] == key.split(".")[0]  # observation.* -> observation.state
        if same_group and names and f"{part}.{names[0]}" in (feats.get(combined, {}).get("names") or ()):
            return combined
    return None


def config_of(src: Source, modality: dict[str, Any]) -> WriterConfig:
    """The ``WriterConfig`` that writes exactly this root's info.json features and modality.json."""
    info = src.info
    feats: dict[str, dict[str, Any]] = info["features"]
    cameras: dict[str, CameraSpec] = {}
    codec, pix_fmt = "libx264", "yuv420p"
    for key in src.video_keys:
        vf = src.meta.info.features[key]
        cameras[layout.camera_of(key)] = CameraSpec(vf.shape[0], vf.shape[1])
        vinfo = vf.video or {}
        codec = _CODECS.get(str(vinfo.get("video.codec")), str(vinfo.get("video.codec", codec)))
        pix_fmt = str(vinfo.get("video.pix_fmt", pix_fmt))
    entries = [
        (group, name, e)
        for group in ("state", "action")
        for name, e in (modality.get(group) or {}).items()
        if isinstance(e, dict)
    ]
    rotation = next((str(e["rotation_type"]) for _, _, e in entries if "rotation_type" in e), "quat_wxyz")
    record = info.get(meta_builders.COMBINED_RECORD)
    recorded: dict[str, Any] | None = record if isinstance(record, dict) else None
    joined = set(COMBINED) | {str(v) for v in (recorded or {}).values()}  # combined columns, not split ones
    specs = []
    for key, f in feats.items():
        if f.get("dtype") == "video" or key in BOOKKEEPING or key in joined:
            continue
        slices: tuple[Slice, ...] = tuple(
            (name, int(e["start"]), int(e["end"]), "rotation_type" in e)
            for _, name, e in entries
            if e.get("original_key") == key
        )
        names = tuple(str(n) for n in f.get("names") or ())
        if recorded is None:
            joins = _guess_combined(key, names, feats)
        else:
            joins = None if recorded.get(key) is None else str(recorded[key])
        specs.append(FeatureSpec(key, names, slices, joins))
    combined = any(k in feats for k in joined)
    raw = any("raw_quest_lines" in e.extras for e in src.meta.episodes)
    try:
        cfg = WriterConfig(
            fps=int(src.meta.info.fps),
            robot_type=str(info.get("robot_type")),
            cameras=cameras,
            features=tuple(specs),
            video=VideoConfig(codec=codec, pix_fmt=pix_fmt),
            chunks_size=src.meta.info.chunks_size,
            save_raw_quest=raw,
            rotation_type=rotation,
            combined_columns=combined,
            lerobot_version=src.version,
        )
        cfg.validate()
    except (ValueError, TypeError, KeyError) as e:
        raise EditError(
            f"{src.root}: its {layout.INFO} and {layout.MODALITY} do not describe a writer configuration ({e})"
        ) from None
    want = meta_builders.features_json(cfg)
    if want != feats:
        diff = sorted(k for k in set(want) | set(feats) if want.get(k) != feats.get(k))
        raise EditError(
            f"{src.root}: {layout.INFO} features {diff} are not what the writer writes; cannot rebuild this root"
        )
    if meta_builders.modality_json(cfg) != modality:
        raise EditError(
            f"{src.root}: {layout.MODALITY} is not what the writer writes for its features; cannot rebuild this root"
        )
    return cfg


def differences(a: LeRobotSource, b: LeRobotSource) -> list[str]:
    """What keeps two roots from being merged (empty: they agree), each naming the values."""
    out: list[str] = []
    ia, ib = a.src.info, b.src.info
    for key, what in (("codebase_version", "lerobot_version"), ("robot_type", "robot type"), ("fps", "fps")):
        if ia.get(key) != ib.get(key):
            out.append(f"{what}: {ia.get(key)!r} vs {ib.get(key)!r}")
    ca, cb = sorted(a.cfg.cameras), sorted(b.cfg.cameras)
    if ca != cb:
        out.append(f"cameras: {ca} vs {cb}")
    fa, fb = ia["features"], ib["features"]
    for key in sorted(set(fa) | set(fb)):
        x, y = fa.get(key), fb.get(key)
        if x == y or (key.startswith(IMAGES_PREFIX) and (x is None or y is None)):
            continue
        if x is None or y is None:
            out.append(f"feature {key}: only in {'the first' if y is None else 'the second'}")
            continue
        if x.get("dtype") == "video":
            xi, yi = x.get("info") or {}, y.get("info") or {}
            out += [
                f"{key} {k}: {xi.get(k)!r} vs {yi.get(k)!r}"
                for k in sorted(set(xi) | set(yi))
                if xi.get(k) != yi.get(k)
            ]
            if x.get("shape") != y.get("shape") and not any(k in xi for k in ("video.height", "video.width")):
                out.append(f"{key} shape: {x.get('shape')} vs {y.get('shape')}")
        else:
            out += [
                f"feature {key} {k}: {x.get(k)!r} vs {y.get(k)!r}"
                for k in ("dtype", "shape", "names")
                if x.get(k) != y.get(k)
            ]
    if not out and a.modality != b.modality:
        out.append(f"{layout.MODALITY} differs (rotation_type or slices)")
    return out


# ---- building the output --------------------------------------------------------------------------
def _columns(table: pa.Table, keys: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for k in keys:
        col = table.column(k).combine_chunks()
        if isinstance(col.type, pa.FixedSizeListType):
            out[k] = col.flatten().to_numpy().reshape(len(col), col.type.list_size)
        else:
            out[k] = col.to_numpy().reshape(-1, 1)
    return out


def _images(src: Source, i: int) -> dict[str, tuple[np.ndarray, int]]:
    """The episode's sampled image histograms by camera from its stats record.

    Missing ones are decoded from the video by ``import_episode``, as the writer does.
    """
    rec = episode_stats.load_record(src.root / episode_stats.record_relpath(i)) or {}
    if rec.get("episode_index") != i:
        return {}
    prefix = layout.video_key("")
    out = {}
    for k, v in (rec.get("images") or {}).items():
        try:
            hist, frames = np.asarray(v["hist"], np.int64), int(v["frames"])
        except (KeyError, TypeError, ValueError):
            continue
        if k.startswith(prefix) and hist.shape == (3, 256) and frames > 0:
            out[k[len(prefix) :]] = (hist, frames)
    return out


def build(
    sources: list[LeRobotSource],
    picks: list[Pick],
    staging: Path,
    edit: dict[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Write the picked episodes, in order, as a new root at ``staging``; returns its totals."""
    cfg = sources[0].cfg
    keys = [f.key for f in cfg.features]
    work = staging / ".dsedit-import"
    marker = staging / INCOMPLETE
    with LeRobotWriter(staging, cfg) as w:
        # The writer commits episode by episode, so a killed build would leave a valid-looking root of
        # the first episodes: this file under data/ (where LeRobot loads every *.parquet, and which
        # piper-validate checks for strays) keeps it invalid until the build is complete.
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("partial output of a piper-dataset edit (in progress, or killed): not a dataset\n")
        for n, p in enumerate(picks):
            s = sources[p.source].src
            rec = {**s.episodes[p.episode], **dict(p.fields)}
            if p.fields and "outcome_note" not in dict(p.fields):
                rec.pop("outcome_note", None)  # a new label without a note replaces the old note too
            table = pq.read_table(s.root / s.data_rel(p.episode), columns=["timestamp", *keys])
            work.mkdir(exist_ok=True)
            videos = {}
            for key in s.video_keys:
                cam = key.removeprefix(IMAGES_PREFIX)
                videos[cam] = work / f"{cam}.mp4"
                link_or_copy(s.root / s.video_rel(p.episode, key), videos[cam])
            raw = s.root / s.extras_rel(p.episode)
            raw_tmp = None
            if raw.is_file():
                raw_tmp = work / "quest.jsonl"
                link_or_copy(raw, raw_tmp)
            w.import_episode(
                p.task,
                table.column("timestamp").to_numpy(),
                _columns(table, keys),
                videos,
                raw_tmp,
                rec,
                _images(s, p.episode),
            )
            shutil.rmtree(work, ignore_errors=True)
            if progress:
                progress(n + 1, len(picks))
        totals = {"episodes": w.total_episodes, "frames": w.total_frames}
    sessions: list[dict[str, Any]] = []
    edits: list[dict[str, Any]] = []
    for source in sources:
        sessions += fsutil.read_jsonl(source.root / layout.SESSIONS)
        edits += fsutil.read_jsonl(source.root / layout.DATASET_EDITS)
    edits.append(edit)
    if sessions:
        fsutil.atomic_write(staging / layout.SESSIONS, fsutil.jsonl_bytes(sessions))
        fsutil.atomic_write(staging / layout.COLLECTION_META, fsutil.json_bytes(sessions[-1]))
    fsutil.atomic_write(staging / layout.DATASET_EDITS, fsutil.jsonl_bytes(edits))
    (staging / fsutil.ROOT_LOCK).unlink(missing_ok=True)
    marker.unlink()
    return totals


def edit_record(op: str, sources: list[Path], picks: list[Pick], **extra: Any) -> dict[str, Any]:
    """This edit's line in ``meta/dataset_edits.jsonl``."""
    return {
        "tool": TOOL,
        "version": __version__,
        "operation": op,
        "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "sources": [str(p) for p in sources],
        "episodes_from": [[p.source, p.episode] for p in picks],
        **extra,
    }


def now() -> float:
    """The monotonic clock an edit times itself with."""
    return time.monotonic()

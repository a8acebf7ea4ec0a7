"""The source of an export (``open_source``): only roots this project writes.

Our path templates, ``meta/episodes.jsonl``, ``modality.json``, the bookkeeping columns, and every camera in
every episode; anything else is an ``ExportError`` (the CLI exits 2). Each episode's fingerprint (its
episodes.jsonl line, file sizes, a hash of its parquet and of both ends of each mp4) lets a re-run check that
what was exported is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format import fsutil, layout
from ..format.errors import DatasetError
from ..format.features import BOOKKEEPING
from ..format.raw_read import read_json
from ..format.root import Root

SOURCE_VERSIONS = ("v2.0", "v2.1")
_HASH_SPAN = 256 * 1024  # bytes hashed at each end of an mp4 (covers the moov box either way)


class ExportError(DatasetError):
    """The source cannot be exported as asked (the message says why); the output is unchanged."""


@dataclass
class Source:
    """A validated source root: its meta and the per-episode payload paths.

    ``meta`` is a ``root.Root``; its ``info``, ``episodes`` and ``tasks`` are the documents the exports copy from.
    """

    root: Path
    info: dict
    episodes: list[dict]
    tasks: list[dict]
    video_keys: list[str]
    meta: Root

    @property
    def version(self) -> str:
        """The source's ``codebase_version``."""
        return self.meta.info.codebase_version

    @property
    def fps(self) -> int:
        """The source's frame rate."""
        return int(self.meta.info.fps)

    def data_rel(self, i: int) -> str:
        """Episode ``i``'s parquet path, relative to the root."""
        return self.meta.info.data_relpath(i)

    def video_rel(self, i: int, key: str) -> str:
        """Episode ``i``'s mp4 path for camera ``key``, relative to the root."""
        return self.meta.info.video_relpath(i, key)

    def extras_rel(self, i: int) -> str:
        """Episode ``i``'s extras path, relative to the root."""
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

    def episode_stats(
        self, i: int, own: dict[int, dict], cameras: Sequence[str] = ()
    ) -> tuple[dict, dict[str, tuple[np.ndarray, int]]]:
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
            stats = {
                k: es.vector_stats(columns[k]) if k in columns else es.hist_stats(*decoded[k])
                for k in self.info["features"]
                if k in columns or k in decoded
            }  # info.json order
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
    """Read and check a root written by this project; ``ExportError`` for anything else.

    ``model`` is its meta, when already read.
    """
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
        raise ExportError(
            f"{root}: codebase_version {info.raw.get('codebase_version')!r} cannot be exported "
            f"(piper-export reads {', '.join(SOURCE_VERSIONS)})"
        )
    keys = list(info.video_keys)
    ours = (
        info.data_path == layout.DATA_PATH
        and info.video_path in ((layout.VIDEO_PATH,) if keys else (None, layout.VIDEO_PATH))
        and all(k in info.features and info.features[k].dtype == d for k, d in BOOKKEEPING.items())
        and model.modality is not None
        and (root / layout.EPISODES).is_file()
        and (root / layout.TASKS).is_file()
        and isinstance(info.raw.get("fps"), int)
    )
    if not ours:
        raise ExportError(
            f"{root}: not a root written by piper_recorder (its path templates, "
            f"bookkeeping columns, {layout.MODALITY}, {layout.EPISODES} or {layout.TASKS} differ)"
        )
    bad_keys = [k for k in keys if not k.startswith(layout.VIDEO_KEY_PREFIX)]
    if bad_keys:
        raise ExportError(f"{root}: video features {bad_keys} are not {layout.VIDEO_KEY_PREFIX}<camera>")
    cams = set(info.cameras)
    task_indices = {t.index for t in model.tasks}
    src = Source(
        root, info.to_json(), [e.to_json() for e in model.episodes], [t.to_json() for t in model.tasks], keys, model
    )
    for i, e in enumerate(model.episodes):
        if e.index != i:
            raise ExportError(f"{root}: {layout.EPISODES} line {i + 1} has episode_index {e.index}, expected {i}")
        if (-1 if e.task_index is None else e.task_index) not in task_indices:
            raise ExportError(
                f"{root}: episode {i} has task_index {e.extras.get('task_index')} missing from {layout.TASKS}"
            )
        lengths = e.extras.get("video_frame_lengths")
        if keys and (not isinstance(lengths, Mapping) or set(lengths) != cams):
            have = sorted(lengths) if isinstance(lengths, Mapping) else None
            raise ExportError(
                f"{root}: episode {i} has cameras {have}, the root declares "
                f"{sorted(cams)}; cameras must be the same in every episode"
            )
        missing = [r for r in [src.data_rel(i)] + [src.video_rel(i, k) for k in keys] if not (root / r).is_file()]
        if missing:
            raise ExportError(f"{root}: episode {i} is missing {missing}")
    return src

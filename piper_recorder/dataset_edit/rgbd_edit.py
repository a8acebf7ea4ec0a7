"""Editing optimized RGB-D HDF5 files (``rlroverlab.offline_rgbd_v2``) by copying picked episodes through the writer.

``bag.merge.copy_rgbd_episode`` stores JPEG / JPEG 2000 payloads as they are (never re-encoded), states, actions,
rewards, flags and extras as they are, so the observation timeline, ``/index``, the totals and
``/episodes/demo_N`` numbering are the writer's own and the output passes its validation on close. A demo's
attributes are kept (``task``, ``provenance``, the bag converter's ``source``) except those the writer sets; the
original recording times stay in ``recorded_start_time_ns`` / ``recorded_end_time_ns`` and the demo's origin in
``edited_from``. Retask rewrites the ``task`` attribute.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from piper_recorder.bag.merge import copy_rgbd_episode
from piper_recorder.lerobot.format import fsutil
from piper_recorder.names import CAMERA
from rgbd_writer import RgbdConfig, RgbdWriter, schema
from rgbd_writer.validate import validate_file

from .common import EditError, EpisodeInfo, Pick

SUFFIXES = (".hdf5", ".h5")
CURATION_KEYS = ("outcome", "outcome_note", "verdict", "verdict_reasons")
# root attributes two files must share to be merged (the writer's config + what fixes the layout)
_AGREE = (
    "schema_name",
    "format_version",
    "camera_width",
    "camera_height",
    "rgb_jpeg_quality",
    schema.DEPTH_PROFILE_ATTR,
    "depth_min_m",
    "depth_max_m",
    "rgb_source",
    "depth_source",
)


@dataclass
class RgbdSource:
    """One source RGB-D file: its attrs, episodes, dataset layout and writer lock."""

    path: Path
    attrs: dict[str, Any]
    episodes: list[EpisodeInfo]
    layout: dict[str, str]  # dataset path -> "dtype shape" of states, actions, extras
    env_args: dict[str, Any]
    lock_fd: int | None

    def config(self) -> RgbdConfig:
        """The writer configuration the file was written with."""
        a = self.attrs
        return RgbdConfig(
            width=int(a.get("camera_width", CAMERA.width)),
            height=int(a.get("camera_height", CAMERA.height)),
            rgb_jpeg_quality=int(a["rgb_jpeg_quality"]),
            depth_codec=str(a.get(schema.DEPTH_PROFILE_ATTR, "jpeg2000")),
            depth_min_m=float(a["depth_min_m"]),
            depth_max_m=float(a["depth_max_m"]),
            rgb_source=str(a["rgb_source"]),
            depth_source=str(a["depth_source"]),
            env_args=self.env_args,
            durable=False,
        )

    def close(self) -> None:
        """Release the file's writer lock."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def is_file(path: Path) -> bool:
    """Whether ``path`` is an RGB-D file (by suffix, or an HDF5 file)."""
    return path.suffix in SUFFIXES or (path.is_file() and h5py.is_hdf5(path))


def _lock(path: Path) -> int | None:
    """The RGB-D writer's own OFD write lock on the file (a recorder appending holds it)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except PermissionError:
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        os.close(fd)
        raise EditError(f"{path} is open in a writer (a recorder or another edit); stop it first") from None
    return fd


def open_file(path: Path, lock: bool = True) -> RgbdSource:
    """Open a complete, valid RGB-D file as a source (holding the writer lock with ``lock``)."""
    if not path.is_file():
        raise EditError(f"{path}: no such file")
    fd = _lock(path) if lock else None
    try:
        if Path(f"{os.path.realpath(path)}.journal").exists():
            raise EditError(
                f"{path} has an interrupted transaction (a .journal beside it); open it with "
                "the recorder or piper-validate first so it is rolled back"
            )
        try:
            problems = validate_file(path)
        except Exception as e:  # noqa: BLE001 - h5py's errors for damaged headers/attributes (as the writer's open)
            problems = [f"cannot validate: {type(e).__name__}: {e}"]
        if problems:
            raise EditError(f"{path} is not a complete, valid RGB-D file: " + "; ".join(problems[:3]))
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
            depth_profile = f[schema.DEPTH].attrs.get(schema.DEPTH_PROFILE_ATTR)
            if depth_profile is not None:
                attrs[schema.DEPTH_PROFILE_ATTR] = str(depth_profile)
            n = int(attrs["total_episodes"])
            episodes = []
            for ep in range(n):
                a = f["episodes"][f"demo_{ep}"].attrs
                task = a.get("task", "")
                cur = {k: (a[k].decode() if isinstance(a[k], bytes) else a[k]) for k in CURATION_KEYS if k in a}
                episodes.append(
                    EpisodeInfo(task.decode() if isinstance(task, bytes) else str(task), int(a["num_samples"]), cur)
                )
            layout = {}
            for group in (schema.STATE, schema.EXTRA):
                for k, ds in (f.get(group) or {}).items():
                    layout[f"{group}/{k}"] = f"{ds.dtype} {ds.shape[1:]}"
            if schema.ACTIONS in f:
                layout[schema.ACTIONS] = f"{f[schema.ACTIONS].dtype} {f[schema.ACTIONS].shape[1:]}"
            env = f["data"].attrs.get("env_args", "{}")
            try:
                env_args = json.loads(env) if isinstance(env, (str, bytes)) else {}
            except ValueError:
                env_args = {}
        return RgbdSource(path, attrs, episodes, layout, env_args if isinstance(env_args, dict) else {}, fd)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise


def differences(a: RgbdSource, b: RgbdSource) -> list[str]:
    """What differs between two sources that a merge needs equal (attrs and dataset layout)."""
    out = [f"{k}: {a.attrs.get(k)!r} vs {b.attrs.get(k)!r}" for k in _AGREE if a.attrs.get(k) != b.attrs.get(k)]
    for k in sorted(set(a.layout) | set(b.layout)):
        if a.layout.get(k) != b.layout.get(k):
            out.append(f"/{k}: {a.layout.get(k) or 'absent'} vs {b.layout.get(k) or 'absent'}")
    return out


def build(
    sources: list[RgbdSource], picks: list[Pick], staging: Path, progress: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Write the picked episodes, in order, as a new file at ``staging``; returns its totals."""
    files = [h5py.File(s.path, "r") for s in sources]
    try:
        w = RgbdWriter(staging, sources[0].config())
        try:
            for n, p in enumerate(picks):
                f = files[p.source]
                a = f["episodes"][f"demo_{p.episode}"].attrs
                update = {
                    "task": p.task,
                    "recorded_start_time_ns": int(a.get("recorded_start_time_ns", a["start_time_ns"])),
                    "recorded_end_time_ns": int(a.get("recorded_end_time_ns", a["end_time_ns"])),
                    "edited_from": json.dumps({"file": str(sources[p.source].path), "episode": p.episode}),
                }
                label = dict(p.fields)
                if "outcome" in label:  # a relabel: the demo's success flag follows the outcome
                    update.update(
                        label, success=label["outcome"] == "success", outcome_note=label.get("outcome_note", "")
                    )
                copy_rgbd_episode(w, f, p.episode, update)
                if progress:
                    progress(n + 1, len(picks))
            totals = {"episodes": w.total_episodes}
        finally:
            w.close()
    finally:
        for f in files:
            f.close()
    with h5py.File(staging, "r") as f:
        totals["frames"] = int(f.attrs["total_transitions"])
    fsutil.fsync_file(staging)
    return totals

"""The export's file operations and its progress bar.

Payload files are hard-linked (never re-encoded, never written into), new files are new inodes, and the meta
files are carried along.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..format import fsutil, layout
from .source import Source

T = TypeVar("T")

# meta files carried along unchanged (small: copied, since the recorder may rewrite them)
CARRIED_META = (layout.MODALITY, layout.COLLECTION_META, layout.SESSIONS, layout.RELATIVE_STATS, layout.DELTA_STATS)


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
    """Write ``obj`` as a new JSON file at ``path``."""
    write_file(path, fsutil.json_bytes(obj))


def carry_meta(src: Source, staging: Path) -> None:
    """Copy the meta files the export carries along unchanged from the source into ``staging``."""
    for rel in CARRIED_META:
        path = src.root / rel
        if path.is_file():
            write_file(staging / rel, path.read_bytes())


def iter_progress(items: Iterable[T], total: int, desc: str, enabled: bool) -> Iterator[T]:
    """Yield ``items``, with a progress bar on stderr when ``enabled``."""
    if not enabled:
        yield from items
        return
    from tqdm import tqdm

    with tqdm(items, total=total, desc=desc, unit="ep") as bar:
        yield from bar

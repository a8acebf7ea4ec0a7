"""fsync helpers shared by both dataset writers (a leaf module: the standard library only).

``fsync_dir(directory)`` persists entries created, renamed or removed IN ``directory``; to persist a
file's own directory entry, ``fsync_parent(path)``. Every other durable write
(tmp file + fsync + rename, the LeRobot root lock, JSON lines) is in ``lerobot/format/fsutil.py``.
"""

from __future__ import annotations

import os


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Persist a change of the entries in ``directory`` (rename, create, unlink)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Persist a file's content written through another descriptor (or another process)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_parent(path: str | os.PathLike[str]) -> None:
    """Persist ``path``'s own entry (created, renamed or removed) in its directory."""
    fsync_dir(os.path.dirname(os.path.abspath(path)))

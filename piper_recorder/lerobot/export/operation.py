"""Export one of our LeRobot v2.0/v2.1 roots to LeRobot v2.1 or v3.0 (``piper-export``).

``export(root, to, out)`` is the whole operation and the only caller of ``v21`` and ``v30``; what it reads is
``source``'s rule, what an append checks is ``state``'s.

Crash safety: the new state is built in ``.<out>.export-staging`` next to the output (files kept from the
previous export are hard links, never written to), fsynced, and swapped with the output in one
``renameat2(RENAME_EXCHANGE)``; the old tree is then deleted. A killed export leaves the previous export
untouched (the next run deletes the staging tree), and a reader finds one complete export at any instant
(without an exchange, two renames leave a moment without the directory, never a mixed one; the next run restores
it if killed in between). An append never rewrites a payload file of the previous export (v2.1: one file per
episode; v3.0: new episodes go to new files), so a reader holding the previous meta keeps reading the same bytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pyarrow as pa

from piper_recorder.storage.outpaths import located, nested
from piper_recorder.storage.sidelock import SideLock

from ..format import fsutil, layout
from .files import write_json
from .source import ExportError, open_source
from .state import check_prefix, load_state

TARGETS = ("v2.1", "v3.0")


# ---- commit ---------------------------------------------------------------------------------
def _paths(out: Path) -> tuple[Path, Path, Path]:
    return (
        out.with_name(f".{out.name}.export-staging"),
        out.with_name(f".{out.name}.export-old"),
        out.with_name(f".{out.name}.export-lock"),
    )


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
    """What an export did: the target version, the output, and its episode and row counts."""

    to: str
    out: Path
    episodes: int  # total in the output
    added: int  # exported by this run
    frames: int  # rows in the output
    seconds_of_data: float  # added rows / fps


def export(
    root: str | os.PathLike, to: str, out: str | os.PathLike, progress: bool = False, **options: Any
) -> ExportResult:
    """Export ``root`` (ours, v2.0 or v2.1) as LeRobot ``to`` ("v2.1" or "v3.0") into ``out``.

    A re-run into the same ``out`` appends the episodes added to ``root`` since; ``options`` go to
    the layout builder (v3.0: ``data_files_size_in_mb``, ``video_files_size_in_mb``). Raises
    ``ExportError`` for anything it cannot express; the output is then unchanged.
    """
    if to not in TARGETS:
        raise ExportError(f"--to {to!r}: must be one of {', '.join(TARGETS)}")
    given = Path(out)
    root, out = Path(root).resolve(), located(given)
    if nested(given, root):  # symlinks resolved on both sides: --out Alink/v30 is inside A
        raise ExportError(
            f"--out {given} must be outside the source root {root} and not contain it (resolved: {given.resolve()})"
        )
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
            src.fingerprint(i) for i in range(done, len(src.episodes))
        ]
        write_json(staging / layout.EXPORT_STATE, new_state.to_json())
        commit(staging, out)
        added = src.episodes[done:]
        return ExportResult(
            to,
            out,
            len(src.episodes),
            len(added),
            sum(int(e["length"]) for e in src.episodes),
            sum(int(e["length"]) for e in added) / src.fps,
        )
    except BaseException:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        lock.close()

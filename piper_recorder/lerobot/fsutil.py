"""Crash-safe file primitives: every metadata write is tmp file + fsync + ``os.replace``.

All writer I/O that must not be half-done goes through these few functions, so a test can inject a
failure (e.g. ``OSError(ENOSPC)``) at each step by monkeypatching them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """Persist a directory entry change (rename, create, unlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tmp(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path.tmp`` and fsync it; the caller renames it into place with ``replace``."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def replace(src: Path, dst: Path) -> None:
    """Atomically move ``src`` over ``dst`` (same filesystem)."""
    os.replace(src, dst)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see either the old or the new content."""
    tmp = write_tmp(path, data)
    try:
        replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=4, ensure_ascii=False) + "\n").encode()


def jsonl_bytes(rows: Iterable[dict]) -> bytes:
    """JSON lines with no blank lines (an empty list gives an empty file)."""
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows)


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSON-lines file, skipping blank lines; a missing file is empty."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

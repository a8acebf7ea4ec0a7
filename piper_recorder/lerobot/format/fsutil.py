"""Crash-safe file primitives: every metadata write is tmp file + fsync + ``os.replace``.

All writer I/O that must not be half-done goes through these few functions, so a test can inject a
failure (e.g. ``OSError(ENOSPC)``) at each step by monkeypatching them.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from piper_recorder.storage.durable import fsync_dir, fsync_file  # noqa: F401 - called through this module (tests inject faults)

from .errors import DatasetError

TMP_SUFFIX = ".tmp"


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


def json_bytes(obj: Any, indent: int = 4) -> bytes:
    """``obj`` as UTF-8 JSON text ending in a newline, as the meta files are written."""
    return (json.dumps(obj, indent=indent, ensure_ascii=False) + "\n").encode()


# Code points that str.splitlines() (and some editors) treat as line breaks but json.dumps leaves raw
# inside strings; the ASCII ones (\r, \x0b, \x0c, \x1c-\x1e) json.dumps escapes already.
_RAW_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_line(obj: Any) -> str:
    """One JSON line (no newline) that no line splitter can cut: line-break code points are escaped."""
    text = json.dumps(obj, ensure_ascii=False)
    for raw, esc in _RAW_BREAKS.items():
        text = text.replace(raw, esc)  # json.dumps only emits these inside strings: escaping is exact
    return text


def jsonl_bytes(rows: Iterable[dict]) -> bytes:
    """JSON lines with no blank lines (an empty list gives an empty file)."""
    return b"".join(json_line(r).encode() + b"\n" for r in rows)


class JsonLinesError(DatasetError, ValueError):
    """A JSON-lines file has a line that does not parse; the message names the file and the line."""


def parse_jsonl(path: Path, data: bytes) -> list[Any]:
    r"""Parse JSON lines split on ``\n`` only, skipping blank lines.

    Never ``splitlines()``: older roots hold U+2028/U+2029/U+0085 raw inside strings, which is valid JSON as
    long as nothing splits the line there.
    """
    out = []
    for n, line in enumerate(data.decode("utf-8").split("\n"), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise JsonLinesError(f"{path}: line {n} is not valid JSON ({e})") from None
    return out


def read_jsonl(path: Path) -> list[Any]:
    """Read a JSON-lines file (see ``parse_jsonl``); a missing file is empty."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return parse_jsonl(path, data)


ROOT_LOCK = ".lock"


def lock_root(root: Path, busy: str) -> int:
    """Hold the one-writer lock of a LeRobot root; returns the fd, whose close releases it.

    The lock is ``<root>/.lock``, a flock that dies with the process; ``busy`` is the DatasetError text when another
    process holds it. The writer and every tool that rewrites a root in place take it.
    """
    fd = os.open(Path(root) / ROOT_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DatasetError(busy) from None
    return fd

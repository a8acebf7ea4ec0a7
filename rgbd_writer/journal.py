"""Undo journal under HDF5: makes every change to an existing file atomic with respect to SIGKILL.

HDF5 updates metadata in place, so a process killed mid-write can leave a file that no longer opens.
The writer therefore never lets HDF5 touch the file directly: it opens it through h5py's ``fileobj``
driver with :class:`JournaledFile`. Before any byte that existed when the transaction began is
overwritten (or truncated away), its original content is appended to ``<path>.journal`` (and, with
``durable=True``, fsynced). Bytes past the original end of file need no record: rollback truncates.

Commit = close HDF5, fsync the file, delete the journal (the commit point), fsync the directory.
Rollback (discard, error, or crash found on the next open) = restore every recorded range, truncate
to the original length, fsync, delete the journal. Records are only ever first-touch originals, so
they can be applied in any order, and a torn final record is ignored: its overwrite never happened.
"""
from __future__ import annotations

import os
import struct
import zlib

MAGIC = b"RGBDJRN1"
_HEADER = struct.Struct(">8sQI")  # magic, original length, crc32 of the first two fields
_RECORD = struct.Struct(">QII")  # offset, length, crc32(data)


def journal_path(path: str) -> str:
    return path + ".journal"


def _write_all(fd: int, data: bytes) -> None:
    mv = memoryview(data)
    while mv:
        mv = mv[os.write(fd, mv):]


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JournaledFile:
    """A seekable binary file object (for ``h5py.File(obj, "r+", driver="fileobj")``) with undo records."""

    def __init__(self, path: str, durable: bool = True):
        self.path = path
        self.durable = durable
        self._fd = os.open(path, os.O_RDWR)
        self.original_size = os.fstat(self._fd).st_size
        self._pos = 0
        self._saved: list[tuple[int, int]] = []  # sorted, merged [start, end) ranges already recorded
        self._jfd = os.open(journal_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        head = MAGIC + struct.pack(">Q", self.original_size)
        _write_all(self._jfd, _HEADER.pack(MAGIC, self.original_size, zlib.crc32(head)))
        os.fsync(self._jfd)
        _fsync_dir(path)
        self.records = 0

    # -- file-object protocol used by HDF5's fileobj driver --------------------------------------
    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = pos
        elif whence == 1:
            self._pos += pos
        else:
            self._pos = os.fstat(self._fd).st_size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf) -> int:
        n = os.preadv(self._fd, [buf], self._pos)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, os.fstat(self._fd).st_size - self._pos)
        data = os.pread(self._fd, size, self._pos)
        self._pos += len(data)
        return data

    def write(self, data) -> int:
        mv = memoryview(data).cast("B")
        self._preserve(self._pos, self._pos + len(mv))
        n = 0
        while n < len(mv):
            n += os.pwrite(self._fd, mv[n:], self._pos + n)
        self._pos += n
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        self._preserve(size, self.original_size)
        os.ftruncate(self._fd, size)
        return size

    def flush(self) -> None:
        pass

    # -- journal ---------------------------------------------------------------------------------
    def _preserve(self, start: int, end: int) -> None:
        """Record the original bytes of [start, end) below the original size that are not yet saved."""
        end = min(end, self.original_size)
        if start >= end:
            return
        wrote = False
        cur = start
        for s, e in self._saved:
            if e <= cur:
                continue
            if s >= end:
                break
            if s > cur:
                self._record(cur, s)
                wrote = True
            cur = max(cur, e)
            if cur >= end:
                break
        if cur < end:
            self._record(cur, end)
            wrote = True
        if wrote:
            if self.durable:
                os.fsync(self._jfd)
            self._merge(start, end)

    def _record(self, start: int, end: int) -> None:
        data = os.pread(self._fd, end - start, start)
        _write_all(self._jfd, _RECORD.pack(start, len(data), zlib.crc32(data)) + data)
        self.records += 1

    def _merge(self, start: int, end: int) -> None:
        out = []
        for s, e in self._saved:
            if e < start or s > end:
                out.append((s, e))
            else:
                start, end = min(s, start), max(e, end)
        out.append((start, end))
        out.sort()
        self._saved = out

    # -- transaction end -------------------------------------------------------------------------
    def commit(self) -> None:
        """Make the current content durable, then drop the journal (the commit point)."""
        os.fsync(self._fd)
        self._close_fds()
        os.unlink(journal_path(self.path))
        _fsync_dir(self.path)

    def rollback(self) -> None:
        """Close, restore the original bytes and drop the journal."""
        self._close_fds()
        rollback(self.path)

    def _close_fds(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._jfd >= 0:
            os.close(self._jfd)
            self._jfd = -1


def rollback(path: str) -> bool:
    """Undo an interrupted transaction on ``path`` if its journal exists. Returns True if one existed."""
    jpath = journal_path(path)
    try:
        with open(jpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return False
    if len(raw) >= _HEADER.size:
        magic, size, crc = _HEADER.unpack_from(raw, 0)
        valid = magic == MAGIC and crc == zlib.crc32(MAGIC + struct.pack(">Q", size))
    else:
        valid = False
    if valid:  # a torn header means the transaction never wrote to the file
        fd = os.open(path, os.O_RDWR)
        try:
            pos = _HEADER.size
            while pos + _RECORD.size <= len(raw):
                off, n, crc = _RECORD.unpack_from(raw, pos)
                data = raw[pos + _RECORD.size: pos + _RECORD.size + n]
                if len(data) != n or zlib.crc32(data) != crc:
                    break  # torn last record: its overwrite was never issued
                os.pwrite(fd, data, off)
                pos += _RECORD.size + n
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.unlink(jpath)
    _fsync_dir(path)
    return True

"""Undo journal under HDF5: makes every change to an existing file atomic with respect to SIGKILL.

HDF5 updates metadata in place, so a process killed mid-write can leave a file that no longer opens.
The writer therefore never lets HDF5 touch the file directly: it opens it through h5py's ``fileobj``
driver with :class:`JournaledFile`, which splits the file at its length when the transaction began:

- bytes past that point (new payloads, new metadata) go straight to disk; a rollback truncates them;
- changes to bytes before it (superblock, object headers, B-tree nodes) stay in memory pages until
  commit, so the committed part of the file on disk is untouched while an episode records.

Commit: append the original content of every changed page to ``<path>.journal`` (one fsync), write
the pages, fsync the file, delete the journal (the commit point), fsync the directory.
Rollback (discard, error, or a journal found by the next open): restore the recorded pages, truncate
to the original length, fsync, delete the journal. A torn final record is ignored (its page was not
yet written); a torn header means nothing before the original length was touched.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING

from piper_recorder.storage.durable import fsync_parent

if TYPE_CHECKING:
    from typing_extensions import Buffer

MAGIC = b"RGBDJRN1"
_HEADER = struct.Struct(">8sQI")  # magic, original length, crc32 of the first two fields
_RECORD = struct.Struct(">QII")  # offset, length, crc32(data)
_PAGE = 4096


def journal_path(path: str) -> str:
    """The undo journal of the file at ``path`` (beside it)."""
    return path + ".journal"


def _write_all(fd: int, data: bytes) -> None:
    mv = memoryview(data)
    while mv:
        mv = mv[os.write(fd, mv) :]


def _pwrite_all(fd: int, data: Buffer, offset: int) -> None:
    mv = memoryview(data).cast("B")
    while mv:
        n = os.pwrite(fd, mv, offset)
        mv, offset = mv[n:], offset + n


class JournaledFile:
    """A seekable binary file object for ``h5py.File(obj, "r+")`` that makes its changes atomic."""

    def __init__(self, path: str, durable: bool = True):
        self.path = path
        self.durable = durable
        self._fd = os.open(path, os.O_RDWR)
        self.original_size = os.fstat(self._fd).st_size
        self._size = self.original_size  # logical length as HDF5 sees it
        self._pos = 0
        self._pages: dict[int, bytearray] = {}  # page number -> new content of a page before original_size
        self._jfd = os.open(journal_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        head = MAGIC + struct.pack(">Q", self.original_size)
        _write_all(self._jfd, _HEADER.pack(MAGIC, self.original_size, zlib.crc32(head)))
        os.fsync(self._jfd)  # must be durable before anything is appended to the file
        fsync_parent(path)
        self.records = 0

    # -- file-object protocol used by HDF5's fileobj driver --------------------------------------
    def seek(self, pos: int, whence: int = 0) -> int:
        """Move the file position (the file-object protocol h5py uses)."""
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        """The file position."""
        return self._pos

    def read(self, size: int = -1) -> bytes:
        """Read from the position: committed bytes as changed in memory, new bytes from disk."""
        end = self._size if size < 0 else min(self._size, self._pos + size)
        data = self._read_at(self._pos, max(0, end - self._pos))
        self._pos += len(data)
        return data

    def readinto(self, buf: Buffer) -> int:
        """Read into ``buf`` from the position."""
        mv = memoryview(buf).cast("B")
        data = self.read(len(mv))
        mv[: len(data)] = data
        return len(data)

    def write(self, data: Buffer) -> int:
        """Write at the position: before the transaction's start into memory pages, past it to disk."""
        mv = memoryview(data).cast("B")
        pos, n = self._pos, len(mv)
        split = min(max(self.original_size - pos, 0), n)  # bytes that land before original_size
        if split:
            self._write_pages(pos, mv[:split])
        if split < n:
            _pwrite_all(self._fd, mv[split:], pos + split)
        self._pos = pos + n
        self._size = max(self._size, self._pos)
        return n

    def truncate(self, size: int | None = None) -> int:
        """Set the file's size; committed bytes cut off become zeros in memory pages, never on disk."""
        size = self._pos if size is None else size
        if size < self.original_size:  # what HDF5 would read back after extending again: zeros
            self._write_pages(size, memoryview(bytes(self.original_size - size)))
        os.ftruncate(self._fd, max(size, self.original_size))
        self._size = size
        return size

    def flush(self) -> None:
        """Nothing to do: new bytes are written through and changed pages wait for the commit."""

    # -- page overlay ----------------------------------------------------------------------------
    def _page(self, p: int) -> bytearray:
        page = self._pages.get(p)
        if page is None:
            start = p * _PAGE
            page = bytearray(os.pread(self._fd, min(_PAGE, self.original_size - start), start))
            self._pages[p] = page
        return page

    def _write_pages(self, pos: int, mv: memoryview) -> None:
        done = 0
        while done < len(mv):
            p, off = divmod(pos + done, _PAGE)
            page = self._page(p)
            k = min(len(page) - off, len(mv) - done)
            page[off : off + k] = mv[done : done + k]
            done += k

    def _read_at(self, pos: int, n: int) -> bytes:
        data = bytearray(os.pread(self._fd, n, pos))
        if len(data) < n:
            data.extend(bytes(n - len(data)))
        end = min(pos + n, self.original_size)
        p = pos // _PAGE
        while p * _PAGE < end:
            page = self._pages.get(p)
            if page is not None:
                s, e = max(pos, p * _PAGE), min(end, p * _PAGE + len(page))
                data[s - pos : e - pos] = page[s - p * _PAGE : e - p * _PAGE]
            p += 1
        return bytes(data)

    # -- transaction end -------------------------------------------------------------------------
    def commit(self) -> None:
        """Journal the originals of the changed pages, write the pages, drop the journal (commit point)."""
        pages = sorted(self._pages.items())
        for p, new in pages:
            old = os.pread(self._fd, len(new), p * _PAGE)
            _write_all(self._jfd, _RECORD.pack(p * _PAGE, len(old), zlib.crc32(old)) + old)
            self.records += 1
        if pages and self.durable:
            os.fsync(self._jfd)
        for p, new in pages:
            _pwrite_all(self._fd, new, p * _PAGE)
        if self._size < self.original_size:
            os.ftruncate(self._fd, self._size)
        if self.durable:
            os.fsync(self._fd)
        self._close_fds()
        os.unlink(journal_path(self.path))
        if self.durable:
            fsync_parent(self.path)

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
                data = raw[pos + _RECORD.size : pos + _RECORD.size + n]
                if len(data) != n or zlib.crc32(data) != crc:
                    break  # torn last record: no page had been written yet
                _pwrite_all(fd, data, off)
                pos += _RECORD.size + n
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.unlink(jpath)
    fsync_parent(path)
    return True

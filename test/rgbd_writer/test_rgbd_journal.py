"""Undo journal: every interrupted state of a transaction rolls back to the original bytes."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from rgbd_writer import journal
from rgbd_writer.journal import JournaledFile, journal_path, rollback


@pytest.fixture
def h5file(tmp_path):
    p = str(tmp_path / "f.h5")
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(5000), maxshape=(None,), chunks=(1024,))
        f.attrs["n"] = 1
    return p


def _modify(jf):
    f = h5py.File(jf, "r+")
    f["x"].resize((9000,))
    f["x"][5000:] = -1
    f.attrs["n"] = 2
    f.create_group("g").attrs["s"] = "x" * 100
    f.close()


def test_committed_changes_and_untouched_prefix_while_open(h5file):
    before = open(h5file, "rb").read()
    jf = JournaledFile(h5file)
    f = h5py.File(jf, "r+")
    f["x"].resize((9000,))
    f.attrs["n"] = 2
    f.flush()
    # while the transaction is open the committed part of the file is unchanged on disk
    assert open(h5file, "rb").read()[: len(before)] == before
    f.close()
    jf.commit()
    assert not os.path.exists(journal_path(h5file))
    with h5py.File(h5file, "r") as g:
        assert g.attrs["n"] == 2 and g["x"].shape == (9000,)


def test_rollback_restores_bytes(h5file):
    before = open(h5file, "rb").read()
    jf = JournaledFile(h5file)
    _modify(jf)
    jf.rollback()
    assert open(h5file, "rb").read() == before and not os.path.exists(journal_path(h5file))


@pytest.mark.parametrize("pages_written", [0, 1, 2])
def test_kill_during_commit_page_writes_rolls_back(h5file, monkeypatch, pages_written):
    before = open(h5file, "rb").read()
    jf = JournaledFile(h5file, durable=False)
    _modify(jf)
    assert len(jf._pages) >= 2
    real, calls = journal._pwrite_all, []

    def dying(fd, data, off):
        if len(calls) == pages_written:
            raise KeyboardInterrupt("killed")
        calls.append(off)
        real(fd, data, off)

    monkeypatch.setattr(journal, "_pwrite_all", dying)
    with pytest.raises(KeyboardInterrupt):
        jf.commit()
    monkeypatch.setattr(journal, "_pwrite_all", real)
    jf._close_fds()
    assert os.path.exists(journal_path(h5file))
    assert rollback(h5file) is True
    assert open(h5file, "rb").read() == before


def test_torn_header_and_torn_record(h5file):
    before = open(h5file, "rb").read()
    with open(journal_path(h5file), "wb") as j:
        j.write(journal.MAGIC[:5])  # killed while creating the journal
    with open(h5file, "ab") as f:
        f.write(b"appended")  # cannot happen before a durable header, but must not matter
    assert rollback(h5file) is True
    assert open(h5file, "rb").read()[: len(before)] == before

    jf = JournaledFile(h5file, durable=False)
    _modify(jf)
    jf.commit()
    after = open(h5file, "rb").read()
    # Killed during commit after page 0 was rewritten, while the record after it was being appended:
    # the complete record restores page 0, the torn one is skipped.
    jf2 = JournaledFile(h5file, durable=False)
    jf2._close_fds()
    page0 = after[: journal._PAGE]
    import zlib

    good = journal._RECORD.pack(0, len(page0), zlib.crc32(page0)) + page0
    torn = journal._RECORD.pack(journal._PAGE, journal._PAGE, 0) + b"\0" * 10
    with open(journal_path(h5file), "ab") as j:
        j.write(good + torn)
    with open(h5file, "r+b") as f:
        f.write(b"\xff" * 64)  # page 0 already overwritten with "new" content
    assert rollback(h5file) is True
    assert open(h5file, "rb").read() == after


def test_rollback_without_journal_is_noop(h5file):
    assert rollback(h5file) is False

"""The dataset tools' outputs against their inputs and their lock files (issue #21 items 8 and 12).

- ``--out`` through a symlink into an input (or around one) is refused for every tool that takes
  ``--out`` (``piper-dataset`` merge/split/delete/retask/retype, ``piper-export``, ``piper-bag2dataset``):
  paths are compared resolved, exit 2, the input untouched.
- No ``.NAME.dsedit-lock`` / ``.NAME.export-lock`` remains after a run, successful or refused; a lock a
  live process holds is never removed; two runs never both hold one (``SideLock``'s inode check).
Real CLIs as subprocesses on roots written by the LeRobot writer (lerobot_fixtures.small_root).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.lerobot_data import tree_hashes
from support.lerobot_fixtures import small_root

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _run(tool: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True, timeout=300)


def _locks(top: Path) -> list[Path]:
    return sorted(p for p in top.rglob(".*") if p.name.endswith(("-lock",)))


@pytest.fixture
def roots(tmp_path):
    a, b = small_root(tmp_path / "A"), small_root(tmp_path / "B", seed=1)
    (tmp_path / "Alink").symlink_to("A")
    (tmp_path / "up").symlink_to(".")  # a symlink to the directory holding A and B
    return tmp_path, a, b


def test_out_through_a_symlink_into_an_input_is_refused(roots):
    tmp, a, b = roots
    before = tree_hashes(a)
    link = tmp / "Alink"
    runs = [
        ("piper-dataset", "merge", a, b, "--out", link / "merged"),
        ("piper-dataset", "split", a, "--episodes", "0", "--out", link / "first"),
        ("piper-dataset", "split", a, "--episodes", "0", "--out", tmp / "rest", "--rest", link / "rest"),
        ("piper-dataset", "delete", a, "--episodes", "0", "--out", link / "fewer"),
        ("piper-dataset", "retask", a, "--rename", "pick the cube=pick", "--out", link / "renamed"),
        ("piper-dataset", "retype", a, "--rotation-type", "quaternion", "--out", link / "retyped"),
        ("piper-export", a, "--to", "v3.0", "--out", link / "v30", "-q"),
        ("piper-export", a, "--to", "v2.1", "--out", link / "meta" / "v21", "-q"),
        ("piper-export", a, "--to", "v3.0", "--out", tmp / "up", "-q"),  # the input inside the output
        ("piper-bag2dataset", a, "--format", "lerobot", "--out", link / "from_bag"),
    ]
    for tool, *args in runs:
        r = _run(tool, *args)
        assert r.returncode == 2 and "must be outside" in r.stderr, (tool, args, r.returncode, r.stderr[-500:])
    assert tree_hashes(a) == before and sorted(x for x in os.listdir(a) if x != ".lock") == [
        "data",
        "meta",
        "videos",
    ]  # .lock: the writer's own
    assert not (tmp / "rest").exists()


def test_split_outputs_must_not_nest(roots):
    tmp, a, _b = roots
    (tmp / "C").mkdir()
    (tmp / "Clink").symlink_to("C")
    for out, rest in ((tmp / "C" / "x", tmp / "C" / "x" / "rest"), (tmp / "C" / "y", tmp / "Clink" / "y")):
        r = _run("piper-dataset", "split", a, "--episodes", "0", "--out", out, "--rest", rest)
        assert r.returncode == 2 and "--out and --rest" in r.stderr, r.stderr[-500:]
        assert os.listdir(tmp / "C") == []


def test_no_lock_file_remains_after_successful_or_refused_runs(roots):
    tmp, a, b = roots
    ok = [
        ("piper-dataset", "merge", a, b, "--out", tmp / "m"),
        ("piper-dataset", "split", tmp / "m", "--episodes", "0-1", "--out", tmp / "s", "--rest", tmp / "r"),
        ("piper-dataset", "delete", tmp / "m", "--episodes", "0"),  # in place
        ("piper-dataset", "retask", tmp / "m", "--rename", "pick the cube=pick"),  # in place
        ("piper-export", a, "--to", "v3.0", "--out", tmp / "v30", "-q"),
        ("piper-export", a, "--to", "v3.0", "--out", tmp / "v30", "-q"),  # up to date
        ("piper-export", a, "--to", "v2.1", "--out", tmp / "v21", "-q"),
    ]
    for tool, *args in ok:
        r = _run(tool, *args)
        assert r.returncode == 0, (tool, args, r.stderr[-800:])
    refused = [
        ("piper-dataset", "merge", a, b, "--out", tmp / "m"),  # exists
        ("piper-dataset", "delete", tmp / "m", "--episodes", "0-99"),  # no such episodes
        ("piper-dataset", "merge", a, tmp / "v30", "--out", tmp / "m3"),  # not mergeable
        ("piper-export", b, "--to", "v3.0", "--out", tmp / "v30", "-q"),  # another source
        ("piper-export", a, "--to", "v2.1", "--out", tmp / "v30", "-q"),
    ]  # another format
    for tool, *args in refused:
        r = _run(tool, *args)
        assert r.returncode == 2, (tool, args, r.returncode, r.stderr[-800:])
    assert _locks(tmp) == []


HOLDER = """
import sys, time
from pathlib import Path
from piper_recorder.storage.sidelock import SideLock
lock = SideLock(Path(sys.argv[1]), lambda: RuntimeError("busy"))
print("held", flush=True)
sys.stdin.read()      # until the test closes our stdin
lock.close()
print("released", flush=True)
"""


def test_a_lock_held_by_a_live_process_is_never_removed(roots):
    tmp, a, b = roots
    lock = tmp / ".m.dsedit-lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        r = _run("piper-dataset", "merge", a, b, "--out", tmp / "m")
        assert r.returncode == 2 and "another piper-dataset is writing" in r.stderr, r.stderr[-500:]
        assert lock.exists() and not (tmp / "m").exists()
        fd = os.open(lock, os.O_RDWR)  # still the holder's: it cannot be taken
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "released"
    finally:
        holder.kill()
        holder.wait()
    assert not lock.exists()
    assert _run("piper-dataset", "merge", a, b, "--out", tmp / "m").returncode == 0
    assert _locks(tmp) == []


def test_a_stale_lock_file_is_taken_over_and_removed(roots):
    tmp, a, b = roots
    (tmp / ".m.dsedit-lock").write_bytes(b"")  # left by an older version or a killed run (no holder)
    (tmp / ".v30.export-lock").write_bytes(b"")
    assert _run("piper-dataset", "merge", a, b, "--out", tmp / "m").returncode == 0
    assert _run("piper-export", a, "--to", "v3.0", "--out", tmp / "v30", "-q").returncode == 0
    assert _locks(tmp) == []


def test_an_opener_racing_a_release_never_shares_the_lock(tmp_path, monkeypatch):
    """B opens the lock file, the holder A releases (unlinks, closes), C locks a new file, then B's flock
    succeeds on A's orphaned inode: B must notice and fail on C's, not run beside C.
    """
    import piper_recorder.storage.sidelock as sl

    path = tmp_path / ".out.dsedit-lock"
    holder_a = sl.SideLock(path, lambda: RuntimeError("busy"))
    real_open = os.open
    others: list[sl.SideLock] = []

    def racing_open(p, flags, mode=0o777):
        fd = real_open(p, flags, mode)
        if not others:  # between B's open and B's flock: A lets go, C takes it
            monkeypatch.setattr(sl.os, "open", real_open)
            holder_a.close()
            others.append(sl.SideLock(path, lambda: RuntimeError("busy")))
        return fd

    monkeypatch.setattr(sl.os, "open", racing_open)
    with pytest.raises(RuntimeError, match="busy"):
        sl.SideLock(path, lambda: RuntimeError("busy"))
    assert path.exists()  # C's lock, untouched by B
    others[0].close()
    assert not path.exists()

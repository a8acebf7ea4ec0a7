"""One writer per HDF5 file whatever path reaches it (symlink, hard link, another directory), and the
crash journal is found through any symlink: real processes, independent checks with h5py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from rgbd_writer import RgbdConfig, RgbdWriter
from rgbd_writer.errors import FileStateError
from rgbd_writer.validate import validate_file

from support import rgbd_crash_worker as cw
from support.paths import ROOT, SUPPORT_DIR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# A writer process: opens PATH, commits N episodes from FIRST, prints "ready", waits for a line on stdin
# ("commit": one more episode then close; "hold": start an episode, add frames, print "mid", sleep).
WORKER = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
import rgbd_crash_worker as cw
from rgbd_writer.errors import FileStateError
from rgbd_writer import RgbdConfig, RgbdWriter
path, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    w = RgbdWriter(path, RgbdConfig(width=cw.W, height=cw.H))
except FileStateError as e:
    print("REFUSED", e, flush=True)
    sys.exit(2)
for e in range(first, first + n):
    cw.write_episode(w, e)
print("ready", flush=True)
cmd = sys.stdin.readline().strip()
if cmd == "commit":
    cw.write_episode(w, first + n)
    w.close()
    print("closed", flush=True)
elif cmd == "hold":
    w.start_episode(seed=99)
    for t in range(3):
        rgb, depth, state = cw.frame(99, t)
        w.add_observation(rgb, depth, state)
    w._drain()
    print("mid", flush=True)
    time.sleep(60)
"""


def writer(path: Path, first: int, n: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path), str(first), str(n), str(SUPPORT_DIR)],
        cwd=ROOT,  # -c puts the cwd first on sys.path: the checkout's rgbd_writer, not test/rgbd_writer/ (its tests)
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def refused(path: Path) -> str:
    p = writer(path, 50, 1)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, (out, err)
    assert "Traceback" not in err
    return out


def episodes(path: Path) -> int:
    with h5py.File(path, "r") as f:
        return int(f.attrs["total_episodes"])


def test_symlink_and_hard_link_writers_are_refused_and_the_file_survives(tmp_path):
    real = tmp_path / "data" / "rgbd.hdf5"
    (tmp_path / "other").mkdir()
    sym = tmp_path / "other" / "via_symlink.hdf5"
    sym.symlink_to(real)  # dangling until the first writer creates the file through it
    first = writer(sym, 0, 2)
    try:
        assert first.stdout.readline().strip() == "ready"
        assert real.is_file() and not sym.with_name(sym.name + ".journal").exists()
        hard = tmp_path / "other" / "hard.hdf5"
        os.link(real, hard)
        for path in (hard, real, sym):
            assert "open in another writer" in refused(path)
        first.stdin.write("commit\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "closed"
        assert first.wait(60) == 0
    finally:
        first.kill()
    assert validate_file(str(real), full=True) == [] and episodes(real) == 3
    # with two names the journal could not be found through both: refused, nothing touched
    before = real.read_bytes()
    with pytest.raises(FileStateError, match="hard links"):
        RgbdWriter(hard, RgbdConfig(width=cw.W, height=cw.H))
    assert real.read_bytes() == before
    hard.unlink()
    with RgbdWriter(sym, RgbdConfig(width=cw.W, height=cw.H)) as w:
        assert w.total_episodes == 3
        cw.write_episode(w, 3)
    assert validate_file(str(real), full=True) == [] and episodes(real) == 4
    assert not list(tmp_path.rglob("*.lock")), "no lock files left behind"


def test_journal_of_a_killed_writer_is_found_through_another_path(tmp_path):
    real = tmp_path / "data" / "rgbd.hdf5"
    with RgbdWriter(real, RgbdConfig(width=cw.W, height=cw.H)) as w:
        cw.write_episode(w, 0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sym_a, sym_b = tmp_path / "a" / "x.hdf5", tmp_path / "b" / "y.hdf5"
    sym_a.symlink_to(real)
    sym_b.symlink_to(Path("..") / "data" / "rgbd.hdf5")
    p = writer(sym_a, 1, 1)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.stdin.write("hold\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "mid"
        assert Path(str(real) + ".journal").exists() and not Path(str(sym_a) + ".journal").exists()
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        p.kill()
    with RgbdWriter(sym_b, RgbdConfig(width=cw.W, height=cw.H)) as w:
        assert w.stats.episodes_rolled_back_on_open == 1 and w.total_episodes == 2
    assert validate_file(str(real), full=True) == [] and episodes(real) == 2
    assert not Path(str(real) + ".journal").exists()


def test_releasing_the_lock_cannot_let_a_third_writer_in(tmp_path):
    """Behavioural check of the release: the lock is the file's own inode, so a writer closing (no lock file
    to unlink) lets exactly one next writer in, and a third is refused while that one writes. (The old
    <path>.lock race needed an interleaving inside the constructor; this test does not reproduce it.)
    """
    path = tmp_path / "f.hdf5"
    a = RgbdWriter(path, RgbdConfig(width=cw.W, height=cw.H))
    cw.write_episode(a, 0)
    b = writer(path, 1, 1)  # refused while A holds the file
    out, _ = b.communicate(timeout=60)
    assert b.returncode == 2 and "open in another writer" in out
    a.close()
    b = writer(path, 1, 1)
    try:
        assert b.stdout.readline().strip() == "ready"
        assert "open in another writer" in refused(path)
        b.stdin.write("commit\n")
        b.stdin.flush()
        assert b.stdout.readline().strip() == "closed" and b.wait(60) == 0
    finally:
        b.kill()
    assert validate_file(str(path), full=True) == [] and episodes(path) == 3


def test_bag2dataset_rgbd_through_a_symlink_is_refused_while_a_writer_holds_the_file(tmp_path, capsys):
    """The issue's case: a second `piper-bag2dataset --format rgbd` reaching the file through a symlink."""
    import yaml

    from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
    from piper_recorder.cli.bag2dataset import main as bag2dataset

    conf = tmp_path / "recorders.yaml"
    conf.write_text(
        yaml.safe_dump(
            {"rgbd_recorder": {"ros__parameters": {"camera": "cam_front", "camera_width": 64, "camera_height": 48}}}
        )
    )
    bag = write_bag(tmp_path / "bag", scenario_messages(SynthScenario(duration_s=1.5, episodes=[(0.3, 1.2)])))
    real, sym = tmp_path / "real.hdf5", tmp_path / "link.hdf5"
    args = [str(bag), "--format", "rgbd", "--config", str(conf), "--no-progress"]
    assert bag2dataset([*args, "--out", str(real)]) == 0
    sym.symlink_to(real)
    from piper_recorder.recording.config import RgbdRecorderConfig, load_config, rgbd_writer_config

    with RgbdWriter(real, rgbd_writer_config(load_config(RgbdRecorderConfig, conf))):
        capsys.readouterr()
        assert bag2dataset([*args, "--out", str(sym)]) == 2
        assert "open in another writer" in capsys.readouterr().err
    assert validate_file(str(real), full=True) == [] and episodes(real) == 1
    assert bag2dataset([*args, "--out", str(sym)]) == 0  # resume: already converted, file intact
    assert episodes(real) == 1 and validate_file(str(real), full=True) == []


def test_a_creator_killed_after_linking_the_new_file_leaves_no_second_link(tmp_path):
    """Killed between linking the new file into place and removing its temporary name: the next writer
    removes that dead creator's name (not a live one's) instead of refusing a file with two links.
    """
    path = tmp_path / "f.hdf5"
    with RgbdWriter(path, RgbdConfig(width=cw.W, height=cw.H)) as w:
        cw.write_episode(w, 0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = Path(f"{path}.creating.{dead.pid}")
    os.link(path, leftover)
    live = Path(f"{path}.creating.{os.getpid()}x")  # not a pid: never touched
    live.write_bytes(b"")
    with RgbdWriter(path, RgbdConfig(width=cw.W, height=cw.H)) as w:
        assert w.total_episodes == 1
        cw.write_episode(w, 1)
    assert not leftover.exists() and live.exists() and os.stat(path).st_nlink == 1
    assert validate_file(str(path), full=True) == [] and episodes(path) == 2

"""SIGKILL at random instants loses at most the episode in flight; the file validates after reopen."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from rgbd_writer import RgbdConfig, RgbdWriter, codecs
from rgbd_writer.validate import validate_file

from support import rgbd_crash_worker as cw
from support.paths import ROOT, SUPPORT_DIR

pytestmark = pytest.mark.integration

KILLS = 24


def _episode_digest(f: h5py.File, e: int) -> str:
    o = int(f["index/obs_offsets"][e])
    T = int(f["index/episode_lengths"][e])
    h = hashlib.sha256()
    for r in range(o, o + T + 1):
        h.update(bytes(f["observations/rgb_jpeg"][r]))
        h.update(bytes(f["observations/depth_jp2"][r]))
    t = int(f["index/transition_offsets"][e])
    h.update(f["transitions/actions"][t : t + T].tobytes())
    return h.hexdigest()


def _check_episode_content(f: h5py.File, e: int) -> None:
    o = int(f["index/obs_offsets"][e])
    T = int(f["index/episode_lengths"][e])
    assert cw.episode_length(e) == T
    for t in (0, T):
        _, depth, _ = cw.frame(e, t)
        want = codecs.quantize_depth(depth, 0.1, 6.0)
        got = codecs.decode_depth_pillow(f["observations/depth_jp2"][o + t])
        assert np.array_equal(got, want)


@pytest.mark.timeout(120)
def test_sigkill_at_random_instants(tmp_path):
    path = str(tmp_path / "crash.hdf5")
    rng = random.Random(1234)
    committed = 0
    digests: dict[int, str] = {}
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    t_start = time.monotonic()
    rolled_back = deletes = 0
    for k in range(KILLS):
        p = subprocess.Popen(
            [sys.executable, str(SUPPORT_DIR / "rgbd_crash_worker.py"), path, str(committed)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert p.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.0, 0.7))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        deletes += out.count("OP delete")
        state, pending = committed, None
        for line in out.splitlines():
            if line.startswith("OP "):
                _, op, idx = line.split()
                pending = int(idx) + 1 if op == "commit" else int(idx)  # episode count once it is done
            elif line == "OK":
                state, pending = pending, None
        # Repair by reopening. The count is the one after the last acknowledged operation, or after the
        # operation in flight if the kill came between its commit point and its "OK".
        w = RgbdWriter(path, RgbdConfig(width=cw.W, height=cw.H, rgb_source="/cam/color", depth_source="/cam/depth"))
        n = w.total_episodes
        rolled_back += w.stats.episodes_rolled_back_on_open
        w.close()
        assert n in {state, state if pending is None else pending}, (k, out, n)
        assert validate_file(path, full=True) == [], k
        with h5py.File(path, "r") as f:
            for e in range(n):  # deleted-and-re-recorded episodes have the same content
                d = _episode_digest(f, e)
                assert digests.setdefault(e, d) == d, f"episode {e} changed after kill {k}"
            for e in range(min(committed, n), n):
                _check_episode_content(f, e)
        committed = n
    print(
        f"{KILLS} kills, {committed} episodes, {deletes} deletes started, {rolled_back} transactions rolled back, "
        f"{time.monotonic() - t_start:.1f} s"
    )
    assert committed >= 3
    assert rolled_back >= KILLS // 4  # most kills must land inside a transaction, not between them
    leftovers = sorted(x.name for x in tmp_path.iterdir() if x.name != "crash.hdf5")
    assert leftovers == []

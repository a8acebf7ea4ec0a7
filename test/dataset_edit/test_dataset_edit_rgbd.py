"""piper-dataset on RGB-D HDF5 files: every output episode is checked with h5py against
its source episode (payload bytes, states, actions, rewards, flags, extras, task), the index and
offsets against the spec's invariants computed here, and the file with piper-validate.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from piper_recorder.dataset_edit import EditError, merge, retask, split
from rgbd_writer import RgbdConfig, RgbdWriter

from support import rgbd_crash_worker as cw
from support.paths import ROOT

pytestmark = pytest.mark.integration

BIN = ROOT / ".venv" / "bin"


def write(path: Path, seeds: list[int], **kw) -> None:
    """One episode per seed (cw's deterministic frames; ``cw.episode_length(seed)`` transitions)."""
    cfg = RgbdConfig(
        **{
            "width": cw.W,
            "height": cw.H,
            "rgb_source": "/cam_front/color/image_raw",
            "depth_source": "/cam_front/aligned_depth_to_color/image_raw",
            **kw,
        }
    )
    with RgbdWriter(path, cfg) as w:
        for e in seeds:
            T = cw.episode_length(e)
            w.start_episode(seed=e, meta={"task": f"task {e % 2}", "provenance": json.dumps({"seed": e})})
            for t in range(T + 1):
                rgb, depth, state = cw.frame(e, t, cfg.height, cfg.width)
                w.add_observation(rgb, depth, state)
                if t < T:
                    w.add_transition(
                        cw.action(e, t), float(t), terminal=t == T - 1, extras={"progress": np.float32(t / T)}
                    )
            w.end_episode(success=True)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def episode(f: h5py.File, e: int) -> dict:
    """Episode ``e`` of an open file as plain values, read with h5py only."""
    a = f["episodes"][f"demo_{e}"].attrs
    o0, n, t0, T = (int(a[k]) for k in ("obs_offset", "num_observations", "transition_offset", "num_samples"))
    out = {
        "rgb": [bytes(x) for x in f["observations/rgb_jpeg"][o0 : o0 + n]],
        "depth": [bytes(x) for x in f["observations/depth_jp2"][o0 : o0 + n]],
        "task": a["task"],
        "seed": int(a["seed"]),
        "provenance": a["provenance"],
    }
    for k in f["observations/state"]:
        out[f"state/{k}"] = f["observations/state"][k][o0 : o0 + n]
    for k in ("actions", "rewards", "dones", "terminals", "timeouts"):
        out[k] = f["transitions"][k][t0 : t0 + T]
    out["extra/progress"] = f["transitions/extra/progress"][t0 : t0 + T]
    return out


def check_file(path: Path, expect: list[tuple[Path, int, str]]) -> None:
    """``path`` holds exactly ``expect`` (source file, source episode, task), in order, and its index
    follows the spec: obs_t / obs_t+1 rows, episode ids, offsets and lengths.
    """
    with h5py.File(path, "r") as f:
        assert int(f.attrs["total_episodes"]) == len(expect)
        idx = f["index"]
        o0 = t0 = 0
        for i, (src, j, task) in enumerate(expect):
            got = episode(f, i)
            with h5py.File(src, "r") as g:
                want = episode(g, j)
            assert got["task"] == task
            for k, v in want.items():
                if k != "task":
                    if isinstance(v, np.ndarray):
                        np.testing.assert_array_equal(got[k], v, err_msg=f"episode {i} {k}")
                    else:
                        assert got[k] == v, (i, k)
            T = len(want["actions"])
            assert idx["obs_offsets"][i] == o0 and idx["transition_offsets"][i] == t0 and idx["episode_lengths"][i] == T
            np.testing.assert_array_equal(idx["obs_index"][t0 : t0 + T], o0 + np.arange(T))
            np.testing.assert_array_equal(idx["next_obs_index"][t0 : t0 + T], o0 + 1 + np.arange(T))
            np.testing.assert_array_equal(idx["episode_id"][t0 : t0 + T], np.full(T, i))
            np.testing.assert_array_equal(idx["episode_transition_index"][t0 : t0 + T], np.arange(T))
            o0 += T + 1
            t0 += T
        assert int(f.attrs["total_transitions"]) == t0 and int(f.attrs["total_observations"]) == o0
        assert len(f["observations/rgb_jpeg"]) == o0 and len(f["transitions/actions"]) == t0
    r = subprocess.run([str(BIN / "piper-validate"), str(path), "--full"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "a.hdf5", tmp_path / "b.hdf5"
    write(a, [0, 1, 2])
    write(b, [3, 4])
    return a, b


def test_merge_copies_payloads_and_renumbers(files, tmp_path):
    a, b = files
    before = [sha(a), sha(b)]
    out = tmp_path / "m.hdf5"
    res = merge([a, b], out)
    assert res.kind == "rgbd" and res.totals[0]["episodes"] == 5
    assert [sha(a), sha(b)] == before
    check_file(out, [(a, 0, "task 0"), (a, 1, "task 1"), (a, 2, "task 0"), (b, 0, "task 1"), (b, 1, "task 0")])
    with h5py.File(out, "r") as f:
        assert json.loads(f["episodes/demo_3"].attrs["edited_from"]) == {"file": str(b), "episode": 0}
        assert f.attrs["writer_status"] == "complete"
        with h5py.File(b, "r") as g:
            assert f["episodes/demo_3"].attrs["recorded_start_time_ns"] == g["episodes/demo_0"].attrs["start_time_ns"]


def test_merge_refuses_files_that_differ(files, tmp_path):
    a, _ = files
    c = tmp_path / "c.hdf5"
    write(c, [5], rgb_jpeg_quality=70, depth_codec="htj2k")
    with pytest.raises(EditError) as e:
        merge([a, c], tmp_path / "m.hdf5")
    assert "rgb_jpeg_quality: 88 vs 70" in str(e.value) and "depth_jpeg2000_profile: 'jpeg2000' vs 'htj2k'" in str(
        e.value
    )
    assert not (tmp_path / "m.hdf5").exists()


def test_delete_in_place_and_retask(files, tmp_path):
    a, _ = files
    keep = tmp_path / "orig.hdf5"
    keep.write_bytes(a.read_bytes())
    r = subprocess.run(
        [str(BIN / "piper-dataset"), "delete", str(a), "--episodes", "1"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    check_file(a, [(keep, 0, "task 0"), (keep, 2, "task 0")])
    assert [x.name for x in tmp_path.glob(".a.hdf5*")] == []  # no staging, journal, temp file, nor lock
    retask(a, {"task 0": "pick the cube"}, tmp_path / "r.hdf5")
    check_file(tmp_path / "r.hdf5", [(keep, 0, "pick the cube"), (keep, 2, "pick the cube")])


def test_split_and_merge_back(files, tmp_path):
    a, _ = files
    split(a, tmp_path / "x.hdf5", tmp_path / "y.hdf5", episodes="1")
    check_file(tmp_path / "x.hdf5", [(a, 1, "task 1")])
    check_file(tmp_path / "y.hdf5", [(a, 0, "task 0"), (a, 2, "task 0")])
    merge([tmp_path / "y.hdf5", tmp_path / "x.hdf5"], tmp_path / "back.hdf5")
    check_file(tmp_path / "back.hdf5", [(a, 0, "task 0"), (a, 2, "task 0"), (a, 1, "task 1")])
    split(a, tmp_path / "head.hdf5", tmp_path / "tail.hdf5", episodes="0-1")
    merge([tmp_path / "head.hdf5", tmp_path / "tail.hdf5"], tmp_path / "same.hdf5")
    check_file(tmp_path / "same.hdf5", [(a, i, f"task {i % 2}") for i in range(3)])
    with h5py.File(a, "r") as f, h5py.File(tmp_path / "same.hdf5", "r") as g:  # whole datasets identical
        for name in ("observations/rgb_jpeg", "observations/depth_jp2"):
            assert [bytes(x) for x in f[name]] == [bytes(x) for x in g[name]]
        for name in (
            "transitions/actions",
            "transitions/rewards",
            "transitions/dones",
            "index/obs_index",
            "index/next_obs_index",
            "index/episode_id",
            "index/obs_offsets",
            "index/episode_lengths",
        ):
            np.testing.assert_array_equal(f[name][()], g[name][()])


def test_sigkill_mid_merge_leaves_inputs_and_no_output(tmp_path):
    a, b = tmp_path / "a.hdf5", tmp_path / "b.hdf5"
    write(a, list(range(12)), width=160, height=120)
    write(b, list(range(12, 24)), width=160, height=120)
    before = [sha(a), sha(b)]
    out = tmp_path / "m.hdf5"
    staging = tmp_path / ".m.hdf5.dsedit-staging"
    p = subprocess.Popen(
        [str(BIN / "piper-dataset"), "merge", str(a), str(b), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not (staging.exists() and staging.stat().st_size > 200_000) and time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    assert [sha(a), sha(b)] == before and not out.exists()
    r = subprocess.run(
        [str(BIN / "piper-dataset"), "merge", str(a), str(b), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert [x.name for x in tmp_path.glob(".m.hdf5*")] == []  # the killed run's lock removed by this one
    check_file(out, [(a, i, f"task {i % 2}") for i in range(12)] + [(b, i, f"task {i % 2}") for i in range(12)])

"""Loader: transitions, sequences and stacks stay inside episodes, decode each row once, fork-safe."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import numpy as np
import pytest

from rgbd_writer import RgbdConfig, RgbdWriter, codecs, reader
from rgbd_writer.reader import RgbdFile, SequenceDataset, TransitionDataset, collate, split_episodes

from support import rgbd_crash_worker as cw

N_EP = 4


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("rd") / "data.hdf5")
    with RgbdWriter(p, RgbdConfig(width=cw.W, height=cw.H)) as w:
        for e in range(N_EP):
            cw.write_episode(w, e)
    return p


def _expected_obs(e, t):
    _rgb, depth, state = cw.frame(e, t)
    return codecs.quantize_depth(depth, 0.1, 6.0), state


@pytest.mark.parametrize("decoder", ["fast", "pillow"])
def test_transitions_match_raw_rows(path, decoder):
    ds = TransitionDataset(path, decoder=decoder)
    assert len(ds) == sum(cw.episode_length(e) for e in range(N_EP))
    for k in range(len(ds)):
        s = ds[k]
        e, j = s["episode"], s["step"]
        mm, _state = _expected_obs(e, j)
        mm1, state1 = _expected_obs(e, j + 1)
        assert s["obs"]["rgb"].shape == (3, cw.H, cw.W) and s["obs"]["rgb"].dtype == np.float32
        assert s["obs"]["rgb"].min() >= 0.0 and s["obs"]["rgb"].max() <= 1.0
        assert s["obs"]["depth"].shape == (1, cw.H, cw.W)
        np.testing.assert_array_equal(s["obs"]["depth"][0], mm.astype(np.float32) * np.float32(0.001))
        np.testing.assert_array_equal(s["obs"]["depth_valid"][0], mm != 0)
        np.testing.assert_array_equal(s["next_obs"]["depth"][0], mm1.astype(np.float32) * np.float32(0.001))
        np.testing.assert_array_equal(s["next_obs"]["state"]["joint"], state1["joint"])
        np.testing.assert_array_equal(s["action"], cw.action(e, j))
        assert s["reward"] == j
        last = j == cw.episode_length(e) - 1
        assert bool(s["done"]) == last and bool(s["terminal"]) == (last and e % 2 == 0)
        assert bool(s["timeout"]) == (last and e % 2 == 1)
        assert not s["obs"]["depth_valid"][0, 0, :4].any()  # inf, -inf, too near, too far -> invalid


def test_next_obs_is_following_obs_and_hwc_layout(path):
    ds = TransitionDataset(path, layout="HWC")
    a, b = ds[0], ds[1]
    assert a["obs"]["rgb"].shape == (cw.H, cw.W, 3) and a["obs"]["depth"].shape == (cw.H, cw.W, 1)
    for key in ("rgb", "depth", "depth_valid"):
        np.testing.assert_array_equal(a["next_obs"][key], b["obs"][key])
    raw = codecs.decode_rgb_jpeg(ds.file.h5["observations/rgb_jpeg"][1]).astype(np.float32) * np.float32(1 / 255)
    np.testing.assert_array_equal(a["next_obs"]["rgb"], raw)


def _count_decodes(monkeypatch):
    calls = []
    orig = RgbdFile._decode_one

    def counting(self, r, d):
        calls.append(1)
        return orig(self, r, d)

    monkeypatch.setattr(RgbdFile, "_decode_one", counting)
    return calls


def test_sequences_stay_in_episode_and_decode_each_row_once(path, monkeypatch):
    L = 3
    ds = SequenceDataset(path, seq_len=L)
    assert len(ds) == sum(max(0, cw.episode_length(e) - L + 1) for e in range(N_EP))
    calls = _count_decodes(monkeypatch)
    for k in range(len(ds)):
        s = ds[k]
        e, st = s["episode"], s["start"]
        assert st + L <= cw.episode_length(e)
        for t in range(L):
            mm, _ = _expected_obs(e, st + t)
            np.testing.assert_array_equal(s["obs"]["depth_valid"][t, 0], mm != 0)
            np.testing.assert_array_equal(s["actions"][t], cw.action(e, st + t))
        np.testing.assert_array_equal(s["next_obs"]["depth"][:-1], s["obs"]["depth"][1:])
        mm_last, _ = _expected_obs(e, st + L)
        np.testing.assert_array_equal(s["next_obs"]["depth_valid"][-1, 0], mm_last != 0)
        assert s["obs"]["rgb"].shape == (L, 3, cw.H, cw.W)
    assert len(calls) == len(ds) * (L + 1)  # L transitions decode L+1 observations, not 2L


def test_frame_stack_never_crosses_episode_start(path, monkeypatch):
    K = 3
    ds = TransitionDataset(path, frame_stack=K)
    first_of_ep1 = cw.episode_length(0)
    calls = _count_decodes(monkeypatch)
    s = ds[first_of_ep1]  # episode 1, step 0: the stack repeats its first frame
    assert (s["episode"], s["step"]) == (1, 0)
    assert s["obs"]["depth"].shape == (K, 1, cw.H, cw.W)
    mm0, _ = _expected_obs(1, 0)
    mm1, _ = _expected_obs(1, 1)
    for i in range(K):
        np.testing.assert_array_equal(s["obs"]["depth_valid"][i, 0], mm0 != 0)
    np.testing.assert_array_equal(s["next_obs"]["depth_valid"][-1, 0], mm1 != 0)
    np.testing.assert_array_equal(s["next_obs"]["depth_valid"][0, 0], mm0 != 0)
    assert len(calls) == 2
    calls.clear()
    s = ds[first_of_ep1 + 2]  # step 2: obs rows 0..2, next rows 1..3 -> 4 decodes for 6 frames
    np.testing.assert_array_equal(s["obs"]["depth"][1:], s["next_obs"]["depth"][:-1])
    assert len(calls) == K + 1


def test_splits_by_episode_and_subsets(path):
    train, val = split_episodes(N_EP, val_fraction=0.25, seed=3)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(N_EP)) and len(val) == 1
    assert not set(train) & set(val)
    tr, va = TransitionDataset(path, episodes=train), TransitionDataset(path, episodes=val)
    assert {tr[k]["episode"] for k in range(len(tr))} == set(train.tolist())
    assert {va[k]["episode"] for k in range(len(va))} == set(val.tolist())
    assert len(tr) + len(va) == len(TransitionDataset(path))
    sq = SequenceDataset(path, seq_len=2, episodes=val)
    assert {sq[k]["episode"] for k in range(len(sq))} == set(val.tolist())
    with pytest.raises(IndexError):
        TransitionDataset(path, episodes=[N_EP])
    b = collate([tr[0], tr[1]])
    assert b["obs"]["rgb"].shape == (2, 3, cw.H, cw.W) and b["action"].shape == (2, 7)


def _child_read(ds, k, q):
    q.put(ds[k]["obs"]["depth"].sum())


@pytest.mark.integration
def test_fork_reopens_handle_and_pickles(path):
    ds = TransitionDataset(path)
    want = ds[2]["obs"]["depth"].sum()
    parent_handle = ds.file.h5
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_read, args=(ds, 2, q))
    p.start()
    got = q.get(timeout=30)
    p.join(30)
    assert p.exitcode == 0 and got == want
    assert ds.file.h5 is parent_handle  # the parent's handle is untouched
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.file._h5 is None
    assert clone[2]["obs"]["depth"].sum() == want


def test_torch_wrapper_is_optional(path):
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="PyTorch"):
            reader.as_torch_dataset(TransitionDataset(path))
    else:
        t = reader.as_torch_dataset(TransitionDataset(path))
        assert len(t) > 0 and t[0]["obs"]["rgb"].shape == (3, cw.H, cw.W)


def test_incomplete_file_needs_opt_in(tmp_path):
    p = str(tmp_path / "open.hdf5")
    w = RgbdWriter(p, RgbdConfig(width=cw.W, height=cw.H))
    cw.write_episode(w, 0)
    with pytest.raises(ValueError, match="allow_incomplete"):
        TransitionDataset(p)
    ds = TransitionDataset(p, allow_incomplete=True)
    assert len(ds) == cw.episode_length(0)
    ds.file.close()
    w.close()


def test_decode_threads_change_nothing_but_speed(path):
    one, two = SequenceDataset(path, seq_len=4, threads=1), SequenceDataset(path, seq_len=4, threads=3)
    for k in (0, len(one) // 2, len(one) - 1):
        a, b = one[k], two[k]
        for key in ("rgb", "depth", "depth_valid"):
            np.testing.assert_array_equal(a["obs"][key], b["obs"][key])
            np.testing.assert_array_equal(a["next_obs"][key], b["next_obs"][key])


def test_payload_of_the_wrong_size_is_a_clear_error(path, monkeypatch):
    ds = TransitionDataset(path)
    orig = RgbdFile._decode_one
    monkeypatch.setattr(RgbdFile, "_decode_one", lambda self, r, d: (orig(self, r, d)[0][:-1], orig(self, r, d)[1]))
    with pytest.raises(ValueError, match="rgb is .* the file says"):
        ds[0]


def test_camera_size_comes_from_the_frames_when_the_attributes_are_absent(path, tmp_path):
    import shutil

    import h5py

    bare = tmp_path / "bare.hdf5"
    shutil.copy(path, bare)
    with h5py.File(bare, "a") as f:
        del f.attrs["camera_height"], f.attrs["camera_width"]
    a, b = TransitionDataset(path)[3], TransitionDataset(bare)[3]
    np.testing.assert_array_equal(a["obs"]["rgb"], b["obs"]["rgb"])
    np.testing.assert_array_equal(a["next_obs"]["depth"], b["next_obs"]["depth"])

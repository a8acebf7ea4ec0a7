"""episode_stats against numpy computed independently, the way lerobot 0.3.3's compute_stats does it."""

import json

import av
import numpy as np
import pytest

from piper_recorder.lerobot.format import episode_stats as es


def _lerobot_image_stats(frames: np.ndarray) -> dict:
    """compute_episode_stats for an image feature, written out: CHW uint8, LeRobot's downsample rule,
    stats over (0, 2, 3) with keepdims, / 255, batch dim squeezed.
    """
    h, w = frames.shape[1:3]
    f = 1 if max(h, w) < 300 else (int(w / 150) if w > h else int(h / 150))
    img = np.stack([fr.transpose(2, 0, 1)[:, ::f, ::f] for fr in frames])
    out = {
        "min": np.min(img, axis=(0, 2, 3), keepdims=True),
        "max": np.max(img, axis=(0, 2, 3), keepdims=True),
        "mean": np.mean(img, axis=(0, 2, 3), keepdims=True),
        "std": np.std(img, axis=(0, 2, 3), keepdims=True),
    }
    out = {k: np.squeeze(v / 255.0, axis=0) for k, v in out.items()}
    out["count"] = np.array([len(img)])
    return out, img


@pytest.mark.parametrize("shape", [(9, 480, 640), (4, 120, 160), (3, 720, 1280), (5, 640, 480)])
def test_image_stats_match_lerobot(shape):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    frames[..., 0] //= 2  # channels differ
    ref, img = _lerobot_image_stats(frames)
    got = es.image_stats(frames)
    assert set(got) == set(es.EPISODE_STATS_KEYS)
    for k in ("min", "max", "mean", "std"):
        assert got[k].shape == (3, 1, 1)
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=1e-14)
    assert got["count"].tolist() == [shape[0]]
    px = img.transpose(1, 0, 2, 3).reshape(3, -1)
    hist = es.histogram(frames)
    for p in (0.0, 0.01, 0.37, 0.99, 1.0):
        np.testing.assert_allclose(
            es.hist_quantile(hist, p).ravel(), np.quantile(px, p, axis=1) / 255.0, rtol=0, atol=1e-12
        )


def test_sampler_takes_every_stride_th_frame():
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 256, (23, 480, 640, 3), dtype=np.uint8)
    s = es.ImageSampler(stride=5)
    for f in frames:
        s.offer(f)
    assert s.frames == 5
    np.testing.assert_array_equal(s.hist, es.histogram(frames[::5]))


def test_lerobot_sample_indices():
    assert es.lerobot_sample_indices(50) == list(range(50))
    idx = es.lerobot_sample_indices(900)
    assert len(idx) == int(900**0.75) and idx[0] == 0 and idx[-1] == 899
    assert len(es.lerobot_sample_indices(300)) == 100


def test_vector_stats_types_and_shapes():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(50, 4)).astype(np.float32)
    s = es.vector_stats(v)
    assert {k: a.shape for k, a in s.items()} == {"min": (4,), "max": (4,), "mean": (4,), "std": (4,), "count": (1,)}
    assert s["mean"].dtype == np.float32  # numpy on the stored dtype, as LeRobot
    np.testing.assert_array_equal(s["std"], np.std(v, axis=0))
    ts = np.arange(50, dtype=np.float32) / 30
    st = es.vector_stats(ts)
    assert st["min"].shape == (1,) and st["count"].tolist() == [50]
    fi = es.to_jsonable({"frame_index": es.vector_stats(np.arange(7, dtype=np.int64))})["frame_index"]
    assert fi == {"min": [0], "max": [6], "mean": [3.0], "std": [float(np.std(np.arange(7)))], "count": [7]}
    assert isinstance(fi["min"][0], int)


def test_episode_stats_json_layout():
    rng = np.random.default_rng(4)
    frames = rng.integers(0, 256, (6, 48, 64, 3), dtype=np.uint8)
    st = es.episode_stats(
        {"action": rng.normal(size=(6, 2)).astype(np.float32), "index": np.arange(6, dtype=np.int64)},
        {"observation.images.cam": frames},
    )
    json.dumps(st)
    img = st["observation.images.cam"]
    assert sorted(img) == sorted(es.EPISODE_STATS_KEYS)
    assert np.asarray(img["mean"]).shape == (3, 1, 1) and img["count"] == [6]
    assert all(0.0 <= x <= 1.0 for k in ("min", "max", "mean", "std") for x in np.ravel(img[k]))
    assert np.asarray(st["action"]["mean"]).shape == (2,)


def test_aggregate_matches_pooled_data():
    rng = np.random.default_rng(5)
    parts = [rng.normal(i, 1 + i, size=(n, 3)) for i, n in enumerate((10, 40, 7))]
    agg = es.aggregate_stats([{"x": es.vector_stats(p)} for p in parts])["x"]
    pooled = np.concatenate(parts)
    np.testing.assert_allclose(agg["mean"], pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(agg["std"], pooled.std(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(agg["min"], pooled.min(axis=0))
    assert agg["count"].tolist() == [57]
    # images: count-weighted per-channel stats equal the stats of the pooled sample
    frames = [rng.integers(0, 256, (n, 40, 50, 3), dtype=np.uint8) for n in (3, 8)]
    agg = es.aggregate_stats([es.to_jsonable({"im": es.image_stats(f)}) for f in frames])["im"]
    pooled = es.image_stats(np.concatenate(frames))
    for k in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(agg[k], pooled[k], rtol=1e-12)
    entry = es.image_entry(es.histogram(np.concatenate(frames)), 11)
    assert sorted(entry) == sorted(es.IMAGE_STATS_KEYS)
    np.testing.assert_allclose(entry["std"], agg["std"], rtol=1e-12)


def test_decode_sample_reads_every_stride_th_frame(tmp_path):
    rng = np.random.default_rng(6)
    frames = [np.full((64, 80, 3), v, np.uint8) for v in rng.integers(0, 256, 12)]
    path = tmp_path / "v.mp4"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 80, 64, "yuv444p"
        s.options = {"qp": "0"}
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    hist, n = es.decode_sample(path, stride=5)
    assert n == 3
    decoded = es.histogram(np.stack(frames[::5]))
    # flat frames survive a near-lossless round trip within a level or two per channel
    got = es.hist_stats(hist, n)["mean"].ravel()
    want = es.hist_stats(decoded, 3)["mean"].ravel()
    np.testing.assert_allclose(got, want, atol=3 / 255)

"""Writer: exact raw layout (h5py), streaming API errors, append/discard, lifecycle, back-pressure."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from rgbd_writer import RgbdConfig, RgbdWriter, codecs, schema
from rgbd_writer.errors import EpisodeStateError, FileStateError, RgbdError, SchemaError
from rgbd_writer.validate import validate_file

from support import rgbd_crash_worker as cw

H, W = cw.H, cw.W


def cfg(**kw) -> RgbdConfig:
    base = {
        "width": W,
        "height": H,
        "rgb_source": "/cam_front/color/image_raw",
        "depth_source": "/cam_front/aligned_depth_to_color/image_raw",
        "env_args": {"robot": "piper"},
    }
    base.update(kw)
    return RgbdConfig(**base)


@pytest.fixture
def written(tmp_path):
    path = str(tmp_path / "ep.hdf5")
    with RgbdWriter(path, cfg()) as w:
        for e in range(3):
            cw.write_episode(w, e)
    return path


ROOT_EXPECTED = {
    "schema_name": "rlroverlab.offline_rgbd_v2",
    "format_version": 2,
    "writer_status": "complete",
    "visual_profile": "rgb_jpeg_depth_u16_jpeg2000",
    "storage_contract_version": 1,
    "visual_storage_contract": "raw_sensor_values_compressed",
    "training_normalization_applied": False,
    "normalization_contract": "loader_applies_normalization_after_decode",
    "zero_structural_duplication": True,
    "rgb_codec": "jpeg",
    "rgb_jpeg_quality": 88,
    "rgb_source": "/cam_front/color/image_raw",
    "rgb_storage_dtype": "uint8",
    "rgb_storage_range_min": 0,
    "rgb_storage_range_max": 255,
    "depth_codec": "jpeg2000_u16_mm",
    "depth_source": "/cam_front/aligned_depth_to_color/image_raw",
    "depth_source_unit": "meters",
    "depth_storage_dtype": "uint16",
    "depth_storage_unit": "millimeters",
    "depth_psnr_target_db": 50.0,
    "depth_min_m": 0.1,
    "depth_max_m": 6.0,
    "depth_invalid_sentinel": 0,
    "camera_width": W,
    "camera_height": H,
    "camera_channels": 3,
    "depth_jpeg2000_profile": "jpeg2000",
}


def test_raw_layout_matches_reference(written):
    lengths = [cw.episode_length(e) for e in range(3)]
    n_tr, n_obs = sum(lengths), sum(lengths) + 3
    with h5py.File(written, "r") as f:
        a = f.attrs
        for k, v in ROOT_EXPECTED.items():
            assert a[k] == v, k
            assert type(a[k]) is not bytes
        for k in ("recommended_rgb_scale", "rgb_training_scale"):
            assert a[k] == pytest.approx(1 / 255)
        for k in ("recommended_depth_scale_m", "depth_training_scale_m", "depth_unit_m"):
            assert a[k] == pytest.approx(0.001)
        assert (a["total_episodes"], a["total_transitions"], a["total_observations"]) == (3, n_tr, n_obs)
        names = []
        f.visit(names.append)
        assert not [n for n in names if n.split("/")[-1] in ("next_obs", "next_observations")]
        for p in (schema.RGB, schema.DEPTH):
            ds = f[p]
            assert h5py.check_vlen_dtype(ds.dtype) == np.uint8
            assert ds.shape == (n_obs,) and ds.chunks == (1024,) and ds.maxshape == (None,)
        r, d = f[schema.RGB].attrs, f[schema.DEPTH].attrs
        assert dict(r) == {
            "source": "/cam_front/color/image_raw",
            "source_space": "raw_sensor",
            "codec": "jpeg",
            "jpeg_quality": 88,
            "stored_as": "variable_length_uint8_encoded_bytes",
            "decoded_dtype": "uint8",
            "decoded_channel_order": "RGB",
            "decoded_range_min": 0,
            "decoded_range_max": 255,
            "training_normalization_applied": False,
            "recommended_training_scale": pytest.approx(1 / 255),
            "recommended_training_dtype": "float32",
            "width": W,
            "height": H,
            "channels": 3,
        }
        assert d["codec"] == "jpeg2000" and d["codec_input_dtype"] == "uint16" and d["channels"] == 1
        assert (d["decoded_valid_min"], d["decoded_valid_max"], d["invalid_sentinel"]) == (100, 6000, 0)
        assert (d["source_valid_min_m"], d["source_valid_max_m"]) == (0.1, 6.0)
        assert d["decoded_unit"] == "millimeters" and d["source_unit"] == "meters"
        assert d["recommended_training_scale_m"] == pytest.approx(0.001)
        expect = {
            "observations/state/joint": (np.float64, (n_obs, 6), (1024, 6)),
            "observations/state/gripper": (np.float32, (n_obs,), (1024,)),
            "transitions/actions": (np.float32, (n_tr, 7), (1024, 7)),
            "transitions/rewards": (np.float32, (n_tr,), (1024,)),
            "transitions/dones": (np.bool_, (n_tr,), (1024,)),
            "transitions/terminals": (np.bool_, (n_tr,), (1024,)),
            "transitions/timeouts": (np.bool_, (n_tr,), (1024,)),
            "transitions/extra/progress": (np.float32, (n_tr,), (1024,)),
        }
        expect.update({f"index/{k}": (np.int64, (n_tr,), (1024,)) for k in schema.PER_TRANSITION_INDEX})
        expect.update({f"index/{k}": (np.int64, (3,), (1024,)) for k in schema.PER_EPISODE_INDEX})
        for p, (dt, shape, chunks) in expect.items():
            ds = f[p]
            assert (ds.dtype, ds.shape, ds.chunks, ds.maxshape) == (np.dtype(dt), shape, chunks, (None, *shape[1:])), p
        names_ds = [n for n in names if isinstance(f[n], h5py.Dataset)]
        for n in names_ds:
            ds = f[n]
            assert ds.compression is None and not ds.shuffle and not ds.fletcher32 and ds.scaleoffset is None, n
            assert ds.id.get_create_plist().get_nfilters() == 0, n
        # index invariants
        L = np.array(lengths)
        t_off = np.concatenate([[0], np.cumsum(L)[:-1]])
        assert f["index/episode_lengths"][()].tolist() == lengths
        assert f["index/transition_offsets"][()].tolist() == t_off.tolist()
        assert f["index/obs_offsets"][()].tolist() == (t_off + np.arange(3)).tolist()
        oi, ni = f["index/obs_index"][()], f["index/next_obs_index"][()]
        assert np.array_equal(ni, oi + 1) and ni.max() < n_obs
        assert f["index/episode_id"][()].tolist() == [e for e in range(3) for _ in range(lengths[e])]
        assert f["index/episode_transition_index"][()].tolist() == [j for e in range(3) for j in range(lengths[e])]
        assert oi.tolist() == [t_off[e] + e + j for e in range(3) for j in range(lengths[e])]
        # metadata groups
        assert f["data"].attrs["total"] == n_tr and json.loads(f["data"].attrs["env_args"]) == {"robot": "piper"}
        assert sorted(f["episodes"]) == ["demo_0", "demo_1", "demo_2"]
        g = f["episodes/demo_1"].attrs
        assert (g["num_samples"], g["num_observations"], g["obs_offset"], g["transition_offset"]) == (
            lengths[1],
            lengths[1] + 1,
            lengths[0] + 1,
            lengths[0],
        )
        assert g["success"] == True and g["seed"] == 1 and g["task"] == "task 1"  # noqa: E712
        # flags: terminal where given, the recorder's truncation becomes a timeout; dones = either
        term, tout, done = (f[f"transitions/{k}"][()] for k in ("terminals", "timeouts", "dones"))
        assert np.array_equal(done, term | tout)
        last = t_off + L - 1
        assert term[last].tolist() == [True, False, True] and tout[last].tolist() == [False, True, False]
        assert done.sum() == 3
        # payloads: depth bit-exact, RGB decodes
        for e in range(3):
            for t in range(lengths[e] + 1):
                _rgb, depth, state = cw.frame(e, t)
                row = t_off[e] + e + t
                got = codecs.decode_depth_pillow(f[schema.DEPTH][row])
                assert np.array_equal(got, codecs.quantize_depth(depth, 0.1, 6.0))
                assert codecs.decode_rgb_jpeg(f[schema.RGB][row]).shape == (H, W, 3)
                assert np.array_equal(f["observations/state/joint"][row], state["joint"])
    assert validate_file(written, full=True) == []


def test_lifecycle_status_and_totals_current_after_each_episode(tmp_path):
    path = str(tmp_path / "life.hdf5")
    w = RgbdWriter(path, cfg())
    with h5py.File(path, "r") as f:
        assert f.attrs["writer_status"] == "incomplete" and f.attrs["total_episodes"] == 0
        assert "camera_width" not in f.attrs
    total_t = 0
    for e in range(2):
        cw.write_episode(w, e)
        total_t += cw.episode_length(e)
        with h5py.File(path, "r") as f:  # readable between episodes, counters current
            assert f.attrs["writer_status"] == "incomplete"
            assert (f.attrs["total_episodes"], f.attrs["total_transitions"], f.attrs["total_observations"]) == (
                e + 1,
                total_t,
                total_t + e + 1,
            )
            assert f.attrs["camera_width"] == W
        assert any("writer_status" in p for p in validate_file(path))
    w.close()
    assert validate_file(path) == []
    with h5py.File(path, "r") as f:
        assert f.attrs["writer_status"] == "complete"
    assert sorted(os.listdir(tmp_path)) == ["life.hdf5"]


def test_append_to_complete_file_and_config_mismatch(written):
    with pytest.raises(FileStateError, match="rgb_jpeg_quality"):
        RgbdWriter(written, cfg(rgb_jpeg_quality=70))
    with pytest.raises(FileStateError, match="camera_width"):
        RgbdWriter(written, cfg(width=32))
    with RgbdWriter(written, cfg()) as w:
        assert w.total_episodes == 3
        cw.write_episode(w, 3)
    assert validate_file(written, full=True) == []
    with h5py.File(written, "r") as f:
        assert f.attrs["total_episodes"] == 4 and f["index/episode_id"][-1] == 3


def test_second_writer_refused(written):
    with RgbdWriter(written, cfg()), pytest.raises(FileStateError, match="another writer"):
        RgbdWriter(written, cfg())


def test_creates_missing_parent_directories(tmp_path):
    # the recorders start in parallel: the RGB-D file's folder may not exist yet
    path = tmp_path / "not" / "yet" / "rgbd.hdf5"
    with RgbdWriter(path, cfg()):
        pass
    assert path.exists() and validate_file(str(path)) == []


def test_refuses_wrong_inputs_with_clear_errors(tmp_path):
    w = RgbdWriter(str(tmp_path / "bad.hdf5"), cfg())
    rgb, depth, state = cw.frame(0, 0)
    with pytest.raises(EpisodeStateError, match="start_episode"):
        w.add_observation(rgb, depth, state)
    w.start_episode()
    with pytest.raises(EpisodeStateError, match="already recording"):
        w.start_episode()
    with pytest.raises(EpisodeStateError, match="needs observation 0"):
        w.add_transition(np.zeros(7), 0.0)
    with pytest.raises(SchemaError, match="rgb must be uint8"):
        w.add_observation(rgb.astype(np.float32), depth, state)
    with pytest.raises(SchemaError, match="rgb is"):
        w.add_observation(rgb[:10], depth, state)
    with pytest.raises(SchemaError, match="depth must be HxW"):
        w.add_observation(rgb, depth[:10], state)
    with pytest.raises(SchemaError, match="depth must be float metres or uint16"):
        w.add_observation(rgb, np.zeros(depth.shape, np.int32), state)
    with pytest.raises(SchemaError, match="state 'joint' contains non-finite"):
        w.add_observation(rgb, depth, {**state, "joint": np.full(6, np.nan)})
    w.add_observation(rgb, depth, state)
    with pytest.raises(SchemaError, match="state keys"):
        w.add_observation(rgb, depth, {"joint": state["joint"]})
    with pytest.raises(SchemaError, match="state 'joint' has shape"):
        w.add_observation(rgb, depth, {**state, "joint": np.zeros(5)})
    with pytest.raises(SchemaError, match="non-finite"):
        w.add_transition(np.array([0, np.inf, 0, 0, 0, 0, 0]), 0.0)
    with pytest.raises(SchemaError, match="reward"):
        w.add_transition(np.zeros(7), float("nan"))
    w.add_transition(np.zeros(7), 1.0)
    with pytest.raises(EpisodeStateError, match="1 observations and 1 transitions"):
        w.end_episode()
    w.add_observation(rgb, depth, state)  # the episode stayed open: complete it
    with pytest.raises(SchemaError, match="action shape"):
        w.add_transition(np.zeros(3), 0.0)
    summary = w.end_episode(success=False)
    assert summary["num_samples"] == 1 and summary["truncated"] is True
    w.start_episode()
    with pytest.raises(SchemaError, match="state keys"):  # now fixed by the file
        w.add_observation(rgb, depth, {})
    w.add_observation(rgb, depth, state)
    with pytest.raises(SchemaError, match="action shape"):
        w.add_transition(np.zeros(6), 0.0)
    with pytest.raises(EpisodeStateError, match="at least one transition"):
        w.end_episode()
    w.discard_episode()
    w.close()
    assert validate_file(str(tmp_path / "bad.hdf5"), full=True) == []
    with pytest.raises(EpisodeStateError, match="closed"):
        w.start_episode()


def test_discard_restores_the_file_byte_for_byte(written):
    w = RgbdWriter(written, cfg())
    mid = open(written, "rb").read()  # status flipped to incomplete
    w.start_episode()
    for t in range(4):
        w.add_observation(*cw.frame(9, t))
        w.add_transition(np.ones(7), 0.0, extras={"progress": np.float32(0)})
    w.discard_episode()
    assert open(written, "rb").read() == mid
    w.close()
    assert validate_file(written, full=True) == []
    with h5py.File(written, "r") as f:
        assert f.attrs["total_episodes"] == 3 and f.attrs["writer_status"] == "complete"
        assert f[schema.RGB].shape[0] == f.attrs["total_observations"]


@pytest.mark.skipif(not codecs.htj2k_available(), reason="this imagecodecs encodes no HTJ2K")
def test_depth_inputs_metres_and_millimetres_and_htj2k_profile(tmp_path):
    path = str(tmp_path / "ht.hdf5")
    _, depth_m, _ = cw.frame(5, 0)
    mm_in = np.nan_to_num(depth_m * 1000, nan=0, posinf=0, neginf=0).clip(0, 65535).astype(np.uint16)
    with RgbdWriter(path, cfg(depth_codec="htj2k")) as w:
        w.start_episode()
        rgb = cw.frame(5, 0)[0]
        rgba = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
        w.add_observation(rgba, depth_m[..., None])  # RGBA (alpha dropped), HxWx1 float metres
        w.add_transition(np.zeros(2), 0.0)
        w.add_observation(rgb, mm_in)  # uint16 millimetres
        w.end_episode()
    with h5py.File(path, "r") as f:
        assert f.attrs["depth_codec"] == "jpeg2000_u16_mm" and f.attrs["depth_jpeg2000_profile"] == "htj2k"
        assert (
            f[schema.DEPTH].attrs["codec"] == "jpeg2000" and f[schema.DEPTH].attrs["depth_jpeg2000_profile"] == "htj2k"
        )
        assert "state" in f["observations"] and len(f["observations/state"]) == 0
        d0 = codecs.decode_depth_pillow(f[schema.DEPTH][0])
        d1 = codecs.decode_depth_pillow(f[schema.DEPTH][1])
        rgb0 = codecs.decode_rgb_jpeg(f[schema.RGB][0])
    assert np.array_equal(d0, codecs.quantize_depth(depth_m, 0.1, 6.0))
    assert np.array_equal(rgb0, codecs.decode_rgb_jpeg(codecs.encode_rgb_jpeg(rgb, 88)))
    assert np.array_equal(d1, codecs.quantize_depth(mm_in, 0.1, 6.0))
    assert (d0 == 0).sum() > 0 and d0[0, :4].tolist() == [0, 0, 0, 0]
    assert validate_file(path, full=True) == []


def test_backpressure_is_counted_and_nothing_dropped(tmp_path):
    path = str(tmp_path / "bp.hdf5")
    c = cfg(workers=1, queue_size=1, width=320, height=240)
    with RgbdWriter(path, c) as w:
        w.start_episode()
        for t in range(8):
            rgb, depth, _ = cw.frame(0, t, 240, 320)
            w.add_observation(rgb, depth)
            assert w.backlog <= 1
            if t < 7:
                w.add_transition(np.zeros(1), 0.0)
        w.end_episode()
        assert w.stats.backpressure_waits > 0 and w.stats.backpressure_wait_s > 0
        assert w.stats.frames_written == w.stats.frames_submitted == 8 and w.stats.max_backlog == 1
    assert validate_file(path, full=True) == []


def test_refuses_foreign_file(tmp_path):
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f.attrs["schema_name"] = "something_else"
    with pytest.raises(FileStateError, match="schema_name"):
        RgbdWriter(str(p), cfg())


def test_add_encoded_observation_copies_payloads(written, tmp_path):
    out = str(tmp_path / "copy.hdf5")
    with h5py.File(written, "r") as src, RgbdWriter(out, cfg()) as w:
        T = int(src["index/episode_lengths"][0])
        w.start_episode(seed=0)
        for i in range(T + 1):
            st = {k: src["observations/state"][k][i] for k in src["observations/state"]}
            w.add_encoded_observation(src[schema.RGB][i], bytes(src[schema.DEPTH][i]), st)
            if i < T:
                w.add_transition(src["transitions/actions"][i], 0.0, extras={"progress": np.float32(0)})
        with pytest.raises(SchemaError, match="not a JPEG"):
            w.add_encoded_observation(src[schema.DEPTH][0], src[schema.DEPTH][0])
        w.cfg.depth_codec = "htj2k"
        with pytest.raises(SchemaError, match="the file uses htj2k"):
            w.add_encoded_observation(src[schema.RGB][0], src[schema.DEPTH][0])
        w.cfg.depth_codec = "jpeg2000"
        w.end_episode()
        small = codecs.encode_rgb_jpeg(np.zeros((8, 8, 3), np.uint8), 88)
        w.start_episode()
        with pytest.raises(SchemaError, match="8x8"):
            w.add_encoded_observation(small, src[schema.DEPTH][0])
        w.discard_episode()
    with h5py.File(written, "r") as a, h5py.File(out, "r") as b:
        for i in range(T + 1):
            assert bytes(a[schema.RGB][i]) == bytes(b[schema.RGB][i])
            assert bytes(a[schema.DEPTH][i]) == bytes(b[schema.DEPTH][i])
    assert validate_file(out, full=True) == []


def test_delete_last_episode_then_append(written):
    with h5py.File(written, "r") as f:
        keep = [bytes(f[schema.DEPTH][i]) for i in range(int(f["index/obs_offsets"][2]))]
    with RgbdWriter(written, cfg()) as w:
        assert w.delete_last_episode() == 2 and w.total_episodes == 2
        assert (
            validate_file(written).count("writer_status is 'incomplete': the file is being written or was not closed")
            == 1
        )
        w.start_episode()
        with pytest.raises(EpisodeStateError, match="in flight"):
            w.delete_last_episode()
        w.discard_episode()
        cw.write_episode(w, 2)  # re-recorded: same content, same place
        assert w.delete_last_episode() == 2
        assert w.delete_last_episode() == 1
        cw.write_episode(w, 1)
    assert validate_file(written, full=True) == []
    with h5py.File(written, "r") as f:
        assert f.attrs["total_episodes"] == 2 and sorted(f["episodes"]) == ["demo_0", "demo_1"]
        assert [bytes(f[schema.DEPTH][i]) for i in range(len(keep))] == keep
    with RgbdWriter(written, cfg()) as w:
        w.delete_last_episode()
        w.delete_last_episode()
        with pytest.raises(EpisodeStateError, match="no episode"):
            w.delete_last_episode()
    assert validate_file(written) == []


def test_htj2k_without_an_encoder_is_refused_when_configured_and_when_a_frame_comes(tmp_path, monkeypatch):
    """Not an encoder thread's AttributeError at the first frame: the recorder and the converter refuse it when
    they make their writer's config (at start), the writer before it queues a frame, naming the profiles there
    are. The parameters themselves still load (a config file is not wrong on another install).
    """
    from piper_recorder.recording.config import RgbdRecorderConfig, rgbd_writer_config

    monkeypatch.setattr(codecs, "htj2k_available", lambda: False)
    RgbdRecorderConfig(depth_codec="htj2k").validate()
    with pytest.raises(
        RgbdError, match=r"depth_codec: depth profile 'htj2k' is unavailable.*jpeg2000, jpeg2000_strict$"
    ):
        rgbd_writer_config(RgbdRecorderConfig(depth_codec="htj2k"))
    assert rgbd_writer_config(RgbdRecorderConfig(depth_codec="jpeg2000_strict")).depth_codec == "jpeg2000_strict"
    rgb, depth, _ = cw.frame(1, 0)
    with RgbdWriter(str(tmp_path / "ht.hdf5"), cfg(depth_codec="htj2k")) as w:
        w.start_episode()
        with pytest.raises(RgbdError, match=f"needs imagecodecs >= {codecs.HTJ2K_IMAGECODECS}"):
            w.add_observation(rgb, depth)
        w.discard_episode()

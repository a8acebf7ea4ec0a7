"""validate_file: a valid file passes; a corrupted copy is reported for every invariant it checks."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from PIL import Image

from rgbd_writer import RgbdConfig, RgbdWriter, codecs, schema
from rgbd_writer.validate import validate_file

from support import rgbd_crash_worker as cw


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("val") / "valid.hdf5")
    with RgbdWriter(p, RgbdConfig(width=cw.W, height=cw.H, rgb_source="/c/rgb", depth_source="/c/d")) as w:
        for e in range(3):
            cw.write_episode(w, e)
    return p


def _recreate(f, path, **kw):
    """Replace a dataset by one with the same data/attrs but changed creation properties."""
    old = f[path]
    data, attrs, dtype = old[()], dict(old.attrs), old.dtype
    del f[path]
    args = {"data": data, "dtype": dtype, "chunks": old.chunks, "maxshape": old.maxshape}
    args.update(kw)
    if "dtype" in kw and "data" not in kw:
        args["data"] = data.astype(kw["dtype"])
    ds = f.create_dataset(path, **args)
    ds.attrs.update(attrs)


def _set(path, value):
    def m(f):
        f[path][...] = value(f[path][()]) if callable(value) else value

    return m


def _attr(obj, key, value):
    def m(f):
        if value is None:
            del f[obj].attrs[key]
        else:
            f[obj].attrs[key] = value

    return m


def _bad_depth_row(f):
    mm = np.full((cw.H, cw.W), 7000, np.uint16)  # beyond depth_max_m
    f[schema.DEPTH][0] = np.frombuffer(codecs.encode_depth(mm, "jpeg2000"), np.uint8)


def _wrong_size_rgb(f):
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, format="JPEG")
    f[schema.RGB][1] = np.frombuffer(buf.getvalue(), np.uint8)


MUTATIONS = {
    "schema_name": (_attr("/", "schema_name", "rlroverlab.offline_rgbd_v1"), "schema_name"),
    "format_version": (_attr("/", "format_version", 1), "format_version"),
    "writer_status incomplete": (_attr("/", "writer_status", "incomplete"), "writer_status"),
    "writer_status bogus": (_attr("/", "writer_status", "done"), "writer_status"),
    "zero_structural_duplication": (_attr("/", "zero_structural_duplication", False), "zero_structural_duplication"),
    "rgb scale": (_attr("/", "recommended_rgb_scale", 1.0), "recommended_rgb_scale"),
    "depth scale": (_attr("/", "recommended_depth_scale_m", 0.01), "recommended_depth_scale_m"),
    "sentinel": (_attr("/", "depth_invalid_sentinel", 1), "depth_invalid_sentinel"),
    "depth_codec": (_attr("/", "depth_codec", "png"), "depth_codec"),
    "missing attr": (_attr("/", "visual_profile", None), "visual_profile missing"),
    "rgb_source type": (_attr("/", "rgb_source", 5), "rgb_source"),
    "jpeg quality": (_attr("/", "rgb_jpeg_quality", 300), "rgb_jpeg_quality"),
    "depth range": (_attr("/", "depth_min_m", 7.0), "depth_min_m"),
    "total_episodes": (_attr("/", "total_episodes", 4), "total_episodes"),
    "total_transitions": (_attr("/", "total_transitions", 1), "total_transitions"),
    "total_observations": (_attr("/", "total_observations", 5), "total_observations"),
    "camera_width": (_attr("/", "camera_width", 10), "width"),
    "camera_channels": (_attr("/", "camera_channels", 4), "camera_channels"),
    "physical next_obs group": (lambda f: f.create_group("next_obs"), "next_obs"),
    "nested next_obs dataset": (lambda f: f.create_dataset("observations/next_obs", data=[1]), "next_obs"),
    "missing dataset": (lambda f: f.__delitem__("index/obs_index"), "obs_index: missing"),
    "missing state group": (lambda f: f.__delitem__("observations/state"), "state: missing"),
    "missing actions": (lambda f: f.__delitem__("transitions/actions"), "actions: missing"),
    "obs_index": (_set("index/obs_index", lambda a: a + (np.arange(a.size) == 2)), "obs_index"),
    "next_obs_index": (_set("index/next_obs_index", lambda a: a + (np.arange(a.size) == 3)), "next_obs_index"),
    "next past end": (
        _set("index/next_obs_index", lambda a: np.where(np.arange(a.size) == a.size - 1, 10**6, a)),
        "next_obs_index",
    ),
    "episode_id": (_set("index/episode_id", lambda a: a[::-1]), "episode_id"),
    "episode_transition_index": (_set("index/episode_transition_index", lambda a: a * 0), "episode_transition_index"),
    "episode_lengths": (_set("index/episode_lengths", lambda a: a + [1, -1, 0]), "cumulative episode lengths"),
    "obs_offsets": (_set("index/obs_offsets", lambda a: a + [0, 1, 0]), "obs_offsets"),
    "transition_offsets": (_set("index/transition_offsets", lambda a: a + [0, 0, 1]), "transition_offsets"),
    "dones": (_set("transitions/dones", lambda a: ~a), "dones"),
    "rows vs totals": (lambda f: f[schema.RGB].resize((f[schema.RGB].shape[0] - 1,)), "rows, expected"),
    "state rows": (lambda f: f["observations/state/joint"].resize((3, 6)), "state/joint: has 3 rows"),
    "action rows": (lambda f: f["transitions/actions"].resize((2, 7)), "actions: has 2 rows"),
    "non-finite action": (
        _set("transitions/actions", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 5, np.nan, a)),
        "non-finite",
    ),
    "rewards dtype": (lambda f: _recreate(f, "transitions/rewards", dtype=np.float64), "rewards: dtype"),
    "index dtype": (lambda f: _recreate(f, "index/episode_lengths", dtype=np.int32), "episode_lengths: dtype"),
    "vlen dtype": (
        lambda f: _recreate(f, schema.RGB, data=np.zeros(f[schema.RGB].shape, np.uint8), dtype=np.uint8),
        "rgb_jpeg: dtype",
    ),
    "index chunks": (lambda f: _recreate(f, "index/obs_index", chunks=(512,)), "chunks"),
    "numeric chunk rule": (lambda f: _recreate(f, "transitions/actions", chunks=(64, 7)), "actions: chunks"),
    "vlen chunks": (lambda f: _recreate(f, schema.DEPTH, chunks=(16,)), "depth_jp2: chunks"),
    "maxshape": (lambda f: _recreate(f, "transitions/terminals", maxshape=(4096,)), "maxshape"),
    "gzip filter": (lambda f: _recreate(f, "transitions/timeouts", compression="gzip"), "filters"),
    "rgb ds attr": (_attr(schema.RGB, "codec", "png"), "rgb_jpeg: attribute codec"),
    "rgb ds quality": (_attr(schema.RGB, "jpeg_quality", 50), "jpeg_quality"),
    "depth ds attr": (_attr(schema.DEPTH, "decoded_valid_max", 5000), "decoded_valid_max"),
    "depth ds unit": (_attr(schema.DEPTH, "decoded_unit", "meters"), "decoded_unit"),
    "data total": (_attr("data", "total", 1), "/data: attribute total"),
    "env_args": (_attr("data", "env_args", "{not json"), "env_args"),
    "demo missing": (lambda f: f.__delitem__("episodes/demo_1"), "demo_1: missing"),
    "demo extra": (lambda f: f.create_group("episodes/demo_9"), "demo_9: unexpected"),
    "demo num_samples": (_attr("episodes/demo_0", "num_samples", 99), "num_samples"),
    "demo obs_offset": (_attr("episodes/demo_2", "obs_offset", 0), "obs_offset"),
    "demo num_observations": (_attr("episodes/demo_1", "num_observations", 1), "num_observations"),
    "garbage rgb payload": (lambda f: f[schema.RGB].__setitem__(0, np.arange(50, dtype=np.uint8)), "rgb_jpeg[0]"),
    "rgb wrong size": (_wrong_size_rgb, "rgb_jpeg[1]"),
    "depth not jp2": (lambda f: f[schema.DEPTH].__setitem__(2, np.arange(50, dtype=np.uint8)), "depth_jp2[2]"),
    "depth out of range": (_bad_depth_row, "outside"),
    "depth profile attr": (_attr("/", "depth_jpeg2000_profile", "htj2k"), "the file says htj2k"),
    "strict payload in default file": (
        lambda f: f[schema.DEPTH].__setitem__(
            1, np.frombuffer(codecs.encode_depth(np.zeros((cw.H, cw.W), np.uint16), "jpeg2000_strict"), np.uint8)
        ),
        "jpeg2000_strict",
    ),
    "depth ds profile": (_attr(schema.DEPTH, "depth_jpeg2000_profile", "htj2k"), "depth_jp2: attribute depth_jpeg2000"),
    "unknown profile": (_attr("/", "depth_jpeg2000_profile", "jpegxl"), "depth_jpeg2000_profile"),
}


@pytest.mark.integration
def test_valid_file_passes_and_cli(valid):
    assert validate_file(valid) == [] and validate_file(valid, full=True) == []
    r = subprocess.run([sys.executable, "-m", "rgbd_writer.validate", valid, "--full"], capture_output=True, text=True)
    assert r.returncode == 0 and "OK" in r.stdout


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_is_reported(valid, tmp_path, name):
    mutate, needle = MUTATIONS[name]
    bad = str(tmp_path / "bad.hdf5")
    shutil.copyfile(valid, bad)
    with h5py.File(bad, "r+") as f:
        mutate(f)
    problems = validate_file(bad, full=True)
    assert any(needle in p for p in problems), problems


@pytest.mark.integration
def test_non_hdf5_and_cli_failure(tmp_path):
    p = tmp_path / "x.hdf5"
    p.write_bytes(b"not hdf5")
    assert "cannot open" in validate_file(str(p))[0]
    r = subprocess.run([sys.executable, "-m", "rgbd_writer.validate", str(p)], capture_output=True, text=True)
    assert r.returncode == 1


def test_sampled_mode_checks_episode_boundary_rows(valid, tmp_path):
    bad = str(tmp_path / "bad.hdf5")
    shutil.copyfile(valid, bad)
    with h5py.File(bad, "r+") as f:
        last = int(f.attrs["total_observations"]) - 1
        f[schema.DEPTH][last] = np.arange(50, dtype=np.uint8)
    assert any(f"depth_jp2[{last}]" in p for p in validate_file(bad))


def test_success_is_optional_and_a_boolean_where_present(tmp_path):
    """``success`` where known: labelled episodes carry a boolean, unlabelled ones none; both validate."""
    p = str(tmp_path / "mixed.hdf5")
    with RgbdWriter(p, RgbdConfig(width=cw.W, height=cw.H, rgb_source="/c/rgb", depth_source="/c/d")) as w:
        for e, success in enumerate((True, None, False)):
            cw.write_episode(w, e, success=success)
    with h5py.File(p, "r") as f:
        assert [f[f"episodes/demo_{e}"].attrs.get("success") for e in range(3)] == [True, None, False]
    assert validate_file(p, full=True) == []
    with h5py.File(p, "r+") as f:
        f["episodes/demo_1"].attrs["success"] = "yes"
    assert validate_file(p) == [
        "/episodes/demo_1: attribute success is 'yes', expected a boolean (or no success attribute: not known)"
    ]

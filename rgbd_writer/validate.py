"""Check an ``rlroverlab.offline_rgbd_v2`` file against the reference schema and our writer's invariants.

``validate_file(path, full=False)`` returns a list of problems (empty = valid). Payloads are decoded
for a sample of observations (first and last of every episode, capped), or all with ``full=True``.
Run as ``python -m rgbd_writer.validate FILE [--full]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping

import h5py
import numpy as np
from numpy.typing import DTypeLike, NDArray

from . import codecs, schema

_SAMPLE_CAP = 16

_FIXED_ROOT: dict[str, schema.AttrValue] = {
    "schema_name": schema.SCHEMA_NAME,
    "format_version": schema.FORMAT_VERSION,
    "visual_profile": schema.VISUAL_PROFILE,
    "storage_contract_version": 1,
    "visual_storage_contract": "raw_sensor_values_compressed",
    "training_normalization_applied": False,
    "normalization_contract": "loader_applies_normalization_after_decode",
    "recommended_rgb_scale": 1 / 255,
    "rgb_training_scale": 1 / 255,
    "recommended_depth_scale_m": 0.001,
    "depth_training_scale_m": 0.001,
    "depth_unit_m": 0.001,
    "zero_structural_duplication": True,
    "rgb_codec": "jpeg",
    "rgb_storage_dtype": "uint8",
    "rgb_storage_range_min": 0,
    "rgb_storage_range_max": 255,
    "depth_codec": schema.DEPTH_CODEC_ATTR,
    "depth_source_unit": "meters",
    "depth_storage_dtype": "uint16",
    "depth_storage_unit": "millimeters",
    "depth_psnr_target_db": 50.0,
    "depth_invalid_sentinel": 0,
}
_FIXED_RGB: dict[str, schema.AttrValue] = {
    "source_space": "raw_sensor",
    "codec": "jpeg",
    "stored_as": schema.STORED_AS,
    "decoded_dtype": "uint8",
    "decoded_channel_order": "RGB",
    "decoded_range_min": 0,
    "decoded_range_max": 255,
    "training_normalization_applied": False,
    "recommended_training_scale": 1 / 255,
    "recommended_training_dtype": "float32",
    "channels": 3,
}
_FIXED_DEPTH: dict[str, schema.AttrValue] = {
    "source_space": "raw_sensor",
    "source_unit": "meters",
    "codec": "jpeg2000",
    "codec_input_dtype": "uint16",
    "stored_as": schema.STORED_AS,
    "decoded_dtype": "uint16",
    "decoded_unit": "millimeters",
    "invalid_sentinel": 0,
    "recommended_training_scale_m": 0.001,
    "recommended_training_dtype": "float32",
    "channels": 1,
}


def _same(a: object, b: schema.AttrValue) -> bool:
    if isinstance(b, str):
        return isinstance(a, str) and a == b
    if isinstance(b, bool):
        return isinstance(a, (bool, np.bool_)) and bool(a) == b
    if isinstance(b, int):
        return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) and int(a) == b
    return isinstance(a, (float, np.floating, int, np.integer)) and math.isclose(float(a), b, rel_tol=1e-9)


def _check_fixed(
    where: str, attrs: h5py.AttributeManager, expected: Mapping[str, schema.AttrValue], problems: list[str]
) -> None:
    for k, v in expected.items():
        if k not in attrs:
            problems.append(f"{where}: attribute {k} missing")
        elif not _same(attrs[k], v):
            problems.append(f"{where}: attribute {k} is {attrs[k]!r}, expected {v!r}")


def _int_attr(where: str, attrs: h5py.AttributeManager, k: str, problems: list[str], minimum: int = 0) -> int | None:
    v = attrs.get(k)
    if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < minimum:
        problems.append(f"{where}: attribute {k} must be an int >= {minimum}, got {v!r}")
        return None
    return int(v)


def _check_layout(
    ds: h5py.Dataset,
    dtype: DTypeLike | None,
    n_rows: int,
    chunks: tuple[int, ...] | None,
    problems: list[str],
    vlen: bool = False,
    count: str = "total_observations",
) -> bool:
    """dtype, row count, chunk shape, maxshape, no filters. Returns False if the dataset is unusable."""
    name = ds.name
    ok = True
    if vlen:
        base = h5py.check_vlen_dtype(ds.dtype)
        if base is None or np.dtype(base) != np.uint8:
            problems.append(f"{name}: dtype must be vlen uint8, got {ds.dtype}")
            ok = False
    elif dtype is not None and ds.dtype != np.dtype(dtype):
        problems.append(f"{name}: dtype {ds.dtype}, expected {np.dtype(dtype)}")
        ok = False
    if ds.shape[0:1] != (n_rows,):
        problems.append(f"{name}: has {ds.shape[0] if ds.shape else 'no'} rows, expected {n_rows} ({count})")
        ok = False
    if chunks is None:
        chunks = schema.numeric_chunks(tuple(ds.shape[1:]), ds.dtype)
    if ds.chunks != tuple(chunks):
        problems.append(f"{name}: chunks {ds.chunks}, expected {tuple(chunks)}")
    if ds.maxshape != (None, *ds.shape[1:]):
        problems.append(f"{name}: maxshape {ds.maxshape}, expected {(None, *ds.shape[1:])}")
    if ds.id.get_create_plist().get_nfilters() != 0:
        problems.append(f"{name}: has compression/filters (payloads are already compressed)")
    return ok


def _check_index(f: h5py.File, E: int, N_tr: int, N_obs: int, problems: list[str]) -> dict[str, NDArray[np.int64]]:
    idx: dict[str, NDArray[np.int64]] = {}
    for name in schema.PER_TRANSITION_INDEX + schema.PER_EPISODE_INDEX:
        path = f"index/{name}"
        if path not in f:
            problems.append(f"/{path}: missing")
            continue
        per_tr = name in schema.PER_TRANSITION_INDEX
        if _check_layout(
            f[path],
            np.int64,
            N_tr if per_tr else E,
            (schema.INDEX_CHUNK,),
            problems,
            count="total_transitions" if per_tr else "total_episodes",
        ):
            idx[name] = f[path][()]
    if len(idx) != 7:
        return idx
    lengths = idx["episode_lengths"]
    if lengths.size and lengths.min() < 1:
        problems.append("/index/episode_lengths: episodes must have at least one transition")
    if int(lengths.sum()) != N_tr:
        problems.append(f"total_transitions {N_tr} != sum(episode_lengths) {int(lengths.sum())}")
    if N_obs != N_tr + E:
        problems.append(f"total_observations {N_obs} != total_transitions + total_episodes {N_tr + E}")
    t_off = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if E else np.zeros(0, np.int64)
    if not np.array_equal(idx["transition_offsets"], t_off):
        problems.append("/index/transition_offsets != cumulative episode lengths")
    if not np.array_equal(idx["obs_offsets"], t_off + np.arange(E)):
        problems.append("/index/obs_offsets != transition_offsets + episode number")
    if int(lengths.sum()) == N_tr and np.all(lengths >= 0):
        ep = np.repeat(np.arange(E, dtype=np.int64), lengths)
        j = np.arange(N_tr, dtype=np.int64) - np.repeat(t_off, lengths)
        obs = np.repeat(t_off + np.arange(E), lengths) + j
        for name, want in (("episode_id", ep), ("episode_transition_index", j), ("obs_index", obs)):
            if not np.array_equal(idx[name], want):
                bad = int(np.flatnonzero(idx[name] != want)[0])
                problems.append(f"/index/{name}[{bad}] is {idx[name][bad]}, expected {want[bad]}")
    nxt, obs = idx["next_obs_index"], idx["obs_index"]
    if not np.array_equal(nxt, obs + 1):
        problems.append("/index/next_obs_index != obs_index + 1")
    if N_tr and (nxt.max() >= N_obs or obs.min() < 0):
        problems.append(f"/index: next_obs_index/obs_index outside [0, total_observations={N_obs})")
    return idx


def _sample_rows(idx: Mapping[str, NDArray[np.int64]], N_obs: int, full: bool) -> list[int]:
    if full:
        return list(range(N_obs))
    if "obs_offsets" not in idx or "episode_lengths" not in idx:
        return sorted({0, N_obs - 1}) if N_obs else []
    rows: set[int] = set()
    for o, t in zip(idx["obs_offsets"], idx["episode_lengths"]):
        rows.update((int(o), int(o + t)))
        if len(rows) >= _SAMPLE_CAP:
            break
    return sorted(r for r in rows if 0 <= r < N_obs)


def _check_payloads(
    f: h5py.File, rows: list[int], H: int, W: int, vmin: int, vmax: int, profile: str | None, problems: list[str]
) -> None:
    rgb_ds, depth_ds = f[schema.RGB], f[schema.DEPTH]
    reported = 0
    for r in rows:
        if reported >= 10:
            problems.append("... further payload problems not listed")
            return
        try:
            img = codecs.decode_rgb_jpeg(rgb_ds[r])
            if img.shape != (H, W, 3):
                raise ValueError(f"decoded shape {img.shape}, expected {(H, W, 3)}")
        except Exception as e:  # whatever the decoder raises is reported as a problem  # noqa: BLE001
            problems.append(f"{schema.RGB}[{r}]: does not decode as a {W}x{H} RGB JPEG ({e})")
            reported += 1
        try:
            raw = bytes(depth_ds[r])
            if not raw.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n"):
                raise ValueError("not a JP2 file")
            if profile is not None and codecs.jp2_profile(raw) != profile:
                raise ValueError(f"encoded as {codecs.jp2_profile(raw)}, the file says {profile}")
            d = codecs.decode_depth_pillow(raw)
            if d.shape != (H, W) or d.dtype != np.uint16:
                raise ValueError(f"decoded {d.dtype} {d.shape}, expected uint16 {(H, W)}")
            nz = d[d != 0]
            if nz.size and (nz.min() < vmin or nz.max() > vmax):
                raise ValueError(f"non-zero depth outside [{vmin}, {vmax}] mm")
        except Exception as e:  # whatever the decoder raises is reported as a problem  # noqa: BLE001
            problems.append(f"{schema.DEPTH}[{r}]: bad depth payload ({e})")
            reported += 1


def _walk_names(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visit(names.append)
    return names


def validate_file(path: str | os.PathLike[str], full: bool = False) -> list[str]:
    """Return every problem found in ``path`` (empty list = valid and complete)."""
    problems: list[str] = []
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        return [f"{path}: cannot open as HDF5 ({e})"]
    with f:
        a = f.attrs
        if a.get("schema_name") != schema.SCHEMA_NAME:
            return [f"schema_name is {a.get('schema_name')!r}, expected {schema.SCHEMA_NAME!r}"]
        _check_fixed("/", a, _FIXED_ROOT, problems)
        status = a.get("writer_status")
        if status not in schema.STATUSES:
            problems.append(f"writer_status {status!r} is not one of {schema.STATUSES}")
        elif status != "complete":
            problems.append(f"writer_status is {status!r}: the file is being written or was not closed")
        if a.get(schema.DEPTH_PROFILE_ATTR, "jpeg2000") not in codecs.DEPTH_PROFILES:
            problems.append(f"{schema.DEPTH_PROFILE_ATTR} {a.get(schema.DEPTH_PROFILE_ATTR)!r} unknown")
        for k in ("rgb_source", "depth_source"):
            if not isinstance(a.get(k), str):
                problems.append(f"/: attribute {k} must be a string")
        q = _int_attr("/", a, "rgb_jpeg_quality", problems, 1)
        if q is not None and q > 100:
            problems.append("/: rgb_jpeg_quality must be <= 100")
        dmin, dmax = a.get("depth_min_m"), a.get("depth_max_m")
        if not (isinstance(dmin, (float, np.floating)) and isinstance(dmax, (float, np.floating)) and 0 < dmin < dmax):
            problems.append(f"/: need float 0 < depth_min_m < depth_max_m, got {dmin!r}, {dmax!r}")
            dmin, dmax = 0.001, 65.535
        E = _int_attr("/", a, "total_episodes", problems)
        N_tr = _int_attr("/", a, "total_transitions", problems)
        N_obs = _int_attr("/", a, "total_observations", problems)
        if E is None or N_tr is None or N_obs is None:
            return problems
        H = W = None
        if E > 0:
            W = _int_attr("/", a, "camera_width", problems, 1)
            H = _int_attr("/", a, "camera_height", problems, 1)
            if a.get("camera_channels") != 3:
                problems.append(f"/: camera_channels is {a.get('camera_channels')!r}, expected 3")

        for n in _walk_names(f):
            if any(part in ("next_obs", "next_observations") for part in n.split("/")):
                problems.append(f"/{n}: a physical next_obs must not exist (use /index/next_obs_index)")

        required = [schema.RGB, schema.DEPTH, schema.STATE, schema.REWARDS, "episodes", "data"]
        required += [f"transitions/{x}" for x in schema.FLAGS]
        if E > 0:
            required.append(schema.ACTIONS)
        missing = [p for p in required if p not in f]
        problems += [f"/{p}: missing" for p in missing]

        vmin = int(round(float(dmin) * 1000))
        vmax = int(round(float(dmax) * 1000))
        payload_ok = True
        for p, fixed in ((schema.RGB, _FIXED_RGB), (schema.DEPTH, _FIXED_DEPTH)):
            if p in missing:
                payload_ok = False
                continue
            ds = f[p]
            payload_ok &= _check_layout(ds, None, N_obs, (schema.VLEN_CHUNK,), problems, vlen=True)
            _check_fixed(f"/{p}", ds.attrs, fixed, problems)
            key = "rgb" if p == schema.RGB else "depth"
            want = {"source": a.get(f"{key}_source")}
            if W is not None:
                want.update(width=W, height=H)
            if p == schema.RGB:
                want["jpeg_quality"] = q
            else:
                want.update(
                    decoded_valid_min=vmin,
                    decoded_valid_max=vmax,
                    source_valid_min_m=float(dmin),
                    source_valid_max_m=float(dmax),
                )
                want[schema.DEPTH_PROFILE_ATTR] = a.get(schema.DEPTH_PROFILE_ATTR)
            for k, v in want.items():
                if v is not None and (k not in ds.attrs or not _same(ds.attrs[k], v)):
                    problems.append(f"/{p}: attribute {k} is {ds.attrs.get(k)!r}, expected {v!r}")
        if schema.STATE not in missing:
            for ds in f[schema.STATE].values():
                if isinstance(ds, h5py.Dataset):
                    _check_layout(ds, None, N_obs, None, problems)
        if schema.ACTIONS in f:
            _check_layout(f[schema.ACTIONS], np.float32, N_tr, None, problems, count="total_transitions")
            if not np.all(np.isfinite(f[schema.ACTIONS][()])):
                problems.append(f"/{schema.ACTIONS}: non-finite values")
        if schema.REWARDS not in missing:
            _check_layout(f[schema.REWARDS], np.float32, N_tr, None, problems, count="total_transitions")
        flags = {}
        for x in schema.FLAGS:
            p = f"transitions/{x}"
            if p not in missing and _check_layout(f[p], np.bool_, N_tr, None, problems, count="total_transitions"):
                flags[x] = f[p][()]
        if len(flags) == 3 and not np.array_equal(flags["dones"], flags["terminals"] | flags["timeouts"]):
            problems.append("/transitions/dones != terminals | timeouts")
        if schema.EXTRA in f:
            for ds in f[schema.EXTRA].values():
                _check_layout(ds, None, N_tr, None, problems, count="total_transitions")

        idx = _check_index(f, E, N_tr, N_obs, problems)

        if "data" not in missing:
            d = f["data"].attrs
            if not _same(d.get("total"), N_tr):
                problems.append(f"/data: attribute total is {d.get('total')!r}, expected {N_tr}")
            try:
                json.loads(d["env_args"])
            except (KeyError, TypeError, ValueError):
                problems.append("/data: attribute env_args must be a JSON string")
        if "episodes" not in missing:
            eg = f["episodes"]
            names = set(eg.keys())
            expected_names = {f"demo_{e}" for e in range(E)}
            for n in sorted(expected_names - names):
                problems.append(f"/episodes/{n}: missing")
            for n in sorted(names - expected_names):
                problems.append(f"/episodes/{n}: unexpected (total_episodes is {E})")
            if len(idx) == 7:
                for ep in range(E):
                    g = eg.get(f"demo_{ep}")
                    if g is None:
                        continue
                    T = int(idx["episode_lengths"][ep])
                    want = {
                        "num_samples": T,
                        "num_observations": T + 1,
                        "obs_offset": int(idx["obs_offsets"][ep]),
                        "transition_offset": int(idx["transition_offsets"][ep]),
                    }
                    for k, v in want.items():
                        if not _same(g.attrs.get(k), v):
                            problems.append(f"/episodes/demo_{ep}: attribute {k} is {g.attrs.get(k)!r}, expected {v}")
                    # success where known: a boolean when present, absent when nobody said
                    if "success" in g.attrs and not isinstance(g.attrs["success"], (bool, np.bool_)):
                        problems.append(
                            f"/episodes/demo_{ep}: attribute success is {g.attrs['success']!r}, "
                            "expected a boolean (or no success attribute: not known)"
                        )

        if payload_ok and W is not None and H is not None:
            profile = a.get(schema.DEPTH_PROFILE_ATTR)  # absent in reference-writer files: not checked
            _check_payloads(f, _sample_rows(idx, N_obs, full), H, W, vmin, vmax, profile, problems)
    return problems


def main(argv: list[str] | None = None) -> int:
    """The ``python -m rgbd_writer.validate`` command: print each problem; 1 if any, else 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--full", action="store_true", help="decode every payload, not a sample")
    args = ap.parse_args(argv)
    problems = validate_file(args.file, full=args.full)
    for p in problems:
        print(p)
    print(f"{args.file}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Append finished staging datasets to the output, and find what the output already holds (resume).

Only the parent process writes the output, one bag at a time in bag order, through the writers' own
commit paths: LeRobot episodes via ``LeRobotWriter.import_episode`` (parquet rows re-indexed, mp4s
and raw lines moved, stats/info/tasks recomputed by the writer), RGB-D episodes via
``RgbdWriter.add_encoded_observation`` (the JPEG / JPEG 2000 payloads copied, not re-encoded). Each
episode is its own crash-safe commit, so a killed run leaves a valid output holding whole episodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

SpanKey = tuple[int, int]


def _add_done(done: dict[str, list[SpanKey]], source: Any) -> None:
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except ValueError:
            return
    if isinstance(source, dict) and source.get("fingerprint") and source.get("start_ns") is not None:
        done.setdefault(str(source["fingerprint"]), []).append((int(source["start_ns"]), int(source["end_ns"])))


def lerobot_done(root: Path) -> dict[str, list[SpanKey]]:
    """Fingerprint -> converted episode spans, from the episodes.jsonl ``source`` counters."""
    from piper_recorder.lerobot.format import fsutil, layout

    done: dict[str, list[SpanKey]] = {}
    for rec in fsutil.read_jsonl(Path(root) / layout.EPISODES):
        _add_done(done, rec.get("source"))
    return done


def rgbd_done(path: Path) -> dict[str, list[SpanKey]]:
    """Fingerprint -> converted episode spans, from each demo's ``source`` attribute."""
    import h5py

    done: dict[str, list[SpanKey]] = {}
    if not Path(path).exists():
        return done
    with h5py.File(path, "r") as f:
        for name in f.get("episodes", {}):
            _add_done(done, f["episodes"][name].attrs.get("source"))
    return done


def import_lerobot(writer: Any, staged_root: Path, session: dict[str, Any]) -> int:
    """Append every episode of a staged LeRobot root (in order) to ``writer``; returns the count."""
    import pyarrow.parquet as pq

    from piper_recorder.lerobot.format import fsutil, layout

    staged_root = Path(staged_root)
    records = fsutil.read_jsonl(staged_root / layout.EPISODES)
    if not records:
        return 0
    writer.begin_session(session)
    cs = writer.cfg.chunks_size
    keys = [f.key for f in writer.cfg.features]
    for rec in records:
        i = int(rec["episode_index"])
        table = pq.read_table(staged_root / layout.data_relpath(i, cs), columns=["timestamp", *keys])
        cols = {k: _column(table, k) for k in keys}
        videos = {cam: staged_root / layout.video_relpath(i, cam, cs) for cam in writer.cfg.cameras}
        writer.import_episode(
            rec["tasks"][0],
            table.column("timestamp").to_numpy(),
            cols,
            videos,
            staged_root / layout.extras_relpath(i),
            rec,
            _image_hists(staged_root, i),
        )
    return len(records)


def _image_hists(staged_root: Path, i: int) -> dict[str, tuple[np.ndarray, int]]:
    """The staged episode's sampled image histograms by camera (its writer's stats record)."""
    from piper_recorder.lerobot.format import episode_stats, layout

    rec = episode_stats.load_record(staged_root / layout.record_relpath(i)) or {}
    return {
        layout.camera_of(k): (np.asarray(v["hist"], np.int64), int(v["frames"]))
        for k, v in (rec.get("images") or {}).items()
        if k.startswith(layout.VIDEO_KEY_PREFIX)
    }


def _column(table: Any, key: str) -> np.ndarray:
    import pyarrow as pa

    col = table.column(key).combine_chunks()
    if isinstance(col.type, pa.FixedSizeListType):
        return col.flatten().to_numpy().reshape(len(col), col.type.list_size)
    return col.to_numpy().reshape(-1, 1)


# attributes the RGB-D writer sets itself on every demo group
_RGBD_OWN = {
    "num_samples",
    "num_observations",
    "obs_offset",
    "transition_offset",
    "start_time_ns",
    "end_time_ns",
    "truncated",
    "success",
    "seed",
}


def import_rgbd(writer: Any, staged_path: Path) -> int:
    """Append every episode of a staged RGB-D HDF5 file (in order) to ``writer``; returns the count."""
    import h5py

    with h5py.File(staged_path, "r") as f:
        demos = sorted(f.get("episodes", {}), key=lambda s: int(s.split("_")[1]))
        for name in demos:
            copy_rgbd_episode(writer, f, int(name.split("_")[1]))
    return len(demos)


def copy_rgbd_episode(writer: Any, f: Any, episode: int, meta_update: dict[str, Any] | None = None) -> None:
    """Append episode ``episode`` of the open RGB-D file ``f`` to ``writer`` as one committed episode.

    Payloads are copied as stored (never re-encoded), states, transitions and extras as they are, the demo's own
    attributes kept (``meta_update`` overrides some); indices and offsets are the writer's.
    """
    from rgbd_writer import schema

    rgb, depth = f[schema.RGB], f[schema.DEPTH]
    states = f.get(schema.STATE, {})
    extras = f.get(schema.EXTRA, {})
    tr = f[schema.TRANSITIONS]
    a = dict(f["episodes"][f"demo_{episode}"].attrs)
    o0, n_obs = int(a["obs_offset"]), int(a["num_observations"])
    t0, T = int(a["transition_offset"]), int(a["num_samples"])
    meta = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in a.items() if k not in _RGBD_OWN}
    meta.update(meta_update or {})
    seed = int(a["seed"]) if "seed" in a else None
    writer.start_episode(seed=seed, meta=meta)
    try:
        st = {k: states[k][o0 : o0 + n_obs] for k in states}
        for i in range(n_obs):
            writer.add_encoded_observation(rgb[o0 + i], depth[o0 + i], {k: v[i] for k, v in st.items()})
        acts = tr["actions"][t0 : t0 + T]
        rew, term, tout = (tr[k][t0 : t0 + T] for k in ("rewards", "terminals", "timeouts"))
        ex = {k: extras[k][t0 : t0 + T] for k in extras}
        for t in range(T):
            writer.add_transition(
                acts[t],
                float(rew[t]),
                terminal=bool(term[t]),
                timeout=bool(tout[t]),
                extras={k: v[t] for k, v in ex.items()} or None,
            )
        success = (meta_update or {}).get("success", a.get("success"))  # a relabel (outcome) decides it
        writer.end_episode(success=bool(success) if success is not None else None)
    except BaseException:
        if writer.recording:
            writer.discard_episode()
        raise

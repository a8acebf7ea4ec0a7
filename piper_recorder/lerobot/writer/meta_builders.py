"""Builders for the meta/ files (pure functions of the config and the saved episodes).

``episodes.jsonl`` is the dataset's commit record; info.json, tasks.jsonl, stats.json (and for v2.1
episodes_stats.jsonl) are derived from it and from the per-episode stats sketches and records,
which is what lets repair regenerate them.
"""

from __future__ import annotations

from ..format.features import BOOKKEEPING, combined_names, combined_specs
from ..format.layout import DATA_PATH, VIDEO_PATH, video_key
from .config import WriterConfig

# info.json key (project-owned, top level) recording which combined column each split column joins:
# {"observation.arm_joint": "observation.state", ...}. Not inside the ``features`` entries: our own
# writer compares those exactly on resume, so roots written before the record would stop appending.
# LeRobot 0.3.3/0.4.4 and GR00T N1.5 read info.json as a plain dict and ignore keys they do not know.
COMBINED_RECORD = "piper_combined"


def combined_record(cfg: WriterConfig) -> dict[str, str]:
    """Split column -> the combined column it joins (every feature that names one, in feature order).

    Recorded even with ``combined_columns`` off, so an edit rebuilds exactly this configuration.
    """
    return {f.key: f.combined for f in cfg.features if f.combined is not None}


def features_json(cfg: WriterConfig) -> dict:
    """info.json ``features``: split + combined vectors, videos (LeRobot convention), bookkeeping."""
    out: dict[str, dict] = {}
    for f in cfg.features:
        out[f.key] = {"dtype": "float32", "shape": [f.dim], "names": list(f.names)}
    if cfg.combined_columns:
        for key, parts in combined_specs(cfg.features).items():
            names = combined_names(parts)
            out[key] = {"dtype": "float32", "shape": [len(names)], "names": names}
    for cam, spec in cfg.cameras.items():
        out[video_key(cam)] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(cfg.fps),
                "video.height": spec.height,
                "video.width": spec.width,
                "video.channels": 3,
                "video.codec": _codec_name(cfg.video.codec),
                "video.pix_fmt": cfg.video.pix_fmt,
                "video.is_depth_map": False,
                "has_audio": False,
            },
        }
    for key, dtype in BOOKKEEPING.items():
        out[key] = {"dtype": dtype, "shape": [1], "names": None}
    return out


def _codec_name(codec: str) -> str:
    """Stream codec name as ffprobe reports it (libx264 -> h264), which LeRobot records."""
    return {"libx264": "h264", "libx265": "hevc", "libsvtav1": "av1", "libaom-av1": "av1", "libvpx-vp9": "vp9"}.get(
        codec, codec
    )


def info_json(cfg: WriterConfig, episodes: list[dict], n_tasks: int) -> dict:
    """``meta/info.json`` for the saved ``episodes`` and ``n_tasks`` tasks."""
    n = len(episodes)
    return {
        "codebase_version": cfg.lerobot_version,
        "robot_type": cfg.robot_type,
        "total_episodes": n,
        "total_frames": sum(int(e["length"]) for e in episodes),
        "total_tasks": n_tasks,
        "total_videos": n * len(cfg.cameras),
        "total_chunks": (n + cfg.chunks_size - 1) // cfg.chunks_size,
        "chunks_size": cfg.chunks_size,
        "fps": cfg.fps,
        "splits": {"train": f"0:{n}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cfg.cameras else None,
        "features": features_json(cfg),
        COMBINED_RECORD: combined_record(cfg),
    }


def modality_json(cfg: WriterConfig) -> dict:
    """GR00T-style map slicing the split columns; rotations tagged with ``cfg.rotation_type``."""
    out: dict[str, dict] = {"state": {}, "action": {}}
    for f in cfg.features:
        if f.group is None:  # complementary_info.*: not a modality
            continue
        for name, a, b, is_rot in f.slices():
            entry: dict = {"start": a, "end": b, "original_key": f.key}
            if is_rot:
                entry["rotation_type"] = cfg.rotation_type
            entry.update(dtype="float32", absolute=True)
            out[f.group][name] = entry
    out["video"] = {cam: {"original_key": video_key(cam)} for cam in cfg.cameras}
    out["annotation"] = {"human.task_description": {"original_key": "task_index"}}
    return out


def tasks_from_episodes(episodes: list[dict], known: list[dict]) -> list[dict]:
    """tasks.jsonl rows: the known tasks, trimmed of trailing ones no episode references.

    Task indices are assigned in order of first use and only the last episode can be deleted, so
    unreferenced tasks can only be trailing ones (left by delete_last or an interrupted save).
    """
    used = {int(e["task_index"]) for e in episodes}
    rows = sorted(known, key=lambda t: t["task_index"])
    while rows and rows[-1]["task_index"] not in used:
        rows.pop()
    return rows

"""Where everything lives in a LeRobot v2.x root: path templates, bookkeeping directories, version names.

A leaf module (standard library only): the writer, meta builders, crash repair, recover, exporters, readers,
the viewer and replay all name and format paths through it, so the layout is written down once.
Readers format the templates the root's own ``info.json`` carries (``data_file``, ``video_file``);
the writer fills ours (``data_relpath``, ``video_relpath``, ``extras_relpath``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper_recorder.names import IMAGES_PREFIX

CODEBASE_VERSION = "v2.0"  # the default (the user's spec)
CODEBASE_VERSIONS = ("v2.0", "v2.1")  # v2.1 adds meta/episodes_stats.jsonl
DEFAULT_CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
EXTRAS_PATH = "extras/episode_{episode_index:06d}.quest.jsonl"
VIDEO_KEY_PREFIX = IMAGES_PREFIX  # piper_recorder.names: observation.images.<camera>
# quaternion rotation_type names the writer may tag modality.json with (w-first: "quat_wxyz" as the
# spec writes, "quaternion" as GR00T N1.5's schema names it); GR00T accepts a few more (validate.py).
ROTATION_TYPES = ("quat_wxyz", "quaternion")

# The meta/ files, named here only (test/project/test_module_graph.py): paths relative to the root (``root / INFO``);
# code and messages use these names, never the file names spelt out.
META_DIR = "meta"
INFO = f"{META_DIR}/info.json"  # version, rate, totals, path templates, features
EPISODES = f"{META_DIR}/episodes.jsonl"  # the commit record: one line per saved episode
TASKS = f"{META_DIR}/tasks.jsonl"
STATS = f"{META_DIR}/stats.json"
EPISODES_STATS = f"{META_DIR}/episodes_stats.jsonl"  # v2.1: per-episode stats
MODALITY = f"{META_DIR}/modality.json"  # GR00T: the state/action slices, the videos
RELATIVE_STATS = f"{META_DIR}/relative_stats.json"  # piper-finalize
DELTA_STATS = f"{META_DIR}/delta_stats.json"  # piper-finalize
SESSIONS = f"{META_DIR}/collection_sessions.jsonl"  # provenance: every collection session
COLLECTION_META = f"{META_DIR}/collection_meta.json"  # provenance: the last session
DATASET_EDITS = f"{META_DIR}/dataset_edits.jsonl"  # piper-dataset: the edits that built this root
EXPORT_STATE = f"{META_DIR}/piper_export.json"  # a piper-export output: what it holds
STATS_CACHE = f"{META_DIR}/.cache/stats"  # per-episode stats sketches and records

STAGING = ".staging"  # the episode in flight (deleted by repair)
RECOVERED = ".recovered"  # files repair or piper-recover moved aside, by time stamp
PAYLOAD_DIRS = ("data", "videos", "extras")


def episode_name(ep: int) -> str:
    """``episode_000042``: an episode's file stem."""
    return f"episode_{ep:06d}"


def video_key(camera: str) -> str:
    """The feature key of ``camera``'s video (``observation.images.<camera>``)."""
    return VIDEO_KEY_PREFIX + camera


def camera_of(key: str) -> str:
    """``observation.images.<camera>`` -> ``<camera>``."""
    return key.removeprefix(VIDEO_KEY_PREFIX)


def format_path(template: str, ep: int, chunks_size: int, video_key: str | None = None) -> str:
    """A v2.x ``data_path``/``video_path`` template filled for episode ``ep``."""
    fields: dict[str, Any] = {"episode_chunk": ep // chunks_size, "episode_index": ep}
    if video_key is not None:
        fields["video_key"] = video_key
    return template.format(**fields)


def data_relpath(ep: int, chunks_size: int) -> str:
    """Our template's parquet path of episode ``ep``."""
    return format_path(DATA_PATH, ep, chunks_size)


def video_relpath(ep: int, camera: str, chunks_size: int) -> str:
    """Our template's mp4 path of ``camera`` in episode ``ep``."""
    return format_path(VIDEO_PATH, ep, chunks_size, video_key(camera))


def extras_relpath(ep: int) -> str:
    """Episode ``ep``'s extras file (the raw headset lines)."""
    return EXTRAS_PATH.format(episode_index=ep)


def cache_relpath(ep: int) -> str:
    """The episode's stats sketch (quantiles) in the stats cache."""
    return f"{STATS_CACHE}/{episode_name(ep)}.npy"


def record_relpath(ep: int) -> str:
    """Per-episode record: the episodes_stats ``stats`` plus the image histograms behind them."""
    return f"{STATS_CACHE}/{episode_name(ep)}.episode.json"


# ---- reading any v2.x root: its own templates from info.json --------------------------------------
def chunks_size(info: Mapping[str, Any]) -> int:
    """The root's episodes per chunk (``info.json``'s ``chunks_size``)."""
    return int(info.get("chunks_size", DEFAULT_CHUNKS_SIZE))


def data_file(root: Path, info: Mapping[str, Any], episode_index: int) -> Path:
    """Episode ``episode_index``'s parquet, by the root's own ``data_path`` template."""
    return Path(root) / format_path(info["data_path"], episode_index, chunks_size(info))


def video_file(root: Path, info: Mapping[str, Any], episode_index: int, video_key: str) -> Path:
    """Episode ``episode_index``'s mp4 of ``video_key``, by the root's own ``video_path`` template."""
    return Path(root) / format_path(info["video_path"], episode_index, chunks_size(info), video_key)

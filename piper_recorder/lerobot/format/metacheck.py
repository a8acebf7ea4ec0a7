"""Shape checks of a LeRobot root's meta files, for code that reads them to do something else.

The viewer, finalize and the writer's open get a DatasetError naming the file and the field for a damaged or
hand-edited file, never a TypeError deep inside; piper-validate reports such problems one by one. The typed read
model (``lerobot.format.root``) parses what these checks pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import DatasetError
from .layout import EPISODES, INFO, TASKS


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e})") from None


def load_json(path: Path) -> Any:
    """The JSON document at ``path``; DatasetError when missing, not UTF-8 or not JSON."""
    try:
        return json.loads(_text(path))
    except ValueError as e:
        raise DatasetError(f"{path}: not valid JSON: {e}") from None


def load_json_object(path: Path) -> dict[str, Any]:
    """Like ``load_json``, and the document must be an object."""
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: must be a JSON object, got {type(doc).__name__}")
    return doc


def load_jsonl(path: Path, missing_ok: bool = True) -> list[dict[str, Any]]:
    """Every non-blank line as a JSON object; a missing file is empty when ``missing_ok``."""
    if missing_ok and not Path(path).exists():
        return []
    out = []
    for n, line in enumerate(_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise DatasetError(f"{path}: line {n} is not valid JSON: {e}") from None
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}: line {n} must be a JSON object, got {type(rec).__name__}")
        out.append(rec)
    return out


def check_info(info: Any, path: Path) -> dict[str, Any]:
    """``info`` if it has the fields readers use, with their types; else a DatasetError saying which."""
    if not isinstance(info, dict):
        raise DatasetError(f"{path}: must be a JSON object, got {type(info).__name__}")
    feats = info.get("features")
    if not isinstance(feats, dict):
        raise DatasetError(
            f"{path}: 'features' must be an object mapping column names to features, got {type(feats).__name__}"
        )
    for key, f in feats.items():
        if not (
            isinstance(f, dict)
            and isinstance(f.get("dtype"), str)
            and isinstance(f.get("shape"), list)
            and all(_int(s) for s in f["shape"])
        ):
            raise DatasetError(
                f"{path}: feature '{key}' must be an object with a 'dtype' string and a 'shape' "
                f"list of integers, got {f!r:.80}"
            )
    fps = info.get("fps")
    if not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0):
        raise DatasetError(f"{path}: 'fps' must be a positive number, got {fps!r}")
    if not (_int(info.get("chunks_size")) and info["chunks_size"] > 0):
        raise DatasetError(f"{path}: 'chunks_size' must be a positive integer, got {info.get('chunks_size')!r}")
    if not isinstance(info.get("data_path"), str):
        raise DatasetError(f"{path}: 'data_path' must be a path template string, got {info.get('data_path')!r}")
    if any(f["dtype"] == "video" for f in feats.values()) and not isinstance(info.get("video_path"), str):
        raise DatasetError(f"{path}: 'video_path' must be a path template string, got {info.get('video_path')!r}")
    return info


def check_episodes(episodes: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """Return ``episodes`` (episodes.jsonl's lines) once each has the fields readers use."""
    for n, ep in enumerate(episodes, 1):
        if not (_int(ep.get("episode_index")) and ep["episode_index"] >= 0):
            raise DatasetError(
                f"{path}: line {n}: 'episode_index' must be an integer >= 0, got {ep.get('episode_index')!r}"
            )
        if not (_int(ep.get("length")) and ep["length"] >= 0):
            raise DatasetError(f"{path}: line {n}: 'length' must be an integer >= 0, got {ep.get('length')!r}")
        tasks = ep.get("tasks")
        if not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
            raise DatasetError(f"{path}: line {n}: 'tasks' must be a list of strings, got {tasks!r}")
        if "task_index" in ep and not _int(ep["task_index"]):
            raise DatasetError(f"{path}: line {n}: 'task_index' must be an integer, got {ep['task_index']!r}")
    return episodes


def check_tasks(tasks: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """Return ``tasks`` (tasks.jsonl's lines) once each has an integer index and a string task."""
    for n, t in enumerate(tasks, 1):
        if not (_int(t.get("task_index")) and isinstance(t.get("task"), str)):
            raise DatasetError(f"{path}: line {n}: needs an integer 'task_index' and a string 'task', got {t!r:.80}")
    return tasks


def load_info(root: Path) -> dict[str, Any]:
    """``meta/info.json`` of ``root``, checked."""
    path = Path(root) / INFO
    return check_info(load_json(path), path)


def load_episodes(root: Path) -> list[dict[str, Any]]:
    """``meta/episodes.jsonl`` of ``root``, checked (empty when absent)."""
    path = Path(root) / EPISODES
    return check_episodes(load_jsonl(path), path)


def load_tasks(root: Path) -> list[dict[str, Any]]:
    """``meta/tasks.jsonl`` of ``root``, checked (empty when absent)."""
    path = Path(root) / TASKS
    return check_tasks(load_jsonl(path), path)

"""Raw reads of a LeRobot v2.0 root's files (meta files, columns as arrays; paths: ``layout``).

Used by finalize and validate, which must read a root without trusting the writer's own code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from . import fsutil


def read_json(path: Path) -> Any:
    """The JSON document at ``path``."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path: Path) -> list[Any]:
    r"""Every non-blank line (split on ``\n`` only) parsed as JSON; a bad line raises naming file and line."""
    return fsutil.parse_jsonl(path, Path(path).read_bytes())


def vector_features(info: dict) -> dict[str, dict]:
    """Non-video features of info.json (numeric columns of the parquet files)."""
    return {k: v for k, v in info["features"].items() if v.get("dtype") != "video"}


def video_keys(info: dict) -> list[str]:
    """The video feature keys of an ``info.json`` document."""
    return [k for k, v in info["features"].items() if v.get("dtype") == "video"]


def column_array(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A scalar or fixed-size-list column as a (rows, width) float64 array."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type):
        values = arr.flatten().to_numpy(zero_copy_only=False)
    else:
        values = arr.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64).reshape(len(arr), width)

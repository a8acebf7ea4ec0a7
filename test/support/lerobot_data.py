"""Shared helpers for the LeRobot writer tests: plausible rows, frames that carry their own index,
and independent readers (pyarrow, PyAV, json) that never use the writer's code.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq

H, W = 48, 64
GRID = (4, 4)  # 16 bits, one 12x16 block each


def index_frame(k: int) -> np.ndarray:
    """A frame whose 4x4 block pattern spells k in binary (survives lossy encoding)."""
    img = np.zeros((H, W, 3), np.uint8)
    bh, bw = H // GRID[0], W // GRID[1]
    for bit in range(GRID[0] * GRID[1]):
        if (k >> bit) & 1:
            r, c = divmod(bit, GRID[1])
            img[r * bh : (r + 1) * bh, c * bw : (c + 1) * bw] = 255
    return img


def frame_index_of(img: np.ndarray) -> int:
    bh, bw = H // GRID[0], W // GRID[1]
    k = 0
    for bit in range(GRID[0] * GRID[1]):
        r, c = divmod(bit, GRID[1])
        if img[r * bh + 2 : (r + 1) * bh - 2, c * bw + 2 : (c + 1) * bw - 2].mean() > 128:
            k |= 1 << bit
    return k


def row_values(t: float, seed: int) -> dict[str, np.ndarray]:
    """Smooth, episode-specific motion: no frozen, constant or duplicate columns (lerobot-doctor)."""
    ph = 0.7 * seed + np.arange(7) * 0.9
    f = 1.0 + 0.13 * seed
    q = 0.8 * np.sin(f * t + ph[:6])
    quat = np.array(
        [
            np.cos(0.3 * np.sin(f * t + ph[0])),
            0.2 * np.sin(0.9 * t + ph[1]),
            0.1 * np.cos(1.1 * t + ph[2]),
            0.15 * np.sin(0.7 * t + ph[3]),
        ]
    )
    quat /= np.linalg.norm(quat)
    pos = 0.3 + 0.1 * np.sin(f * t + ph[4:7])
    return {
        "observation.arm_joint": q,
        "observation.arm_eef": np.r_[pos, quat],
        "observation.gripper": np.array([0.04 + 0.03 * np.sin(1.7 * t + ph[5])]),
        "action.arm_eef": np.r_[pos + 0.01 * np.cos(2.0 * t + ph[:3]), quat],
        "action.gripper": np.array([0.04 + 0.03 * np.sin(1.7 * t + ph[5] + 0.2)]),
    }


def read_jsonl_strict(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n")
    lines = text.splitlines()
    assert all(line.strip() for line in lines), f"blank line in {path}"
    return [json.loads(line) for line in lines]


def decode_video(path: Path) -> tuple[list[int], list[int], list[int], object]:
    """(pts list, decoded frame indices, durations, time_base) of every frame, with PyAV."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        tb = s.time_base
        pts, idx, dur = [], [], []
        for fr in c.decode(s):
            pts.append(fr.pts)
            idx.append(frame_index_of(fr.to_ndarray(format="rgb24")))
            dur.append(fr.duration)
    return pts, idx, dur, tb


def read_table(root: Path, ep: int) -> dict[str, np.ndarray]:
    t = pq.read_table(root / f"data/chunk-{ep // 1000:03d}/episode_{ep:06d}.parquet")
    out = {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        if hasattr(col, "flatten") and col.type.num_fields == 1:
            out[name] = col.flatten().to_numpy().reshape(len(col), -1)
        else:
            out[name] = col.to_numpy()
    return out


def tree_hashes(root: Path, skip=(".lock",)) -> dict[str, str]:
    """sha256 of every file under root (except the lock and staging)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in skip and not rel.startswith(".staging"):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out

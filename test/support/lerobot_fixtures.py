"""Tiny LeRobot v2.0 roots written straight from the spec with pyarrow, PyAV and json.

Independent of piper_recorder.lerobot.writer.dataset_writer on purpose: the validator and finalize are checked
against these, and the writer's output is then checked by the validator.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FPS = 30
VIDEO_H, VIDEO_W = 48, 64
JOINTS = [f"joint{i}" for i in range(1, 7)]
POSE = ["x", "y", "z", "qw", "qx", "qy", "qz"]
SPLIT = {  # column -> element names
    "observation.arm_joint": JOINTS,
    "observation.arm_eef": POSE,
    "observation.gripper": ["width"],
    "action.arm_eef": POSE,
    "action.gripper": ["width"],
}
COMBINED = {
    "observation.state": ("observation.arm_joint", "observation.arm_eef", "observation.gripper"),
    "action": ("action.arm_eef", "action.gripper"),
}
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
STAT_KEYS = ("mean", "std", "min", "max", "q01", "q99")


def random_quat(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q


def random_episode(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Plausible split-column values for n rows (unit quaternions, either sign)."""

    def pose():
        return np.concatenate([rng.uniform(-0.5, 0.5, size=(n, 3)), random_quat(rng, n)], axis=1)

    return {
        "observation.arm_joint": rng.uniform(-2, 2, size=(n, 6)),
        "observation.arm_eef": pose(),
        "observation.gripper": rng.uniform(0, 0.08, size=(n, 1)),
        "action.arm_eef": pose(),
        "action.gripper": rng.uniform(0, 0.08, size=(n, 1)),
    }


def _vector(name_list: list[str]) -> dict:
    return {"dtype": "float32", "shape": [len(name_list)], "names": list(name_list)}


def _features(cameras: tuple[str, ...], combined: bool) -> dict:
    feats = {k: _vector(v) for k, v in SPLIT.items()}
    if combined:
        for key, parts in COMBINED.items():
            feats[key] = _vector([f"{p.split('.')[-1]}.{n}" for p in parts for n in SPLIT[p]])
    for cam in cameras:
        feats[f"observation.images.{cam}"] = {
            "dtype": "video",
            "shape": [VIDEO_H, VIDEO_W, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(FPS),
                "video.height": VIDEO_H,
                "video.width": VIDEO_W,
                "video.channels": 3,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "has_audio": False,
            },
        }
    feats["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        feats[key] = {"dtype": "int64", "shape": [1], "names": None}
    return feats


def _modality(cameras: tuple[str, ...]) -> dict:
    def entries(prefix: str, with_joint: bool) -> dict:
        out = {}
        if with_joint:
            out["arm_joint"] = {
                "start": 0,
                "end": 6,
                "original_key": f"{prefix}.arm_joint",
                "dtype": "float32",
                "absolute": True,
            }
        out["eef_pos"] = {
            "start": 0,
            "end": 3,
            "original_key": f"{prefix}.arm_eef",
            "dtype": "float32",
            "absolute": True,
        }
        out["eef_rot"] = {
            "start": 3,
            "end": 7,
            "original_key": f"{prefix}.arm_eef",
            "rotation_type": "quat_wxyz",
            "dtype": "float32",
            "absolute": True,
        }
        out["gripper"] = {
            "start": 0,
            "end": 1,
            "original_key": f"{prefix}.gripper",
            "dtype": "float32",
            "absolute": True,
        }
        return out

    return {
        "state": entries("observation", True),
        "action": entries("action", False),
        "video": {cam: {"original_key": f"observation.images.{cam}"} for cam in cameras},
        "annotation": {"human.task_description": {"original_key": "task_index"}},
    }


def _stats(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    q01, q99 = np.quantile(x, [0.01, 0.99], axis=0)
    return {
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "q01": q01.tolist(),
        "q99": q99.tolist(),
    }


def _fixed(x: np.ndarray) -> pa.Array:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), type=pa.float32()), x.shape[1])


MS = Fraction(1, 1000)  # whole-ms PTS, as older recorders wrote them
FINE = Fraction(1, 90000)  # the MPEG clock the recorders write now


def _image_stats(frames: np.ndarray) -> dict:
    """Per-channel stats of uint8 (N, H, W, 3) frames, / 255, as [[[v]], [[v]], [[v]]] (LeRobot's shape)."""
    px = frames.reshape(-1, 3).astype(np.float64) / 255.0
    q01, q99 = np.quantile(px, [0.01, 0.99], axis=0)
    return {
        k: v.reshape(3, 1, 1).tolist()
        for k, v in (
            ("mean", px.mean(0)),
            ("std", px.std(0)),
            ("min", px.min(0)),
            ("max", px.max(0)),
            ("q01", q01),
            ("q99", q99),
        )
    }


def video_frames(n_frames: int, seed: int = 0) -> np.ndarray:
    """The RGB frames ``write_video`` encodes."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_frames, VIDEO_H, VIDEO_W, 3), np.uint8)
    for k in range(n_frames):
        out[k] = (k * 7) % 256
        out[k, : VIDEO_H // 2] = rng.integers(0, 255, size=3, dtype=np.uint8)
    return out


def grid_times(n: int, fps: int = FPS, up: bool = True) -> np.ndarray:
    """Row timestamps k/fps as float32: rounded UP (the smallest float32 >= k/fps, what recorders write
    now), or to the nearest float32 with ``up=False`` (older recorders).
    """
    out = (np.arange(n) / fps).astype(np.float32)
    if up:
        for k in range(n):
            if Fraction(float(out[k])) < Fraction(k, fps):
                out[k] = np.nextafter(out[k], np.float32(np.inf))
    return out


def grid_pts(t: float, time_base: Fraction) -> int:
    """floor(float32(t) / time_base) in exact arithmetic: the frame at or just before float32(t)."""
    return math.floor(Fraction(float(np.float32(t))) / time_base)


def write_video(
    path: Path,
    n_frames: int,
    fps: int = FPS,
    seed: int = 0,
    time_base: Fraction = FINE,
    gop: int = 12,
    pts: list[int] | None = None,
    round_up: bool = True,
) -> None:
    """libx264/yuv420p, no B-frames, frame k at pts ``grid_pts(t_k, time_base)`` with ``t_k`` row k's
    timestamp (``grid_times(.., up=round_up)``), or ``pts[k]``; ``time_base=MS`` gives the whole-ms
    files older recorders wrote. The last packet lasts one period.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = video_frames(n_frames, seed)
    times = grid_times(n_frames, fps, up=round_up)
    period = max(1, round(1 / (fps * time_base)))
    with av.open(
        str(path), "w", format="mp4", options={"video_track_timescale": str(time_base.denominator)}
    ) as container:
        stream = container.add_stream(
            "libx264", rate=fps, options={"bf": "0", "preset": "ultrafast", "crf": "30", "g": str(gop)}
        )
        stream.width, stream.height, stream.pix_fmt = VIDEO_W, VIDEO_H, "yuv420p"
        stream.time_base = stream.codec_context.time_base = time_base
        packets = []
        for k in range(n_frames):
            frame = av.VideoFrame.from_ndarray(frames[k], format="rgb24")
            frame.pts = grid_pts(float(times[k]), time_base) if pts is None else pts[k]
            frame.time_base = time_base
            packets += stream.encode(frame)
        packets += stream.encode()
        for packet in packets:
            packet.duration = period
            container.mux(packet)


def write_root(
    root: Path,
    episodes: list[tuple[str, dict[str, np.ndarray]]],
    cameras: tuple[str, ...] = ("cam_front",),
    combined: bool = True,
    chunks_size: int = 1000,
    time_base: Fraction = FINE,
    round_up: bool = True,
) -> Path:
    """Write a complete v2.0 root. ``episodes``: (task, split-column arrays) per episode, in order.
    ``round_up=False``: timestamps k/fps rounded to the nearest float32, as older recorders wrote them.
    """
    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    features = _features(cameras, combined)
    tasks: list[str] = []
    ep_lines, all_cols, all_frames = [], {}, {}
    global_index = 0
    for ep_idx, (task, cols) in enumerate(episodes):
        if task not in tasks:
            tasks.append(task)
        t_idx = tasks.index(task)
        n = len(next(iter(cols.values())))
        cols = {k: np.asarray(v, dtype=np.float32).reshape(n, -1) for k, v in cols.items()}
        if combined:
            for key, parts in COMBINED.items():
                cols[key] = np.concatenate([cols[p] for p in parts], axis=1)
        book = {
            "timestamp": grid_times(n, FPS, up=round_up),
            "frame_index": np.arange(n, dtype=np.int64),
            "episode_index": np.full(n, ep_idx, dtype=np.int64),
            "index": np.arange(global_index, global_index + n, dtype=np.int64),
            "task_index": np.full(n, t_idx, dtype=np.int64),
        }
        global_index += n
        arrays = {}
        for key, feat in features.items():
            if feat["dtype"] == "video":
                continue
            if key in book:
                arrays[key] = pa.array(book[key])
            elif feat["shape"] == [1]:  # LeRobot: shape [1] columns are plain scalars
                arrays[key] = pa.array(cols[key][:, 0])
            else:
                arrays[key] = _fixed(cols[key])
            all_cols.setdefault(key, []).append(book[key] if key in book else cols[key])
        chunk = ep_idx // chunks_size
        data_path = root / DATA_PATH.format(episode_chunk=chunk, episode_index=ep_idx)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(arrays), data_path)
        for c, cam in enumerate(cameras):
            all_frames.setdefault(f"observation.images.{cam}", []).append(video_frames(n, seed=ep_idx * 10 + c))
            write_video(
                root
                / VIDEO_PATH.format(episode_chunk=chunk, episode_index=ep_idx, video_key=f"observation.images.{cam}"),
                n,
                seed=ep_idx * 10 + c,
                time_base=time_base,
                round_up=round_up,
            )
        line = {"episode_index": ep_idx, "tasks": [task], "length": n, "task_index": t_idx}
        if cameras:
            line["video_frame_length"] = n
            line["video_frame_lengths"] = dict.fromkeys(cameras, n)
        ep_lines.append(line)

    n_ep = len(episodes)
    info = {
        "codebase_version": "v2.0",
        "robot_type": "agilex_piper",
        "total_episodes": n_ep,
        "total_frames": global_index,
        "total_tasks": len(tasks),
        "total_videos": n_ep * len(cameras),
        "total_chunks": (n_ep - 1) // chunks_size + 1 if n_ep else 0,
        "chunks_size": chunks_size,
        "fps": FPS,
        "splits": {"train": f"0:{n_ep}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": features,
    }
    stats = {
        k: _stats(np.concatenate(v))
        for k, v in all_cols.items()
        if k not in ("frame_index", "episode_index", "index", "task_index")
    }
    stats.update({k: _image_stats(np.concatenate(v)) for k, v in all_frames.items()})
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    (root / "meta" / "modality.json").write_text(json.dumps(_modality(cameras), indent=2))
    (root / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
    (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in ep_lines))
    (root / "meta" / "tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for i, t in enumerate(tasks))
    )
    return root


def small_root(
    root: Path,
    seed: int = 0,
    lengths: tuple[int, ...] = (12, 9, 7),
    cameras=("cam_front", "cam_wrist"),
    combined: bool = True,
    time_base: Fraction = FINE,
    round_up: bool = True,
) -> Path:
    rng = np.random.default_rng(seed)
    eps = [(("pick the cube", "place the cube")[i % 2], random_episode(rng, n)) for i, n in enumerate(lengths)]
    return write_root(root, eps, cameras=cameras, combined=combined, time_base=time_base, round_up=round_up)

"""ROS message -> assembler arguments, duck-typed (attribute access only, no ROS imports).

rclpy messages and rosbags messages carry the same field names (rosbags gives numpy arrays for
``uint8[]``/``float64[]``), so the live recorders and the rosbag converter can share these and the
same messages give the same rows. Functions return plain Python/numpy values.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 7)) + ("gripper",)


def stamp_to_ns(stamp: Any) -> int:
    """A builtin_interfaces/Time in int ns."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def stamp_ns(msg: Any) -> int:
    """``header.stamp`` of a stamped message in int ns."""
    return stamp_to_ns(msg.header.stamp)


def image_to_numpy(msg: Any) -> np.ndarray:
    """sensor_msgs/Image -> HxWx3 uint8 RGB or HxW uint16 without copying (rgb8, 16UC1/mono16);
    bgr8/rgba8/bgra8 need one copy to reorder channels. Raises ValueError for other encodings."""
    h, w, step, enc = int(msg.height), int(msg.width), int(msg.step), msg.encoding
    buf = np.frombuffer(msg.data, dtype=np.uint8)
    if buf.size < h * step:
        raise ValueError(f"image data has {buf.size} bytes, {h} rows x step {step} need {h * step}")
    if enc in ("rgb8", "bgr8", "rgba8", "bgra8"):
        ch = 4 if enc.endswith("a8") else 3
        rows = buf[: h * step].reshape(h, step)[:, : w * ch].reshape(h, w, ch)
        if enc == "rgb8":
            return rows
        order = [2, 1, 0] if enc.startswith("bgr") else [0, 1, 2]
        return np.ascontiguousarray(rows[:, :, order])
    if enc in ("16UC1", "mono16"):
        dt = np.dtype(">u2" if msg.is_bigendian else "<u2")
        img = buf[: h * step].view(dt).reshape(h, step // 2)[:, :w]
        return img if dt.isnative else img.astype(np.uint16)
    raise ValueError(f"unsupported image encoding {enc!r}")


def joint_positions(msg: Any, cache: dict[tuple[str, ...], list[int]],
                    names: Sequence[str] = ARM_JOINTS, gripper_scale: float = 1.0) -> list[float] | None:
    """The 7 assembler positions (6 joints rad + gripper m) from a JointState, picked by ``names``
    (positional if the message is unnamed); None if incomplete. ``gripper_scale`` multiplies the last
    one (e.g. a driver that reports the gripper in other units). ``cache`` maps name tuples to indices."""
    key = tuple(msg.name)
    idx = cache.get(key)
    if idx is None:
        if not key:
            idx = list(range(len(names)))
        else:
            pos = {n: i for i, n in enumerate(key)}
            if any(j not in pos for j in names):
                return None
            idx = [pos[j] for j in names]
        cache[key] = idx
    p = msg.position
    if len(p) <= max(idx):
        return None
    out = [float(p[i]) for i in idx]
    if gripper_scale != 1.0:
        out[-1] *= gripper_scale
    return out


def gripper_width(msg: Any, name: str | None = None, scale: float = 1.0) -> float | None:
    """One gripper width from a JointState: the joint ``name`` (default: the first position)."""
    if name is not None and len(msg.name):
        names = list(msg.name)
        if name not in names:
            return None
        i = names.index(name)
    else:
        i = 0
    if len(msg.position) <= i:
        return None
    return float(msg.position[i]) * scale


def pose(msg: Any) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
    """PoseStamped -> ((x, y, z), (qx, qy, qz, qw)) in ROS order."""
    p, q = msg.pose.position, msg.pose.orientation
    return (float(p.x), float(p.y), float(p.z)), (float(q.x), float(q.y), float(q.z), float(q.w))

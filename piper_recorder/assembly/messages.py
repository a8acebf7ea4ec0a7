"""ROS message -> assembler arguments, duck-typed (attribute access only, no ROS imports).

rclpy messages and rosbags messages carry the same field names (rosbags gives numpy arrays for
``uint8[]``/``float64[]``), so the live recorders and the rosbag converter can share these and the
same messages give the same rows. Functions return plain Python/numpy values.

Message adapters (``ADAPTERS``, by the kind an ``InputSpec`` names): one message -> one input vector
(float32, the spec's ``dim``), with the options a mapping file may set (joint names, scales).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from piper_recorder.names import ARM_JOINTS, POLICY_ACTOR


def stamp_to_ns(stamp: Any) -> int:
    """A builtin_interfaces/Time in int ns."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def stamp_ns(msg: Any) -> int:
    """``header.stamp`` of a stamped message in int ns."""
    return stamp_to_ns(msg.header.stamp)


def image_to_numpy(msg: Any) -> np.ndarray:
    """sensor_msgs/Image -> HxWx3 uint8 RGB or HxW uint16, without copying for rgb8 and 16UC1/mono16.

    bgr8/rgba8/bgra8 need one copy to reorder channels. Raises ValueError for other encodings.
    """
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


def joint_positions(
    msg: Any, cache: dict[tuple[str, ...], list[int]], names: Sequence[str] = ARM_JOINTS, gripper_scale: float = 1.0
) -> list[float] | None:
    """The 7 assembler positions (6 joints rad + gripper m) from a JointState; None if incomplete.

    Picked by ``names`` (positional if the message is unnamed); ``gripper_scale`` multiplies the last one (a driver
    that reports the gripper in other units). ``cache`` maps name tuples to indices.
    """
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


def pose7(position: Sequence[float], quat_xyzw: Sequence[float]) -> np.ndarray:
    """Position + ROS-order quaternion -> the float32 row layout (x, y, z, qw, qx, qy, qz)."""
    x, y, z, w = (float(q) for q in quat_xyzw)
    return np.array([*(float(p) for p in position), w, x, y, z], dtype=np.float32)


# ---- message adapters --------------------------------------------------------------------------
class Adapter(Protocol):
    """Reads one input vector from a message; None if the message does not hold it.

    None is counted nowhere: e.g. a JointState without the mapped names.
    """

    msg_type: ClassVar[str]  # ROS type name, "pkg/msg/Type"
    dim: ClassVar[int]
    names: ClassVar[tuple[str, ...]]  # default element names of the dataset column
    stamped: ClassVar[bool]  # header.stamp is the sample time (else the receive time)

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector (float32, ``dim``) the message holds, or None."""

    def options(self) -> dict[str, Any]:
        """The options a mapping file would set to give this adapter."""


@dataclass
class JointStateAdapter:
    """sensor_msgs/JointState -> 6 joints (rad) + gripper (m), picked by ``names`` (gripper last)."""

    joint_names: tuple[str, ...] = ARM_JOINTS
    gripper_scale: float = 1.0
    _cache: dict[tuple[str, ...], list[int]] = field(default_factory=dict, repr=False, compare=False)
    msg_type: ClassVar[str] = "sensor_msgs/msg/JointState"
    dim: ClassVar[int] = 7
    names: ClassVar[tuple[str, ...]] = ARM_JOINTS
    stamped: ClassVar[bool] = True

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> JointStateAdapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        names = d.get("names", list(ARM_JOINTS))
        if not isinstance(names, (list, tuple)) or len(names) != 7:
            raise ValueError(f"{where}.names needs 7 names (6 joints + gripper), got {names}")
        return cls(tuple(str(n) for n in names), float(d.get("gripper_scale", 1.0)))

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        pos = joint_positions(msg, self._cache, self.joint_names, self.gripper_scale)
        return None if pos is None else np.asarray(pos, dtype=np.float32)

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {"names": list(self.joint_names), "gripper_scale": self.gripper_scale}


@dataclass
class GripperAdapter:
    """sensor_msgs/JointState -> one gripper width: the joint ``name`` (default the first) x ``scale``."""

    name: str | None = None
    scale: float = 1.0
    msg_type: ClassVar[str] = "sensor_msgs/msg/JointState"
    dim: ClassVar[int] = 1
    names: ClassVar[tuple[str, ...]] = ("width",)
    stamped: ClassVar[bool] = True

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> GripperAdapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        name = d.get("name")
        return cls(None if name is None else str(name), float(d.get("scale", 1.0)))

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        w = gripper_width(msg, self.name, self.scale)
        return None if w is None else np.array([w], dtype=np.float32)

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {"name": self.name, "scale": self.scale}


@dataclass
class PoseAdapter:
    """geometry_msgs/PoseStamped -> x, y, z, qw, qx, qy, qz."""

    msg_type: ClassVar[str] = "geometry_msgs/msg/PoseStamped"
    dim: ClassVar[int] = 7
    names: ClassVar[tuple[str, ...]] = ("x", "y", "z", "qw", "qx", "qy", "qz")
    stamped: ClassVar[bool] = True

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> PoseAdapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        return cls()

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        return pose7(*pose(msg))

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {}


@dataclass
class Float32Adapter:
    """std_msgs/Float32 (no header: stamped with the receive time), e.g. /reward."""

    msg_type: ClassVar[str] = "std_msgs/msg/Float32"
    dim: ClassVar[int] = 1
    names: ClassVar[tuple[str, ...]] = ("value",)
    stamped: ClassVar[bool] = False

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> Float32Adapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        return cls()

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        return np.array([float(msg.data)], dtype=np.float32)

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {}


@dataclass
class WrenchAdapter:
    """geometry_msgs/WrenchStamped -> force x, y, z (N) + torque x, y, z (N m)."""

    msg_type: ClassVar[str] = "geometry_msgs/msg/WrenchStamped"
    dim: ClassVar[int] = 6
    names: ClassVar[tuple[str, ...]] = ("fx", "fy", "fz", "tx", "ty", "tz")
    stamped: ClassVar[bool] = True

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> WrenchAdapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        return cls()

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        f, t = msg.wrench.force, msg.wrench.torque
        return np.array([f.x, f.y, f.z, t.x, t.y, t.z], dtype=np.float32)

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {}


# /policy/actor values -> the codes of the ``actor`` input (feature table: ``ACTOR_FEATURE``)
ACTOR_TOPIC = POLICY_ACTOR
ACTOR_CODES: dict[str, float] = {"none": 0.0, "policy": 1.0, "operator": 2.0}


@dataclass
class ActorAdapter:
    """std_msgs/String "none" | "policy" | "operator" (the policy node's latched /policy/actor) -> its ``ACTOR_CODES``.

    Codes: 0 none/teleop recording, 1 policy, 2 operator takeover; another value is not a sample (the row keeps the
    last code). No header: stamped with the receive time.
    """

    msg_type: ClassVar[str] = "std_msgs/msg/String"
    dim: ClassVar[int] = 1
    names: ClassVar[tuple[str, ...]] = ("actor",)
    stamped: ClassVar[bool] = False

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> ActorAdapter:
        """Build the adapter from a mapping file's options (``where`` names the entry in errors)."""
        return cls()

    def read(self, msg: Any) -> np.ndarray | None:
        """The input vector the message holds, or None (see ``Adapter``)."""
        code = ACTOR_CODES.get(str(msg.data).strip())
        return None if code is None else np.array([code], dtype=np.float32)

    def options(self) -> dict[str, Any]:
        """The options that rebuild this adapter (see ``Adapter``)."""
        return {}


# kind (``InputSpec.adapter``) -> the adapter built from a mapping entry's options
ADAPTERS: dict[str, Callable[[Mapping[str, Any], str], Adapter]] = {
    "joint_state": JointStateAdapter.from_mapping,
    "gripper": GripperAdapter.from_mapping,
    "pose": PoseAdapter.from_mapping,
    "float32": Float32Adapter.from_mapping,
    "wrench": WrenchAdapter.from_mapping,
    "actor": ActorAdapter.from_mapping,
}


def make_adapter(kind: str, options: Mapping[str, Any] | None = None, where: str = "adapter") -> Adapter:
    """The adapter ``kind`` with the options of a mapping entry (joint names, scales)."""
    if kind not in ADAPTERS:
        raise ValueError(f"{where}: unknown adapter {kind!r} (known: {sorted(ADAPTERS)})")
    return ADAPTERS[kind](options or {}, where)

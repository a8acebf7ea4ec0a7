"""Feature (parquet column) definitions and the default Piper set of the dataset spec.

A ``FeatureSpec`` is one float32 vector column; ``modality`` names its sub-slices for
``modality.json`` (GR00T style). Combined columns (``observation.state``, ``action``) are not
configured here: the writer concatenates the split columns listed in ``COMBINED`` when
``WriterConfig.combined_columns`` is on, because LeRobot policies and lerobot-doctor look for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# (sub-modality name, start, end, is_rotation)
Slice = tuple[str, int, int, bool]

BOOKKEEPING: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}


@dataclass(frozen=True)
class FeatureSpec:
    """One float32 vector column: ``key`` (e.g. "observation.arm_joint"), element ``names``."""

    key: str
    names: tuple[str, ...]
    modality: tuple[Slice, ...] = field(default=())

    @property
    def dim(self) -> int:
        return len(self.names)

    @property
    def group(self) -> str:
        """modality.json group: "state" for observation.*, "action" for action.*."""
        return "action" if self.key.startswith("action") else "state"

    def slices(self) -> tuple[Slice, ...]:
        """Declared sub-slices, or one slice covering the column named after the key's last part."""
        return self.modality or ((self.key.split(".")[-1], 0, self.dim, False),)

    def validate(self) -> None:
        if not self.key or not self.names or len(set(self.names)) != len(self.names):
            raise ValueError(f"feature {self.key!r}: needs a key and unique element names")
        if self.key in BOOKKEEPING or self.key.startswith("observation.images."):
            raise ValueError(f"feature {self.key!r}: reserved key")
        for name, a, b, _ in self.slices():
            if not 0 <= a < b <= self.dim:
                raise ValueError(f"feature {self.key!r}: modality slice {name} [{a}:{b}] out of range")


JOINTS = tuple(f"joint{i}" for i in range(1, 7))
POSE = ("x", "y", "z", "qw", "qx", "qy", "qz")
POSE_SLICES: tuple[Slice, ...] = (("eef_pos", 0, 3, False), ("eef_rot", 3, 7, True))

# combined column -> split columns concatenated in this order
COMBINED: dict[str, tuple[str, ...]] = {
    "observation.state": ("observation.arm_joint", "observation.arm_eef", "observation.gripper"),
    "action": ("action.arm_eef", "action.gripper"),
}


def piper_features() -> tuple[FeatureSpec, ...]:
    """The spec's Piper columns: joints (rad), flange pose (m + quat wxyz), gripper width (m)."""
    return (
        FeatureSpec("observation.arm_joint", JOINTS, (("arm_joint", 0, 6, False),)),
        FeatureSpec("observation.arm_eef", POSE, POSE_SLICES),
        FeatureSpec("observation.gripper", ("width",), (("gripper", 0, 1, False),)),
        FeatureSpec("action.arm_eef", POSE, POSE_SLICES),
        FeatureSpec("action.gripper", ("width",), (("gripper", 0, 1, False),)),
    )


def combined_specs(features: tuple[FeatureSpec, ...]) -> dict[str, tuple[FeatureSpec, ...]]:
    """The combined columns whose parts are all configured, with element names prefixed by part."""
    by_key = {f.key: f for f in features}
    return {k: tuple(by_key[p] for p in parts) for k, parts in COMBINED.items()
            if all(p in by_key for p in parts)}


def combined_names(parts: tuple[FeatureSpec, ...]) -> list[str]:
    """Element names of a combined column, e.g. "arm_eef.qw" (unique across parts)."""
    return [f"{p.key.split('.', 1)[1]}.{n}" for p in parts for n in p.names]

"""Feature (parquet column) definitions; the Piper set comes from the one feature table.

A ``FeatureSpec`` is one float32 vector column; ``modality`` names its sub-slices for
``modality.json`` (GR00T style). Combined columns (``observation.state``, ``action``) are not
columns of their own: the writer concatenates the split columns that name one in ``combined`` (in
feature order) when ``WriterConfig.combined_columns`` is on, because LeRobot policies and
lerobot-doctor look for them. The columns, names and modality slices are those of the feature table
(``features.table``): ``lerobot_features(table)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from piper_recorder.features.table import JOINTS, PIPER_TABLE, POSE, POSE_SLICES, FeatureTable, Slice
from piper_recorder.names import IMAGES_PREFIX

__all__ = [
    "BOOKKEEPING",
    "COMBINED",
    "JOINTS",
    "POSE",
    "POSE_SLICES",
    "FeatureSpec",
    "Slice",
    "combined_names",
    "combined_specs",
    "lerobot_features",
    "piper_features",
]

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
    combined: str | None = None  # the combined column this joins (observation.state, action)

    @property
    def dim(self) -> int:
        """The number of elements in the column."""
        return len(self.names)

    @property
    def group(self) -> str | None:
        """The modality.json group: "action" for action.*, "state" for observation.* and other inputs' keys.

        None for ``complementary_info.*``: per-frame info that is neither (e.g. who acted), not a modality a policy
        slices, so modality.json does not list it.
        """
        if self.key.startswith("complementary_info."):
            return None
        return "action" if self.key.startswith("action") else "state"

    def slices(self) -> tuple[Slice, ...]:
        """Declared sub-slices, or one slice covering the column named after the key's last part."""
        return self.modality or ((self.key.split(".")[-1], 0, self.dim, False),)

    def validate(self) -> None:
        """Raise ``ValueError`` for a spec that cannot be a column of ours."""
        if not self.key or not self.names or len(set(self.names)) != len(self.names):
            raise ValueError(f"feature {self.key!r}: needs a key and unique element names")
        if self.key in BOOKKEEPING or self.key.startswith(IMAGES_PREFIX):
            raise ValueError(f"feature {self.key!r}: reserved key")
        for name, a, b, _ in self.slices():
            if not 0 <= a < b <= self.dim:
                raise ValueError(f"feature {self.key!r}: modality slice {name} [{a}:{b}] out of range")


def lerobot_features(table: FeatureTable) -> tuple[FeatureSpec, ...]:
    """The LeRobot columns of a feature table, in table order."""
    return tuple(FeatureSpec(f.column, f.names, f.modality, f.combined) for f in table.features if f.column is not None)


def piper_features() -> tuple[FeatureSpec, ...]:
    """The spec's Piper columns: joints (rad), flange pose (m + quat wxyz), gripper width (m)."""
    return lerobot_features(PIPER_TABLE)


def combined_specs(features: tuple[FeatureSpec, ...]) -> dict[str, tuple[FeatureSpec, ...]]:
    """Combined column -> the split columns it concatenates, in feature order."""
    out: dict[str, list[FeatureSpec]] = {}
    for f in features:
        if f.combined is not None:
            out.setdefault(f.combined, []).append(f)
    return {k: tuple(v) for k, v in out.items()}


# combined column -> split columns concatenated in this order (the Piper set)
COMBINED: dict[str, tuple[str, ...]] = {
    k: tuple(p.key for p in parts) for k, parts in combined_specs(piper_features()).items()
}


def combined_names(parts: tuple[FeatureSpec, ...]) -> list[str]:
    """Element names of a combined column, e.g. "arm_eef.qw" (unique across parts)."""
    return [f"{p.key.split('.', 1)[1]}.{n}" for p in parts for n in p.names]

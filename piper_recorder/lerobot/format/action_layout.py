"""Each arm's columns in a LeRobot root, and where its targets sit in a row of the root's ``action``.

A policy answers, and a replay plays, rows laid out as the root's combined ``action`` column. One arm:
``action.arm_eef`` (x, y, z, qw, qx, qy, qz; metres, the arm's base frame) then ``action.gripper``
(metres), 8 numbers. Several arms (``features.table.arms_table``): each arm's ``action.<arm>_arm_eef`` and
``action.<arm>_gripper``, the arms in the column's order (two arms: left 0:8, right 8:16).
``ActionLayout.from_features`` reads it from the root's own ``info.json`` features, never from a list of
names: the arms are the prefixes of its pose columns; the order and offsets come from the combined
column's element names (``left_arm_eef.x`` ...), or, in a root without that column, from the split columns
in file order (the writer's concatenation order). A root whose action holds anything else (a column no arm
owns, a pose of another width) is refused: nothing would drive it.

This is the one statement of the layout: the inference runtime's executor, envelope and backends and the
replay take each arm's slices from here. Each arm's observation columns (``observation.left_arm_eef`` ...)
are named by the same rule (``ArmSlots.state_column``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from piper_recorder.errors import SchemaError
from piper_recorder.features.table import ACTION, PIPER_TABLE, POSE, arm_column
from piper_recorder.names import parse_arms

from .root import read_info

F64 = npt.NDArray[np.float64]

_ACTED = [f for f in PIPER_TABLE.features if f.combined == ACTION and f.column is not None]
POSE_COLUMN: str = next(str(f.column) for f in _ACTED if f.names == POSE)  # action.arm_eef
GRIPPER_COLUMN: str = next(str(f.column) for f in _ACTED if f.names != POSE)  # action.gripper
POSE_WIDTH = len(POSE)  # x y z qw qx qy qz
ARM_WIDTH = POSE_WIDTH + 1  # an arm's part of a row: its pose, then its gripper
# one arm's observation columns by their table key (arm_joint, arm_eef, gripper): observation.arm_eef, ...
_OBSERVED = {f.key: str(f.column) for f in PIPER_TABLE.features if f.column and f.column.startswith("observation.")}


@dataclass(frozen=True)
class ArmSlots:
    """One arm's place in an action row: its pose at ``pose_at`` (7 values), its gripper at ``gripper_at``.

    ``arm`` is None for a root of one arm (the unprefixed names).
    """

    arm: str | None
    pose_at: int
    gripper_at: int

    @property
    def label(self) -> str:
        """The arm's name in messages: its name, or ``arm`` for one arm."""
        return self.arm or "arm"

    @property
    def pose_column(self) -> str:
        """The arm's pose action column (``action.left_arm_eef``)."""
        return str(arm_column(self.arm, POSE_COLUMN))

    @property
    def gripper_column(self) -> str:
        """The arm's gripper action column (``action.left_gripper``)."""
        return str(arm_column(self.arm, GRIPPER_COLUMN))

    def state_column(self, key: str) -> str:
        """The arm's observation column of table key ``arm_joint``, ``arm_eef`` or ``gripper``."""
        return str(arm_column(self.arm, _OBSERVED[key]))

    @property
    def quat(self) -> slice:
        """The row slice of the arm's quaternion (qw, qx, qy, qz)."""
        return slice(self.pose_at + 3, self.pose_at + POSE_WIDTH)

    def part(self, row: npt.ArrayLike) -> F64:
        """The arm's pose and gripper from a row: 8 values, a one-arm row."""
        r = np.asarray(row, dtype=np.float64)
        return np.concatenate([r[self.pose_at : self.pose_at + POSE_WIDTH], r[self.gripper_at : self.gripper_at + 1]])


@dataclass(frozen=True)
class ActionLayout:
    """Where each arm's targets sit in an action row of ``dim`` values (the module's rules)."""

    arms: tuple[ArmSlots, ...]
    dim: int

    @staticmethod
    def single() -> ActionLayout:
        """One arm: ``action.arm_eef`` then ``action.gripper``, 8 values."""
        return ActionLayout((ArmSlots(None, 0, POSE_WIDTH),), ARM_WIDTH)

    @property
    def arm_names(self) -> tuple[str, ...]:
        """The arms' names in row order; () for one arm (``names.parse_arms``'s convention)."""
        return tuple(s.arm for s in self.arms if s.arm is not None)

    @property
    def keys(self) -> tuple[str | None, ...]:
        """The arms as dictionary keys: their names, or None for one arm."""
        return tuple(s.arm for s in self.arms)

    def slots(self, arm: str | None) -> ArmSlots:
        """Arm ``arm``'s slots; KeyError naming the arms otherwise."""
        for s in self.arms:
            if s.arm == arm:
                return s
        raise KeyError(f"no arm {arm!r} in this action layout (arms: {self.describe()})")

    def columns(self) -> dict[str, int]:
        """Each split action column -> its first index in the row, in row order."""
        out = {}
        for s in self.arms:
            out[s.pose_column] = s.pose_at
            out[s.gripper_column] = s.gripper_at
        return dict(sorted(out.items(), key=lambda kv: kv[1]))

    def widths(self) -> dict[str, int]:
        """Each split action column -> its number of values (a pose 7, a gripper 1), in row order."""
        return {c: POSE_WIDTH if c in {s.pose_column for s in self.arms} else 1 for c in self.columns()}

    def describe(self) -> str:
        """The layout in a few words: ``one arm`` or ``two arms (left, right)``."""
        if not self.arm_names:
            return "one arm"
        n = len(self.arm_names)
        return f"{'two' if n == 2 else n} arms ({', '.join(self.arm_names)})"

    def join(self, parts: Mapping[str | None, Sequence[float] | npt.ArrayLike]) -> F64:
        """One row from each arm's 8 values (pose wxyz, gripper)."""
        row = np.full(self.dim, np.nan)
        for s in self.arms:
            p = np.asarray(parts[s.arm], dtype=np.float64).reshape(-1)
            row[s.pose_at : s.pose_at + POSE_WIDTH] = p[:POSE_WIDTH]
            row[s.gripper_at] = p[POSE_WIDTH]
        return row

    @staticmethod
    def from_features(features: Mapping[str, Mapping[str, Any]]) -> ActionLayout:
        """The layout of a root's ``info.json`` ``features``; ``SchemaError`` saying why it has none."""
        group = POSE_COLUMN.split(".", 1)[0] + "."  # "action."
        pose_suffix = "_" + POSE_COLUMN.split(".", 1)[1]  # "_arm_eef"
        arms: tuple[str | None, ...]
        if POSE_COLUMN in features or GRIPPER_COLUMN in features:
            arms = (None,)
        else:
            found = [
                k[len(group) : -len(pose_suffix)] for k in features if k.startswith(group) and k.endswith(pose_suffix)
            ]
            if not found:
                raise SchemaError(
                    f"no {POSE_COLUMN} + {GRIPPER_COLUMN} features (one arm) and no {group}<arm>{pose_suffix} "
                    f"(several arms): nothing here drives an arm"
                )
            try:
                arms = parse_arms(found)
            except ValueError as e:
                raise SchemaError(f"the action columns name arms {found}: {e}") from None
        slots = [ArmSlots(a, 0, 0) for a in arms]
        missing = [c for s in slots for c in (s.pose_column, s.gripper_column) if c not in features]
        if missing:
            raise SchemaError(f"no {', '.join(missing)} feature: each arm needs its pose and its gripper action")
        width = {k: _width(k, f) for k, f in features.items()}
        for s in slots:
            if width[s.pose_column] != POSE_WIDTH or width[s.gripper_column] != 1:
                raise SchemaError(
                    f"{s.pose_column} has {width[s.pose_column]} values and {s.gripper_column} "
                    f"{width[s.gripper_column]}: an arm's action is {POSE_WIDTH} (x y z qw qx qy qz) + 1"
                )
        owned = {c for s in slots for c in (s.pose_column, s.gripper_column)}
        order = _combined_order(features.get(ACTION), width) or [k for k in features if k in owned]
        extra = [c for c in order if c not in owned]
        if extra:
            raise SchemaError(
                f"the {ACTION} column holds {', '.join(extra)} besides each arm's pose and gripper: "
                f"no arm would drive it"
            )
        if set(order) != owned:
            raise SchemaError(f"the {ACTION} column lacks {', '.join(sorted(owned - set(order)))}")
        at, offsets = 0, {}
        for c in order:
            offsets[c] = at
            at += width[c]
        if ACTION in features and width[ACTION] != at:
            raise SchemaError(f"the {ACTION} column has {width[ACTION]} values, its arms' columns {at}")
        placed = sorted((ArmSlots(s.arm, offsets[s.pose_column], offsets[s.gripper_column]) for s in slots), key=_at)
        return ActionLayout(tuple(placed), at)

    @staticmethod
    def load(root: str | Path) -> ActionLayout:
        """The layout of the root at ``root`` (its ``meta/info.json``)."""
        return ActionLayout.from_features(read_info(root).to_json()["features"])


def _at(s: ArmSlots) -> int:
    return s.pose_at


def _width(key: str, feature: Mapping[str, Any]) -> int:
    try:
        return int(np.prod([int(s) for s in feature.get("shape") or [1]]))
    except (TypeError, ValueError):
        raise SchemaError(f"feature {key}: shape {feature.get('shape')!r} is not a list of integers") from None


def _combined_order(combined: Mapping[str, Any] | None, width: Mapping[str, int]) -> list[str] | None:
    """The split columns the combined ``action`` concatenates, from its element names (``left_arm_eef.x``).

    None when it has no names that say so (a root of another writer): the split columns' file order applies.
    """
    names = combined.get("names") if combined is not None else None
    if not isinstance(names, list) or not all(isinstance(n, str) and "." in n for n in names):
        return None
    order: list[str] = []
    count: dict[str, int] = {}
    for n in names:
        col = f"{ACTION}.{n.split('.', 1)[0]}"
        if col not in count:
            order.append(col)
        count[col] = count.get(col, 0) + 1
    if any(col not in width or width[col] != k for col, k in count.items()):
        return None
    if [c for c in order for _ in range(count[c])] != [f"{ACTION}.{n.split('.', 1)[0]}" for n in names]:
        return None  # one column's elements apart: not a concatenation of the split columns
    return order

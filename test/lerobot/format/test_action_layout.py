"""Each arm's place in a root's action row (``lerobot.format.action_layout``), read from the root's info.json:
checked against the rows themselves (pyarrow) of a one-arm root and of a two-arm root the bag converter wrote,
and against info.json documents a test edits (another arm order, no combined column, damaged layouts).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from piper_recorder.errors import SchemaError
from piper_recorder.lerobot.format.action_layout import ActionLayout

from support.lerobot_fixtures import small_root


def _columns(root: Path, episode: int = 0) -> dict[str, np.ndarray]:
    t = pq.read_table(root / f"data/chunk-000/episode_{episode:06d}.parquet")
    return {n: np.asarray(t[n].to_pylist(), dtype=np.float64).reshape(t.num_rows, -1) for n in t.column_names}


def _features(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())["features"]


def test_one_arm_is_pose_then_gripper_as_the_action_column_holds_them(tmp_path: Path):
    root = small_root(tmp_path / "one")
    layout = ActionLayout.load(root)
    assert layout == ActionLayout.single() and layout.dim == 8 and layout.arm_names == () and layout.keys == (None,)
    c = _columns(root)
    (arm,) = layout.arms
    assert np.array_equal(c["action"][:, arm.pose_at : arm.pose_at + 7], c["action.arm_eef"])
    assert np.array_equal(c["action"][:, arm.gripper_at], c["action.gripper"][:, 0])
    assert arm.state_column("arm_eef") == "observation.arm_eef" and arm.label == "arm"


def test_two_arms_slice_the_combined_action_of_a_converted_bag(bimanual_training_root: Path):
    root = bimanual_training_root
    layout = ActionLayout.load(root)
    assert layout.arm_names == ("left", "right") and layout.dim == 16
    assert layout.columns() == {
        "action.left_arm_eef": 0,
        "action.left_gripper": 7,
        "action.right_arm_eef": 8,
        "action.right_gripper": 15,
    }
    c = _columns(root)
    for arm in layout.arms:
        assert np.array_equal(c["action"][:, arm.pose_at : arm.pose_at + 7], c[f"action.{arm.arm}_arm_eef"])
        assert np.array_equal(c["action"][:, arm.gripper_at], c[f"action.{arm.arm}_gripper"][:, 0])
        assert arm.state_column("gripper") == f"observation.{arm.arm}_gripper"
        assert arm.state_column("arm_eef") in _features(root)
    row = c["action"][5]
    joined = layout.join({a.arm: a.part(row) for a in layout.arms})
    assert np.array_equal(joined, row)  # the two arms' parts give the row back
    assert layout.describe() == "two arms (left, right)"


def test_the_order_is_the_combined_columns_not_a_list_of_names(bimanual_training_root: Path):
    feats = _features(bimanual_training_root)
    names = feats["action"]["names"]
    right_first = copy.deepcopy(feats)
    right_first["action"]["names"] = names[8:] + names[:8]
    layout = ActionLayout.from_features(right_first)
    assert layout.arm_names == ("right", "left") and layout.slots("right").pose_at == 0
    assert layout.slots("left").gripper_at == 15
    no_combined = {k: v for k, v in feats.items() if k != "action"}  # the split columns in file order
    assert ActionLayout.from_features(no_combined) == ActionLayout.load(bimanual_training_root)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda f: f.pop("action.right_gripper"), "no action.right_gripper feature"),
        (lambda f: f["action.left_arm_eef"].update(shape=[6]), "has 6 values"),
        (lambda f: f.pop("action.right_arm_eef"), "name two or more arms"),
        (
            lambda f: (
                f["action"].update(shape=[17], names=[*f["action"]["names"], "extra.x"])
                or f.update({"action.extra": {"dtype": "float32", "shape": [1], "names": ["x"]}})
            ),
            "holds action.extra",
        ),
        (lambda f: f["action"].update(shape=[15], names=["a"] * 15), "has 15 values, its arms' columns 16"),
    ],
)
def test_a_layout_no_arm_can_drive_is_refused_saying_why(bimanual_training_root: Path, edit, match):
    feats = copy.deepcopy(_features(bimanual_training_root))
    edit(feats)
    with pytest.raises(SchemaError, match=match):
        ActionLayout.from_features(feats)
    with pytest.raises(SchemaError, match="nothing here drives an arm"):
        ActionLayout.from_features({"observation.state": {"shape": [14]}})

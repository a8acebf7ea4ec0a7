"""piper-finalize against a direct numpy computation (4x4 matrices, explicit loops) on hand-made roots."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from piper_recorder.lerobot.maintenance.action_stats import FinalizeConfig, compute, finalize_root

from support.lerobot_fixtures import random_episode, small_root, write_root

BIN = Path(sys.executable).parent
C45 = np.cos(np.pi / 4)


# ---- independent reference: homogeneous matrices and Shepperd's matrix -> quaternion -------------
def pose_matrix(p: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(p[3:7], dtype=np.float64) / np.linalg.norm(p[3:7])
    T = np.eye(4)
    T[:3, :3] = [
        [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
    ]
    T[:3, 3] = p[:3]
    return T


def matrix_quat_wxyz(R: np.ndarray) -> np.ndarray:
    tr = np.trace(R)
    if tr > 0:
        s = 2 * np.sqrt(tr + 1)
        q = [s / 4, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2 * np.sqrt(1 + R[0, 0] - R[1, 1] - R[2, 2])
        q = [(R[2, 1] - R[1, 2]) / s, s / 4, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s]
    elif R[1, 1] > R[2, 2]:
        s = 2 * np.sqrt(1 + R[1, 1] - R[0, 0] - R[2, 2])
        q = [(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, s / 4, (R[1, 2] + R[2, 1]) / s]
    else:
        s = 2 * np.sqrt(1 + R[2, 2] - R[0, 0] - R[1, 1])
        q = [(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, s / 4]
    q = np.array(q)
    return -q if q[0] < 0 else q  # documented convention: w >= 0


def ref_rel(a: np.ndarray, b: np.ndarray, pose: bool) -> np.ndarray:
    if not pose:
        return b - a
    T = np.linalg.inv(pose_matrix(a)) @ pose_matrix(b)
    return np.concatenate([T[:3, 3], matrix_quat_wxyz(T[:3, :3])])


def ref_samples(episodes, act: str, obs: str, horizon: int, pose: bool):
    """Loop version of the spec: windows action[i..i+H-1] padded with the last action."""
    rel, dlt = [], []
    for cols in episodes:
        S = cols[obs].astype(np.float32).astype(np.float64)
        A = cols[act].astype(np.float32).astype(np.float64)
        n = len(A)
        for i in range(n):
            prev = S[i]
            for k in range(horizon):
                target = A[min(i + k, n - 1)]
                rel.append(ref_rel(S[i], target, pose))
                dlt.append(ref_rel(prev, target, pose))
                prev = target
    return np.array(rel), np.array(dlt)


def ref_stats(x: np.ndarray) -> dict:
    return {
        "mean": x.mean(0),
        "std": x.std(0),
        "min": x.min(0),
        "max": x.max(0),
        "q01": np.quantile(x, 0.01, axis=0),
        "q99": np.quantile(x, 0.99, axis=0),
    }


def assert_stats(got: dict, want: dict, atol=1e-9):
    assert set(got) == {"mean", "std", "min", "max", "q01", "q99"}
    for key, val in want.items():
        np.testing.assert_allclose(np.array(got[key]), val, atol=atol, err_msg=key)


def const_episode(n: int, state_pose, action_pose, state_grip=0.02, action_grip=0.05):
    cols = random_episode(np.random.default_rng(1), n)
    cols["observation.arm_eef"] = np.tile(state_pose, (n, 1))
    cols["action.arm_eef"] = np.tile(action_pose, (n, 1))
    cols["observation.gripper"] = np.full((n, 1), state_grip)
    cols["action.gripper"] = np.full((n, 1), action_grip)
    return cols


def load(root: Path, name: str) -> dict:
    return json.loads((root / "meta" / name).read_text())


# ---- tests ------------------------------------------------------------------------------------------
def test_rotated_state_rotates_relative_translation(tmp_path):
    """State rotated 90 deg about z, action 0.1 m further along base x: relative position is -0.1 along y."""
    state = [0.0, 0.0, 0.0, C45, 0.0, 0.0, C45]
    action = [0.1, 0.0, 0.0, C45, 0.0, 0.0, C45]
    root = write_root(tmp_path / "r", [("t", const_episode(4, state, action))], cameras=())
    finalize_root(root, FinalizeConfig(horizon=3, log=lambda m: None))
    rel = load(root, "relative_stats.json")["action.arm_eef"]
    expected = [0.0, -0.1, 0.0, 1.0, 0.0, 0.0, 0.0]
    naive = np.subtract(action, state)
    for key in ("mean", "min", "max", "q01", "q99"):
        np.testing.assert_allclose(rel[key], expected, atol=1e-6)
    assert not np.allclose(rel["mean"][:3], naive[:3], atol=1e-3)  # differs from plain subtraction
    np.testing.assert_allclose(rel["std"], 0.0, atol=1e-6)
    grip = load(root, "relative_stats.json")["action.gripper"]
    np.testing.assert_allclose(grip["mean"], [0.03], atol=1e-6)
    # delta: first step equals the relative pose, later steps repeat the same action -> identity
    dlt = load(root, "delta_stats.json")["action.arm_eef"]
    np.testing.assert_allclose(dlt["min"], [0.0, -0.1, 0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(dlt["max"], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(dlt["mean"], [0.0, -0.1 / 3, 0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("horizon", [1, 4, 15])
def test_matches_numpy_reference(tmp_path, horizon):
    """Random poses (quaternions of either sign), two episodes, horizon longer than an episode (padding)."""
    rng = np.random.default_rng(horizon)
    episodes = [random_episode(rng, 11), random_episode(rng, 6)]
    root = write_root(tmp_path / "r", [("a", episodes[0]), ("b", episodes[1])], cameras=())
    finalize_root(root, FinalizeConfig(horizon=horizon, log=lambda m: None))
    relative, delta = load(root, "relative_stats.json"), load(root, "delta_stats.json")
    for act, obs, pose in (
        ("action.arm_eef", "observation.arm_eef", True),
        ("action.gripper", "observation.gripper", False),
    ):
        rel, dlt = ref_samples(episodes, act, obs, horizon, pose)
        assert len(rel) == 17 * horizon
        assert_stats(relative[act], ref_stats(rel))
        assert_stats(delta[act], ref_stats(dlt))
    assert np.min(relative["action.arm_eef"]["min"][3]) >= 0  # canonical sign w >= 0
    assert np.min(delta["action.arm_eef"]["min"][3]) >= 0
    # per-row statistics of every observation.* column, as stored (float32), identical in both files
    for obs in ("observation.arm_joint", "observation.arm_eef", "observation.gripper", "observation.state"):
        if obs == "observation.state":
            rows = np.concatenate(
                [
                    np.concatenate(
                        [e["observation.arm_joint"], e["observation.arm_eef"], e["observation.gripper"]], axis=1
                    )
                    for e in episodes
                ]
            )
        else:
            rows = np.concatenate([e[obs] for e in episodes])
        assert_stats(relative[obs], ref_stats(rows.astype(np.float32).astype(np.float64)))
        assert relative[obs] == delta[obs]
    # combined `action` = arm_eef then gripper entries concatenated
    for out in (relative, delta):
        for key in ("mean", "std", "min", "max", "q01", "q99"):
            assert out["action"][key] == out["action.arm_eef"][key] + out["action.gripper"][key]
    assert set(relative) == {
        "action.arm_eef",
        "action.gripper",
        "action",
        "observation.arm_joint",
        "observation.arm_eef",
        "observation.gripper",
        "observation.state",
    }


def test_canonical_sign_rule():
    from piper_recorder.lerobot.maintenance.se3 import canonical

    got = canonical(np.array([[-0.6, 0.8, 0, 0], [0, -0.6, 0.8, 0], [0, 0, 0, -1], [0.6, -0.8, 0, 0]]))
    np.testing.assert_array_equal(got, [[0.6, -0.8, 0, 0], [0, 0.6, -0.8, 0], [0, 0, 0, 1], [0.6, -0.8, 0, 0]])


def test_quaternion_sign_of_inputs_does_not_matter(tmp_path):
    rng = np.random.default_rng(7)
    ep = random_episode(rng, 9)
    flipped = {k: v.copy() for k, v in ep.items()}
    for col in ("observation.arm_eef", "action.arm_eef"):
        flipped[col][::2, 3:7] *= -1
    a = write_root(tmp_path / "a", [("t", ep)], cameras=(), combined=False)
    b = write_root(tmp_path / "b", [("t", flipped)], cameras=(), combined=False)
    ra = compute(a, FinalizeConfig(horizon=5))
    rb = compute(b, FinalizeConfig(horizon=5))
    for out_a, out_b in ((ra.relative, rb.relative), (ra.delta, rb.delta)):
        for key in ("mean", "std", "min", "max"):
            np.testing.assert_allclose(out_a["action.arm_eef"][key], out_b["action.arm_eef"][key], atol=1e-6)


def test_parquet_and_videos_untouched_and_no_temp_files(tmp_path):
    root = small_root(tmp_path / "r")

    def digests():
        return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}

    before = digests()
    finalize_root(root, FinalizeConfig(horizon=5, log=lambda m: None))
    after = digests()
    new = {Path("meta/relative_stats.json"), Path("meta/delta_stats.json")}
    assert set(after) == set(before) | new
    assert {k: v for k, v in after.items() if k not in new} == before
    finalize_root(root, FinalizeConfig(horizon=5, log=lambda m: None))  # rerun replaces, same content
    assert digests() == after


def test_combined_action_left_out_when_not_the_concatenation(tmp_path):
    root = small_root(tmp_path / "r", cameras=())
    notes = []
    res = finalize_root(
        root, FinalizeConfig(horizon=3, pairs={"action.arm_eef": "observation.arm_eef"}, log=notes.append)
    )
    assert "action" not in res.relative and "action" not in res.delta
    assert "action.gripper" not in res.relative
    assert any("'action'" in n for n in notes)


@pytest.mark.integration
def test_cli_exit_codes(tmp_path):
    root = small_root(tmp_path / "r", cameras=())
    ok = subprocess.run(
        [str(BIN / "piper-finalize"), "--root", str(root), "--horizon", "4"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    assert "relative_stats.json" in ok.stdout
    assert (root / "meta" / "delta_stats.json").exists()
    (tmp_path / "empty" / "meta").mkdir(parents=True)
    bad = subprocess.run(
        [str(BIN / "piper-finalize"), "--root", str(tmp_path / "empty")], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2  # a root it cannot use, like every command (cli.errors)
    assert "piper-finalize:" in bad.stderr and "info.json: missing" in bad.stderr and "Traceback" not in bad.stderr


def test_bounded_memory_keeps_moments_exact(tmp_path):
    """Above quantile_sample_cap only q01/q99 come from a subsample; mean/std/min/max stay exact."""
    rng = np.random.default_rng(11)
    episodes = [random_episode(rng, 40), random_episode(rng, 25)]
    root = write_root(tmp_path / "r", [("a", episodes[0]), ("b", episodes[1])], cameras=())
    res = compute(root, FinalizeConfig(horizon=8, quantile_sample_cap=100))
    rel, _ = ref_samples(episodes, "action.arm_eef", "observation.arm_eef", 8, True)
    want = ref_stats(rel)
    got = res.relative["action.arm_eef"]
    for key in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(got[key], want[key], atol=1e-9, err_msg=key)
    assert np.all(np.array(got["q01"]) >= want["min"]) and np.all(np.array(got["q99"]) <= want["max"])
    spread = want["max"] - want["min"]
    np.testing.assert_allclose(got["q01"], want["q01"], atol=0.15 * spread.max())
    np.testing.assert_allclose(got["q99"], want["q99"], atol=0.15 * spread.max())

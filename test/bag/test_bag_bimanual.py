"""Two arms through the bag converter: a bag of the bimanual graph's topics (each arm under its namespace) and one
of AgileX's driver run twice under namespaces (a mapping file), converted to LeRobot and RGB-D through the same
assembler as one arm. Read back with pyarrow, json and h5py: each arm's values in its own columns, the combined
columns and modality.json slicing them, the RGB-D action in its documented order, provenance per arm.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from piper_recorder.bag.synth import AGILEX_TOPICS, SynthScenario, agilex_scenario, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.validate import validate_root
from rgbd_writer.validate import validate_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # slow: converts synthetic bags of video
W, H = 64, 48  # the depth codec (JPEG 2000) needs tiles this large
ARMS = ("left", "right")
PER_ARM = ("arm_joint", "arm_eef", "gripper")


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Path:
    """Recorder parameters for two arms and a small camera (what the converter reads with --config)."""
    p = tmp_path_factory.mktemp("cfg") / "recorders.yaml"
    common = {"arms": list(ARMS), "camera_width": W, "camera_height": H}
    p.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {"ros__parameters": {**common, "task": "handover", "cameras": ["cam_front"]}},
                "rgbd_recorder": {"ros__parameters": {**common, "camera": "cam_front"}},
            }
        )
    )
    return p


def run(*args: object) -> int:
    return bag2dataset([*map(str, args), "--no-progress"])


def columns(root: Path) -> dict[str, np.ndarray]:
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    return {name: np.asarray(t[name].to_pylist(), dtype=np.float64).reshape(t.num_rows, -1) for name in t.column_names}


def test_a_bimanual_bag_gives_each_arm_its_columns_in_both_formats(tmp_path, cfg):
    scenario = SynthScenario(duration_s=2.0, cameras=("cam_front",), width=W, height=H, arms=ARMS)
    bag = write_bag(tmp_path / "bag", scenario_messages(scenario))
    out = tmp_path / "lerobot"
    assert run(bag, "--format", "lerobot", "--out", out, "--config", cfg, "--episode", "0.2:1.8") == 0
    assert validate_root(out) == []
    info = json.loads((out / "meta/info.json").read_text())
    c = columns(out)
    for arm in ARMS:
        for part in PER_ARM:
            assert f"observation.{arm}_{part}" in info["features"]
        assert {f"action.{arm}_arm_eef", f"action.{arm}_gripper"} <= set(info["features"])
    assert "observation.arm_eef" not in info["features"] and "action.gripper" not in info["features"]
    # each arm's values are its own: the synthetic right arm stands 0.3 m to the right, its command grips 0.03 m
    assert c["observation.left_arm_eef"][:, 1].min() > -0.1 and c["observation.right_arm_eef"][:, 1].max() < -0.2
    assert np.allclose(c["action.left_gripper"], 0.04) and np.allclose(c["action.right_gripper"], 0.03)
    # the combined columns: every column of the left arm, then the right's, named in info.json
    state = np.concatenate([c[f"observation.{a}_{p}"] for a in ARMS for p in PER_ARM], axis=1)
    action = np.concatenate([c[f"action.{a}_{p}"] for a in ARMS for p in ("arm_eef", "gripper")], axis=1)
    assert np.array_equal(c["observation.state"], state) and state.shape[1] == 28
    assert np.array_equal(c["action"], action) and action.shape[1] == 16
    names = info["features"]["action"]["names"]
    assert names[0] == "left_arm_eef.x" and names[7] == "left_gripper.width" and names[15] == "right_gripper.width"
    # modality.json slices each arm's columns under the arm's names
    modality = json.loads((out / "meta/modality.json").read_text())

    def where(group: str, name: str) -> tuple[str, int, int]:
        m = modality[group][name]
        return m["original_key"], m["start"], m["end"]

    for arm in ARMS:
        assert where("state", f"{arm}_arm_joint") == (f"observation.{arm}_arm_joint", 0, 6)
        assert where("state", f"{arm}_eef_rot") == (f"observation.{arm}_arm_eef", 3, 7)
        assert where("action", f"{arm}_eef_pos") == (f"action.{arm}_arm_eef", 0, 3)
        assert where("action", f"{arm}_gripper") == (f"action.{arm}_gripper", 0, 1)
    assert len(modality["state"]) == 8 and len(modality["action"]) == 6
    # provenance per arm: each arm's CAN channel, the binding keys under its name
    (session,) = [json.loads(x) for x in (out / "meta/collection_sessions.jsonl").read_text().splitlines()]
    assert {a: session["arms"][a]["arm"]["can_channel"] for a in ARMS} == {"left": "can0", "right": "can1"}
    assert session["arms"]["right"]["control"]["backend"] == "position" and "control" not in session
    assert session["recording"]["arms"] == list(ARMS)
    assert session["source"]["topics"]["arms"]["right"]["joint_states"] == "/right/arm/joint_states"

    h5 = tmp_path / "rgbd.hdf5"
    assert run(bag, "--format", "rgbd", "--out", h5, "--config", cfg, "--episode", "0.2:1.8") == 0
    assert validate_file(h5, full=True) == []
    with h5py.File(h5, "r") as f:
        actions = f["transitions/actions"][()]
        state = {k: f[f"observations/state/{k}"][()] for k in f["observations/state"]}
        env = json.loads(f["data"].attrs["env_args"])
    # every arm's pose, then every arm's gripper: 7 + 7 + 1 + 1, named in the file's attributes
    assert actions.shape[1] == 16
    assert env["arms"] == list(ARMS) and len(env["action_names"]) == 16
    assert env["action_names"][7] == "right_arm_eef.x" and env["action_names"][14:] == [
        "left_gripper.width",
        "right_gripper.width",
    ]
    n = len(actions)
    expect = np.concatenate(
        [c["action.left_arm_eef"], c["action.right_arm_eef"], c["action.left_gripper"], c["action.right_gripper"]],
        axis=1,
    )
    assert np.allclose(actions, expect[:n], atol=1e-6)
    assert set(state) == {f"{a}_{p}" for a in ARMS for p in PER_ARM}
    assert np.allclose(state["right_arm_eef"], c["observation.right_arm_eef"][: n + 1], atol=1e-6)


def test_agilex_drivers_under_two_namespaces_convert_with_a_mapping(tmp_path, cfg):
    """AgileX's piper_ros run once per arm under the namespaces left and right: /left/joint_states_single (joint7 =
    gripper x1000), /left/end_pose_stamped; no stamped commands or provenance. The mapping names the arms.
    """
    scenario = agilex_scenario(duration_s=2.0, width=W, height=H, arms=ARMS)
    bag = write_bag(tmp_path / "agilex", scenario_messages(scenario), "mcap")
    mapping: dict[str, object] = {"arms": list(ARMS), "raw_quest": None, "left_provenance": None}
    for arm in ARMS:
        js = f"/{arm}{AGILEX_TOPICS['joint_states']}"
        mapping[f"{arm}_joint_states"] = {
            "topic": js,
            "names": [f"joint{i}" for i in range(1, 8)],
            "gripper_scale": 1e-3,
        }
        mapping[f"{arm}_eef_pose"] = mapping[f"{arm}_commanded_pose"] = f"/{arm}{AGILEX_TOPICS['eef_pose']}"
        mapping[f"{arm}_commanded_gripper"] = {"topic": js, "name": "joint7", "scale": 1e-3}
    mapping["right_provenance"] = None
    mapping["cameras"] = {
        "cam_front": {"color": "/camera/color/image_raw", "depth": "/camera/aligned_depth_to_color/image_raw"}
    }
    path = tmp_path / "agilex_bimanual.yaml"
    path.write_text(yaml.safe_dump(mapping))
    out = tmp_path / "out"

    # the recorder parameters say one arm; the mapping's arms win
    def convert(fmt: str, dest: Path, node: str) -> int:
        config = tmp_path / f"{node}.yaml"
        config.write_text(yaml.safe_dump({node: {"ros__parameters": {"camera_width": W, "camera_height": H}}}))
        span = ("--episode", "0.2:1.8", "--task", "fold")
        return run(bag, "--format", fmt, "--out", dest, "--config", config, "--mapping", path, *span)

    assert convert("lerobot", out, "lerobot_recorder") == 0
    assert validate_root(out) == []
    c = columns(out)
    for arm in ARMS:
        assert np.array_equal(c[f"action.{arm}_arm_eef"], c[f"observation.{arm}_arm_eef"])
        assert np.array_equal(c[f"action.{arm}_gripper"], c[f"observation.{arm}_gripper"])
    assert c["observation.left_gripper"].max() < 0.051 and c["observation.left_gripper"].min() > 0.009
    assert not np.allclose(c["observation.left_gripper"], c["observation.right_gripper"])  # two arms, not one twice
    (session,) = [json.loads(x) for x in (out / "meta/collection_sessions.jsonl").read_text().splitlines()]
    assert session["arms"]["left"]["arm"]["firmware"] == "unknown"  # the driver published no provenance
    h5 = tmp_path / "agilex.hdf5"
    assert convert("rgbd", h5, "rgbd_recorder") == 0
    assert validate_file(h5, full=True) == []
    with h5py.File(h5, "r") as f:
        assert f["transitions/actions"].shape[1] == 16


def test_a_mapping_for_two_arms_refuses_one_arm_keys_and_bad_names(tmp_path, cfg, capsys):
    bag = write_bag(
        tmp_path / "bag", scenario_messages(SynthScenario(duration_s=1.0, cameras=("cam_front",), width=W, height=H))
    )
    for doc, words in (
        ({"arms": ["left", "right"], "joint_states": "/joint_states"}, "unknown mapping keys ['joint_states']"),
        ({"arms": ["left", "right"], "provenance": "/arm/provenance"}, "unknown mapping keys ['provenance']"),
        ({"arms": ["left", "Left"]}, "lower-case"),
        ({"arms": ["left", "left"]}, "each name once"),
    ):
        path = tmp_path / "m.yaml"
        path.write_text(yaml.safe_dump(doc))
        assert run(bag, "--format", "lerobot", "--out", tmp_path / "x", "--config", cfg, "--mapping", path) == 2, doc
        out = capsys.readouterr()
        assert words in out.err + out.out, (doc, out)


def test_a_bimanual_root_finalizes_exports_and_views_per_arm(tmp_path, cfg):
    from piper_recorder.cli.export import main as export
    from piper_recorder.cli.finalize import main as finalize
    from piper_recorder.cli.view import main as view

    scenario = SynthScenario(duration_s=2.0, cameras=("cam_front",), width=W, height=H, arms=ARMS)
    bag = write_bag(tmp_path / "bag", scenario_messages(scenario))
    root = tmp_path / "lerobot"
    assert run(bag, "--format", "lerobot", "--out", root, "--config", cfg, "--episode", "0.2:1.8") == 0
    # relative/delta statistics: each arm's action against its own state (the right arm stands 0.3 m away:
    # against the other arm's state its relative y would be about +-0.3 m)
    assert finalize(["--root", str(root), "--horizon", "4"]) == 0
    rel = json.loads((root / "meta/relative_stats.json").read_text())
    for arm in ARMS:
        y = rel[f"action.{arm}_arm_eef"]
        assert abs(y["mean"][1]) < 0.05 and len(y["mean"]) == 7, (arm, y["mean"])
        assert len(rel[f"action.{arm}_gripper"]["mean"]) == 1
    # the v2.1 and v3.0 exports keep every arm's column
    for version in ("v2.1", "v3.0"):
        out = tmp_path / f"export-{version}"
        assert export([str(root), "--to", version, "--out", str(out), "-q"]) == 0
        features = json.loads((out / "meta/info.json").read_text())["features"]
        assert {f"observation.{a}_arm_eef" for a in ARMS} | {"action"} <= set(features), version
    # the report plots each arm under its name
    html = tmp_path / "report.html"
    assert view([str(root), "--out", str(html)]) == 0
    text = html.read_text()
    for arm in ARMS:
        assert f"{arm}: joint positions" in text and f"{arm}: gripper width" in text
    assert "arms.right.arm.firmware" in text  # the binding keys per arm
    h5 = tmp_path / "rgbd.hdf5"
    assert run(bag, "--format", "rgbd", "--out", h5, "--config", cfg, "--episode", "0.2:1.8") == 0
    assert view([str(h5), "--out", str(tmp_path / "rgbd.html")]) == 0
    assert "right_gripper.width" in (tmp_path / "rgbd.html").read_text()

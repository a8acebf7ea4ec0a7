"""Real consumers read and train on a two-arm dataset recorded through the real simulated graph.

``piper-demo --arms left,right`` records 2 episodes of 3 s (2 cameras at 320x240) through two emulated arms,
teleop driving both from the simulated headset's two hands, and both recorders. The v2.0 root and its v3.0
export (``piper-export``) are read at LeRobot's defaults by every consumer that reads that version (LeRobot
0.3.3 the v2.0 root, 0.4.4 and 0.6.1 the export): every frame of every camera decoded within ``tolerance_s``,
and each arm's columns and the combined ``observation.state`` (28) and ``action`` (16) as LeRobot loads them.
``lerobot-train`` (ACT, the size and offline flags of reference-facts §6 only) trains on the combined columns
and its checkpoint answers 16-wide actions. Consumer venvs as in ``test_consumers``.
"""

from __future__ import annotations

import json
import time

import pytest

from support.consumers import (
    SCRIPTS,
    SIZE,
    DemoRoots,
    consumer_env,
    consumer_python,
    export_v30,
    record_demo,
    run_json,
    tail,
    timed,
    train_act,
)

ARMS = ("left", "right")
EPISODES, SECONDS = 2, 3
READERS = [("v2.0", "lerobot03"), ("v3.0", "lerobot04"), ("v3.0", "lerobot06")]
PER_ARM = ("arm_joint", "arm_eef", "gripper")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> DemoRoots:
    """The two-arm v2.0 root recorded once, and its v3.0 export."""
    base = tmp_path_factory.mktemp("bimanual_roots")
    roots = DemoRoots(
        {
            "v2.0": lambda: record_demo(base / "v20", EPISODES, SECONDS, SIZE, "--arms", ",".join(ARMS)),
            "v3.0": lambda: export_v30(roots.get("v2.0"), base / "v30"),
        },
        what="two-arm ",
    )
    return roots


@pytest.mark.parametrize(("version", "consumer"), READERS, ids=[f"{v}-{c}" for v, c in READERS])
def test_lerobot_reads_every_frame_and_each_arm_of_a_two_arm_root(version, consumer, roots, hf_home):
    py, root, env = consumer_python(consumer), roots.get(version), consumer_env(hf_home)
    t0 = time.monotonic()
    p, rep = run_json([str(py), str(SCRIPTS / "read_every_frame.py"), str(root)], env, 900)
    timed(f"{consumer} reads every frame of the two-arm {version} root", t0)
    assert rep and "open_error" not in rep, f"({p.returncode}):\n{tail(p.stdout + p.stderr)}"
    assert rep["tolerance_s"] == pytest.approx(1e-4) and rep["video_backend"] == "torchcodec"
    assert rep["episodes"] == EPISODES and rep["failed_rows"] == 0, rep.get("first_error")
    assert rep["decoded"] == dict.fromkeys(rep["cameras"], rep["rows"]) and rep["bad_images"] == 0
    # each arm's column as LeRobot hands it to a training loop, and the combined columns' widths
    p, col = run_json([str(py), str(SCRIPTS / "read_column.py"), str(root), "observation.right_arm_eef"], env, 600)
    assert col, tail(p.stdout + p.stderr)
    assert len(col["values"]) == rep["rows"] and all(len(v) == 7 for v in col["values"])
    features = set(col["policy_features"])
    assert {f"observation.{a}_{part}" for a in ARMS for part in PER_ARM} <= features, sorted(features)
    assert {"observation.state", "action"} <= features
    p, state = run_json([str(py), str(SCRIPTS / "read_column.py"), str(root), "observation.state"], env, 600)
    assert state and all(len(v) == 28 for v in state["values"]), tail(p.stdout + p.stderr)
    # the combined state is every left column, then the right's: its right eef slice is the right arm's column
    assert all(s[20:27] == pytest.approx(r, abs=1e-6) for s, r in zip(state["values"], col["values"], strict=True))


def test_lerobot_train_act_on_the_two_arm_combined_columns(roots, hf_home, tmp_path):
    consumer = "lerobot04"
    py, root, env = consumer_python(consumer), roots.get("v3.0"), consumer_env(hf_home)
    ckpt = train_act(consumer, root, tmp_path / "train", env)
    p, rep = run_json([str(py), str(SCRIPTS / "policy_actions.py"), str(ckpt), str(root)], env, 600)
    assert rep and p.returncode == 0, tail(p.stdout + p.stderr)
    assert rep["finite"] and rep["action_shape"][-1] == rep["action_dim"] == 16, json.dumps(rep)
    assert "observation.state" in rep["inputs"]

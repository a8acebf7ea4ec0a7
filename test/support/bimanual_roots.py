"""A LeRobot root of two arms as the recorders write it: a synthetic bag of the two-arm graph (each arm under
its namespace, ``SynthScenario(arms=...)``) converted by ``piper-bag2dataset`` in about a second.

``bimanual_training_root`` (session scope, test/conftest.py lists this module in ``pytest_plugins``) is one such
root shared read-only by every test that needs a policy's or a replay's training root of two arms; a test that
changes it works on a copy (``copy_root``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

ARMS = ("left", "right")
W, H = 64, 48
CAMERA = "cam_front"
TASK = "hand the cube over"


def bimanual_root(where: Path, seconds: float = 2.0) -> Path:
    """A two-arm LeRobot root (one episode of ``seconds - 0.4`` s, one camera) under ``where``; returns the root."""
    # imported here: every test session loads this plugin, few tests convert a bag
    from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
    from piper_recorder.cli.bag2dataset import main as bag2dataset

    where.mkdir(parents=True, exist_ok=True)
    cfg = where / "recorders.yaml"
    params = {"arms": list(ARMS), "camera_width": W, "camera_height": H, "task": TASK, "cameras": [CAMERA]}
    cfg.write_text(yaml.safe_dump({"lerobot_recorder": {"ros__parameters": params}}))
    scenario = SynthScenario(duration_s=seconds, cameras=(CAMERA,), width=W, height=H, arms=ARMS, depth=False)
    bag = write_bag(where / "bag", scenario_messages(scenario))
    root = where / "lerobot"
    args = [str(bag), "--format", "lerobot", "--out", str(root), "--config", str(cfg)]
    code = bag2dataset([*args, "--episode", f"0.2:{seconds - 0.2}", "--no-progress"])
    assert code == 0, f"piper-bag2dataset exited {code}"
    return root


def copy_root(root: Path, to: Path) -> Path:
    """A copy of ``root`` at ``to`` for a test that edits it."""
    shutil.copytree(root, to)
    return to


@pytest.fixture(scope="session")
def bimanual_training_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One two-arm root for the session (read-only: copy it to change it)."""
    return bimanual_root(tmp_path_factory.mktemp("bimanual"))

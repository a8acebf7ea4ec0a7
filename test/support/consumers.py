"""Running the real consumers (LeRobot releases in their own venvs, built through make on first use) on
what we write: the venvs' pythons, a hermetic environment, and the JSON report a consumer script prints.

``PIPER_CONSUMERS=skip`` skips the consumer checks visibly for a local run; it is refused when CI is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from support.paths import ROOT

BIN = ROOT / ".venv" / "bin"
SCRIPTS = ROOT / "test" / "consumers"  # the scripts that run inside the consumer venvs


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def tail(text: str, n: int = 30) -> str:
    """The last ``n`` lines (where a traceback ends), at most 4,000 characters."""
    return "\n".join(text.splitlines()[-n:])[-4000:]


def timed(label: str, t0: float) -> None:
    print(f"[consumers] {label}: {time.monotonic() - t0:.1f}s")


_venvs: dict[str, Path | str] = {}


def consumer_python(name: str) -> Path:
    """The consumer venv's python, built through make when absent or out of date (never a silent pass)."""
    if os.environ.get("PIPER_CONSUMERS") == "skip":
        if in_ci():
            pytest.fail("PIPER_CONSUMERS=skip is refused in CI: the consumer checks must run")
        pytest.skip(f"PIPER_CONSUMERS=skip: the {name} consumer checks did NOT run")
    if name not in _venvs:
        t0 = time.monotonic()
        stamp = f".venv-{name}/.bootstrapped"
        p = subprocess.run(["make", stamp], cwd=ROOT, capture_output=True, text=True)
        timed(f"make {stamp}", t0)
        _venvs[name] = (
            (ROOT / f".venv-{name}" / "bin" / "python")
            if p.returncode == 0
            else f"`make {stamp}` failed ({p.returncode}):\n{tail(p.stdout + p.stderr)}"
        )
    got = _venvs[name]
    if isinstance(got, str):
        pytest.fail(got)
    return got


def consumer_env(hf_home: Path) -> dict[str, str]:
    """Offline, hermetic caches; nothing of the project's venv leaks into the consumer's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf_home), WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    return env


def run_json(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a consumer script; its report is the last line of its output that is a JSON object ({} if none)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p, (json.loads(lines[-1]) if lines else {})


TRAIN_STEPS = 4  # lerobot-train steps: the loss is finite and a checkpoint is saved
# reference-facts §6: a small ACT that runs offline on CPU; everything else stays at lerobot-train's defaults
ACT_FLAGS = [
    "--policy.type=act",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null",
    "--policy.dim_model=64",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=10",
    "--policy.use_vae=false",
    "--batch_size=2",
    "--num_workers=0",
    "--wandb.enable=false",
]

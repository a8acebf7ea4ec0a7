"""Running the real consumers (LeRobot releases in their own venvs, built through make on first use) on
what we write: the venvs' pythons, a hermetic environment, the JSON report a consumer script prints, and the
roots they read (recorded by ``piper-demo`` through the simulated graph, made once per session on first use).

``PIPER_CONSUMERS=skip`` skips the consumer checks visibly for a local run; it is refused when CI is set.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable
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
    """Offline, hermetic caches; nothing of the project's venv leaks into the consumer's interpreter, and its
    temporary files (a policy config per checkpoint load, torch's compile cache) stay beside its cache, not in /tmp.
    """
    tmp = hf_home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf_home), WANDB_MODE="disabled", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    return env


def run_json(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a consumer script; its report is the last line of its output that is a JSON object ({} if none)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p, (json.loads(lines[-1]) if lines else {})


# The recorded roots' camera size: what the consumers check (the format, every frame's time and pairing,
# training) does not depend on it; a quarter of the pixels decodes and trains in a fraction of the time.
# The graph's own tests record at 640x480.
SIZE = "320x240"
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


# lerobot-train's flag that turns off evaluation in a simulator: `eval_freq` up to 0.4.x, `env_eval_freq` in 0.6.1
# (lerobot/configs/train.py:113 of its wheel; draccus refuses the old name)
EVAL_OFF = {"lerobot06": "--env_eval_freq=0"}


def train_act(consumer: str, root: Path, out: Path, env: dict[str, str]) -> Path:
    """``lerobot-train`` of the ``consumer`` venv: ACT (``ACT_FLAGS``, else its defaults) for ``TRAIN_STEPS`` steps
    on ``root``; asserts it exits 0 with a finite loss at every logged step, and returns the saved checkpoint.
    """
    py = consumer_python(consumer)
    t0 = time.monotonic()
    p = subprocess.run(
        [
            str(py.parent / "lerobot-train"),
            "--dataset.repo_id=local/piper",
            f"--dataset.root={root}",
            *ACT_FLAGS,
            f"--steps={TRAIN_STEPS}",
            f"--save_freq={TRAIN_STEPS}",
            "--log_freq=1",
            EVAL_OFF.get(consumer, "--eval_freq=0"),
            f"--output_dir={out}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    timed(f"{consumer} lerobot-train {TRAIN_STEPS} steps on {root}", t0)
    log = p.stdout + p.stderr
    assert p.returncode == 0, f"lerobot-train on {root} failed ({p.returncode}):\n{tail(log)}"
    losses = [float(v) for v in re.findall(r"\bloss:\s*([-+0-9.eE]+|nan|inf)", log)]
    assert len(losses) >= TRAIN_STEPS - 1 and all(math.isfinite(v) for v in losses), tail(log)
    ckpt = out / "checkpoints" / "last" / "pretrained_model"
    assert (ckpt / "model.safetensors").is_file(), sorted(str(x.relative_to(out)) for x in out.rglob("*"))
    return ckpt


class DemoRoots:
    """Dataset roots made once per session on first use (``makers``: each version's maker); a failure is
    remembered and reported by every test that needs that root. ``what`` names them in the timing lines.
    """

    def __init__(self, makers: dict[str, Callable[[], Path]], what: str = ""):
        self.makers = makers
        self.what = what
        self._made: dict[str, Path | str] = {}

    def get(self, version: str) -> Path:
        if version not in self._made:
            t0 = time.monotonic()
            try:
                self._made[version] = self.makers[version]()
            except AssertionError as e:
                self._made[version] = str(e)
            timed(f"make the {self.what}{version} root", t0)
        got = self._made[version]
        if isinstance(got, str):
            pytest.fail(got)
        return got


def record_demo(out: Path, episodes: int, seconds: float, size: str, *args: str) -> Path:
    """A LeRobot root of ``episodes`` recorded by ``piper-demo`` (``args``: more of its arguments) and validated.

    piper-demo's exit status also gates on lerobot-doctor's data-quality warnings, which short sim episodes raise
    (frozen gripper, one quaternion outlier); the format is checked by piper-validate.
    """
    cmd = [str(BIN / "piper-demo"), "--out", str(out), "--episodes", str(episodes), "--seconds", str(seconds)]
    p = subprocess.run([*cmd, "--size", size, *args], capture_output=True, text=True, timeout=600)
    root = out / "lerobot"
    episodes_file = root / "meta" / "episodes.jsonl"
    assert episodes_file.is_file(), f"piper-demo {' '.join(args)} wrote no LeRobot root ({p.returncode}):\n" + tail(
        p.stdout + p.stderr
    )
    saved = [ln for ln in episodes_file.read_text().splitlines() if ln.strip()]
    assert len(saved) == episodes, (
        f"piper-demo {' '.join(args)} saved {len(saved)} of {episodes} episodes ({p.returncode}):\n"
        f"{tail(p.stdout)}\n--- stderr (head)\n{p.stderr[:4000]}"
    )
    v = subprocess.run([str(BIN / "piper-validate"), str(root)], capture_output=True, text=True, timeout=600)
    assert v.returncode == 0, f"piper-validate {root} failed:\n{tail(v.stdout + v.stderr)}"
    return root


def export_v30(src: Path, out: Path) -> Path:
    """``src`` exported to v3.0 by ``piper-export`` (what LeRobot 0.4 and later read)."""
    p = subprocess.run(
        [str(BIN / "piper-export"), str(src), "--to", "v3.0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, f"piper-export --to v3.0 failed ({p.returncode}):\n{tail(p.stdout + p.stderr)}"
    return out

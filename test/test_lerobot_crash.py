"""SIGKILL a writer at random instants: the next open repairs the root, the independent validator
passes, and every episode saved before the kill is byte-identical."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import LeRobotWriter

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lerobot_crash_worker import config  # noqa: E402

TRIALS = 24


def saved_files(root: Path) -> dict[str, str]:
    """sha256 of every file owned by a saved episode, plus its episodes.jsonl line."""
    out = {}
    lines = (root / "meta/episodes.jsonl").read_text().splitlines() if (root / "meta/episodes.jsonl").exists() else []
    for line in lines:
        e = json.loads(line)
        i = e["episode_index"]
        out[f"line {i}"] = line
        rels = [f"data/chunk-000/episode_{i:06d}.parquet", f"extras/episode_{i:06d}.quest.jsonl"]
        rels += [f"videos/chunk-000/observation.images.{c}/episode_{i:06d}.mp4" for c in ("cam_front", "cam_wrist")]
        for rel in rels:
            out[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    return out


def test_sigkill_at_random_instants(tmp_path):
    root = tmp_path / "ds"
    rng = random.Random(1234)
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    t_start = time.monotonic()
    kills_after_ready = 0
    repairs: list[str] = []
    for trial in range(TRIALS):
        before = saved_files(root)
        p = subprocess.Popen([sys.executable, str(HERE / "lerobot_crash_worker.py"), str(root), str(trial)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            if trial % 5 == 4:  # sometimes during start-up / repair
                time.sleep(rng.uniform(0.0, 0.8))
            else:
                assert p.stdout.readline().strip() == "ready", p.stderr.read()
                kills_after_ready += 1
                if trial % 2:  # aim at a save or delete in progress
                    target = rng.choice(["saving", "deleting"])
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline and p.stdout.readline().strip() != target:
                        pass
                    time.sleep(rng.uniform(0.0, 0.03))
                else:
                    time.sleep(rng.uniform(0.0, 0.5))
        finally:
            p.send_signal(signal.SIGKILL)
            out, err = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL, f"worker exited on its own: {err[-2000:]}"
        w = LeRobotWriter(root, config())  # repairs
        w.close()
        repairs += w.repairs
        assert not (root / ".staging").exists()
        assert not list(root.rglob("*.tmp"))
        problems = validate_root(root, full=trial == TRIALS - 1)
        assert problems == [], (trial, problems, w.repairs)
        after = saved_files(root)
        assert {k: after.get(k) for k in before} == before, f"trial {trial}: saved episode changed"
    assert kills_after_ready >= 15
    print(f"{len(repairs)} repair actions, e.g. {sorted(set(r.split(' ')[0] for r in repairs))}")
    assert sum(r.startswith("removed unsaved episode") for r in repairs) >= 5, repairs
    assert json.loads((root / "meta/info.json").read_text())["total_episodes"] > 10
    assert time.monotonic() - t_start < 120

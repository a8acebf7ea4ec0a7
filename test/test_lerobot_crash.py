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

import pytest

from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer.dataset_writer import LeRobotWriter

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lerobot_crash_worker import config  # noqa: E402

pytestmark = pytest.mark.integration

TRIALS = 24


def saved_files(root: Path) -> dict[str, str]:
    """sha256 of every file owned by a saved episode, plus its episodes.jsonl line."""
    path = root / "meta/episodes.jsonl"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        i = json.loads(line)["episode_index"]
        out[f"line {i}"] = line
        rels = [f"data/chunk-000/episode_{i:06d}.parquet", f"extras/episode_{i:06d}.quest.jsonl"]
        rels += [f"videos/chunk-000/observation.images.{c}/episode_{i:06d}.mp4"
                 for c in ("cam_front", "cam_wrist")]
        for rel in rels:
            out[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    return out


class Zygote:
    def __init__(self, root: Path, version: str = "v2.0"):
        env = dict(os.environ, PYTHONPATH=str(HERE.parent), OPENBLAS_NUM_THREADS="1",
                   PIPER_TEST_LEROBOT_VERSION=version)
        self.p = subprocess.Popen([sys.executable, str(HERE / "lerobot_crash_worker.py"), str(root)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                  env=env)

    def send(self, cmd: str) -> None:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def until(self, prefix: str) -> str:
        while True:
            line = self.p.stdout.readline()
            assert line, "crash worker died"
            if line.startswith(prefix):
                return line.strip()

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_sigkill_at_random_instants(tmp_path, version):
    root = tmp_path / "ds"
    rng = random.Random(1234)
    t_start = time.monotonic()
    repairs: list[str] = []
    z = Zygote(root, version)
    try:
        for trial in range(TRIALS):
            before = saved_files(root)
            z.send(f"run {trial}")
            pid = int(z.until("pid ").split()[1])
            mode = trial % 3
            if mode == 0:  # anywhere, start-up and repair included
                time.sleep(rng.uniform(0.0, 0.6))
            elif mode == 1:  # aim at a save or delete in progress
                z.until(rng.choice(["saving", "deleting"]))
                time.sleep(rng.uniform(0.0, 0.03))
            else:
                z.until("ready")
                time.sleep(rng.uniform(0.0, 0.4))
            os.kill(pid, signal.SIGKILL)
            z.send("reap")
            assert z.until("exit ") == f"exit {-signal.SIGKILL}", "writer died on its own"
            w = LeRobotWriter(root, config(version))  # repairs
            w.close()
            repairs += w.repairs
            assert not (root / ".staging").exists()
            assert not list(root.rglob("*.tmp"))
            problems = validate_root(root, full=trial == TRIALS - 1)
            assert problems == [], (trial, problems, w.repairs)
            after = saved_files(root)
            assert {k: after.get(k) for k in before} == before, f"trial {trial}: saved episode changed"
    finally:
        z.close()
    print(f"{time.monotonic() - t_start:.1f} s, {len(repairs)} repair actions: "
          f"{sorted(set(' '.join(r.split()[:2]) for r in repairs))}")
    assert sum(r.startswith("removed unsaved episode") for r in repairs) >= 5, repairs
    assert json.loads((root / "meta/info.json").read_text())["total_episodes"] > 10

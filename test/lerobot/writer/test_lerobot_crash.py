"""SIGKILL a writer at random instants: the next open repairs the root, the independent validator
passes, and every episode saved before the kill is byte-identical.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import LeRobotWriter

from support.lerobot_crash_worker import config
from support.paths import ROOT, SUPPORT_DIR

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
        rels += [f"videos/chunk-000/observation.images.{c}/episode_{i:06d}.mp4" for c in ("cam_front", "cam_wrist")]
        for rel in rels:
            out[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    return out


WAIT_S = 60.0  # any one wait on the worker: far beyond a trial on a loaded machine, far below the test's timeout


def _exited(pid: int) -> bool:
    """``pid`` is a zombie or gone (a child of the worker: dead until the worker reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _proc_report(pid: int) -> str:
    """Kernel state, wait channel and threads of ``pid``, then its stacks (py-spy, when installed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        wchan = Path(f"/proc/{pid}/wchan").read_text() or "-"
        threads = [Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return f"pid {pid}: gone"
    out = f"pid {pid}: state {stat[0]}, wchan {wchan}, threads {threads}"
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if os.access(spy, os.X_OK):
        try:
            r = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            out += "\n" + (r.stdout or r.stderr)
        except subprocess.TimeoutExpired:
            out += "\n(py-spy dump timed out)"
    return out


class Zygote:
    """The crash worker as a child process in a session of its own (closing kills it and any writer it
    forked). A thread drains its stdout into a queue, so a writer never blocks on a full pipe and every
    wait has a bound: on timeout the failure says what was awaited, what the writer printed last, the
    kernel state of both processes and their stacks (py-spy if installed; always the worker's
    faulthandler dump on SIGUSR1, from its stderr).
    """

    def __init__(self, root: Path, version: str, log_dir: Path):
        env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1", PIPER_TEST_LEROBOT_VERSION=version)
        self.stderr_path = log_dir / "crash_worker.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.p = subprocess.Popen(
            [sys.executable, str(SUPPORT_DIR / "lerobot_crash_worker.py"), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.child: int | None = None
        self.seen: list[str] = []  # the lines of the current trial

    def _drain(self) -> None:
        for line in self.p.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def run(self, trial: int) -> int:
        self.seen, self.child = [], None
        self.send(f"run {trial}")
        self.child = int(self.until("pid ", "the forked writer's first line").split()[1])
        return self.child

    def send(self, cmd: str) -> None:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def until(self, prefix: str, what: str, timeout: float = WAIT_S, writer_lives: bool = True) -> str:
        """The next line starting with ``prefix``. Fails after ``timeout``, or at once when the writer exited
        (``writer_lives``: the line is the writer's to print) or the worker did.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                line = self._wait_failed(prefix, what, timeout, deadline, writer_lives)
                if line == "":
                    continue
            if line is None:
                raise AssertionError(
                    self.diagnose(f"crash worker exited (code {self.p.wait()}) while waiting for {prefix!r} ({what})")
                )
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def _wait_failed(self, prefix: str, what: str, timeout: float, deadline: float, writer_lives: bool) -> str | None:
        """No line for a while: raise if the wait is lost, else return "" (wait on) or a late line."""
        if writer_lives and self.child is not None and _exited(self.child):
            with contextlib.suppress(queue.Empty):  # what it printed last may still be in the pipe
                return self._lines.get(timeout=2.0)
            raise AssertionError(self.diagnose(f"the writer exited while waiting for {prefix!r} ({what})"))
        if time.monotonic() >= deadline:
            raise AssertionError(self.diagnose(f"no {prefix!r} line ({what}) within {timeout:.0f} s"))
        return ""

    def diagnose(self, problem: str) -> str:
        pids = [self.p.pid] + ([self.child] if self.child else [])
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)  # faulthandler: every thread's Python stack to stderr
        time.sleep(1.0)
        reports = "\n".join(_proc_report(pid) for pid in pids)
        self._stderr.flush()
        return (
            f"{problem}; this trial's lines: {self.seen[-10:]}\nzygote {self.p.pid}, writer {self.child}\n"
            f"{reports}\n--- worker stderr (tail)\n{self.stderr_path.read_text()[-6000:]}"
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.p.stdin.close()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGKILL)  # the zygote and any writer still alive
        self.p.wait(timeout=10)
        self._stderr.close()


def kept_saves(lines: list[str]) -> int:
    """Episodes this trial certainly left saved: each ``saved`` line not followed by ``deleting`` (the
    worker prints ``deleting`` before it deletes, so a kill before that line deletes nothing).
    """
    return sum(
        line.startswith("saved") and (i + 1 == len(lines) or lines[i + 1] != "deleting") for i, line in enumerate(lines)
    )


def total_episodes(root: Path) -> int:
    path = root / "meta/info.json"
    return json.loads(path.read_text())["total_episodes"] if path.exists() else 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_sigkill_at_random_instants(tmp_path, version):
    root = tmp_path / "ds"
    rng = random.Random(1234)
    t_start = time.monotonic()
    repairs: list[str] = []
    kept = 0
    z = Zygote(root, version, tmp_path)
    try:
        for trial in range(TRIALS):
            before, episodes_before = saved_files(root), total_episodes(root)
            pid = z.run(trial)
            mode = trial % 3
            if mode == 0:  # anywhere, start-up and repair included
                time.sleep(rng.uniform(0.0, 0.6))
            elif mode == 1:  # aim at a save or delete in progress
                z.until(rng.choice(["saving", "deleting"]), "a save or delete starting")
                time.sleep(rng.uniform(0.0, 0.03))
            else:  # steady recording: after an episode that stays saved, whatever the machine's speed
                while True:
                    z.until("saved", "an episode saved")
                    if z.until("", "the line after a save") == "saving":
                        break
                time.sleep(rng.uniform(0.0, 0.4))
            os.kill(pid, signal.SIGKILL)
            z.send("reap")
            assert (
                z.until("exit ", "the worker reaping the killed writer", timeout=30, writer_lives=False)
                == f"exit {-signal.SIGKILL}"
            ), "writer died on its own"
            w = LeRobotWriter(root, config(version))  # repairs
            w.close()
            repairs += w.repairs
            assert not (root / ".staging").exists()
            assert not list(root.rglob("*.tmp"))
            problems = validate_root(root, full=trial == TRIALS - 1)
            assert problems == [], (trial, problems, w.repairs)
            after = saved_files(root)
            assert {k: after.get(k) for k in before} == before, f"trial {trial}: saved episode changed"
            kept += kept_saves(z.seen)
            assert total_episodes(root) >= episodes_before + kept_saves(z.seen), (trial, z.seen)
    finally:
        z.close()
    print(
        f"{time.monotonic() - t_start:.1f} s, {len(repairs)} repair actions: "
        f"{sorted({' '.join(r.split()[:2]) for r in repairs})}, {kept} episodes kept"
    )
    assert sum(r.startswith("removed unsaved episode") for r in repairs) >= 5, repairs
    assert kept >= TRIALS // 3  # one per steady-recording trial at least

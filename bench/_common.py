"""What the benches that time a console script in a child process share: the load figure printed next
to every result (the machine is shared), the timed child run (wall time incl. start-up; CPU and peak
RSS of the child tree from ``os.wait4``), the common options and the clean-up of the work dir.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


def load() -> str:
    """The 1/5/15-minute load averages, e.g. "1.9/2.3/2.0"."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def machine_line() -> str:
    return f"machine: {os.cpu_count()} CPUs, load average {load()} (1/5/15 min; shared with other work)"


def tool(name: str) -> str:
    """A console script of this venv."""
    return str(Path(sys.executable).parent / name)


@dataclass
class Child:
    wall: float  # s, the whole command incl. interpreter start-up
    cpu: float  # s, user + sys of the child tree
    rss_mb: float  # peak RSS of the child tree
    load: str  # load averages before -> after
    out: str  # stdout + stderr


def run_child(cmd: list[str], env: Mapping[str, str] | None = None) -> Child:
    """Run ``cmd`` to completion and time it; a failure ends the bench with its output."""
    before = load()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    text = p.stdout.read() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {rc}):\n{text}")
    return Child(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, f"{before} -> {load()}", text)


def parser(doc: str | None, quick: str, default_dir: str, keep: str) -> argparse.ArgumentParser:
    """The options every such bench has: --quick (``quick`` says what it shrinks to), --dir, --keep."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--dir", default=default_dir, help="work dir (inputs are reused when kept)")
    ap.add_argument("--keep", action="store_true", help=keep)
    return ap


def clean_up(d: Path, outputs: Iterable[str], keep: bool) -> None:
    """Remove the outputs below ``d``, and ``d`` itself unless --keep."""
    for name in outputs:
        shutil.rmtree(d / name, ignore_errors=True)
    if not keep:
        shutil.rmtree(d, ignore_errors=True)

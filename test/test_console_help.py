"""Every console script (setup.py: the tools, the nodes and the nodes' ROS executable names) given
``--help`` prints its usage and exits 0 within a bounded time, starting nothing (issue #21 item 13: a
node used to hand ``--help`` to rcl, which ignored it, and start: the dashboard served forever, the
recorders created their roots in the working directory).

Each runs from its own empty directory in a leased ROS domain (on loopback): it must leave the
directory empty and print no ROS log line (a node that started logs its start-up)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(600)


def _scripts() -> list[str]:
    """Every key of setup.py's CONSOLE_SCRIPTS and ROS_EXECUTABLES (read without running setup())."""
    names: list[str] = []
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and \
                any(isinstance(t, ast.Name) and t.id in ("CONSOLE_SCRIPTS", "ROS_EXECUTABLES") for t in node.targets):
            names += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return names


SCRIPTS = _scripts()


def test_scripts_found():
    assert len(SCRIPTS) >= 30 and "piper-dashboard" in SCRIPTS and "dashboard" in SCRIPTS


def test_every_console_script_prints_usage_on_help(tmp_path, ros_domain):
    env = {**os.environ, **ros_domain.env(), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}

    def run(name: str) -> tuple[str, int | None, str, str, list[str]]:
        cwd = tmp_path / name
        cwd.mkdir()
        try:
            p = subprocess.run([str(BIN / name), "--help"], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:   # a node that started: it spins until killed
            rc, out, err = None, str(e.stdout or ""), str(e.stderr or "")
        return name, rc, out, err, sorted(x.name for x in cwd.iterdir())

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, SCRIPTS))
    bad = []
    for name, rc, out, err, left in results:
        ros_log = [ln for ln in (out + err).splitlines() if ln.startswith(("[INFO]", "[WARN]", "[ERROR]"))]
        if rc != 0 or not out.lower().startswith("usage:") or left or ros_log or "Traceback" in err:
            bad.append((name, rc, out[:120], err[-300:], left, ros_log[:2]))
    assert not bad, bad

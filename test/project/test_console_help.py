"""Every console script (setup.py: the tools, the nodes and the nodes' ROS executable names) given
``--help`` prints its usage and exits 0 within a bounded time, starting nothing (issue #21 item 13: a
node used to hand ``--help`` to rcl, which ignored it, and start: the dashboard served forever, the
recorders created their roots in the working directory). Given bad arguments, bad ``--ros-args`` or a
path of the wrong kind, each names the problem in one line and exits 2, never with a traceback.

Each runs from its own empty directory in a leased ROS domain (on loopback): it must leave the
directory empty and print no ROS log line (a node that started logs its start-up).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from piper_recorder.graph.executables import NODE_EXECUTABLES, TOOL_SCRIPTS, console_scripts

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(600)


SCRIPTS = list(console_scripts())  # every console script and, again, each node under its ROS executable name
CONSOLE = {script for script, _ in NODE_EXECUTABLES.values()} | set(TOOL_SCRIPTS)  # the console scripts proper


def test_scripts_found():
    assert len(SCRIPTS) >= 30 and "piper-dashboard" in SCRIPTS and "dashboard" in SCRIPTS


def test_every_console_script_prints_usage_on_help(tmp_path, ros_domain):
    env = {**os.environ, **ros_domain.env(), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}

    def run(name: str) -> tuple[str, int | None, str, str, list[str]]:
        cwd = tmp_path / name
        cwd.mkdir()
        try:
            p = subprocess.run(
                [str(BIN / name), "--help"],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:  # a node that started: it spins until killed
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


# nodes (run_node): what rcl cannot parse, a params file that is not one, an argument outside --ros-args
NODES = [
    "piper-quest-bridge",
    "piper-teleop",
    "piper-arm",
    "piper-sim-camera",
    "piper-sim-cameras",
    "piper-lerobot-recorder",
    "piper-rgbd-recorder",
    "piper-replay",
    "piper-policy",
    "piper-dashboard",
    "piper-quest-video",
]
NODE_CASES = [
    ["--ros-args", "--params-file", "{missing}"],
    ["--ros-args", "--params-file", "{dir}"],
    ["--ros-args", "-p", "rate"],
    ["--ros-args", "-r", "nope"],
    ["--ros-args", "--log-level", "loud"],
    ["--bogus"],
]
# ... and the nodes whose parameter names a path (one of the wrong kind ends them at start), or the nodes
# to run (none, or not a node name)
NODE_PATH_CASES = {
    "piper-sim-cameras": [["--ros-args", "-p", "cameras:=[cam-a]"], ["--ros-args", "-p", "cameras:=[cam_a, cam_a]"]],
    "piper-replay": [
        ["--ros-args", "-p", "root:={missing}"],
        ["--ros-args", "-p", "root:={file}"],
        ["--ros-args", "-p", "episode:=0"],
    ],
    "piper-policy": [["--ros-args", "-p", "policy:=hold", "-p", "root:={missing}"]],
}
# the tools: an unknown option, and each path option given a path of the wrong kind
TOOL_CASES: dict[str, list[list[str]]] = {
    "piper-demo": [["--out", "{file}"], ["--out", "{file}/sub"], ["--out", "{dir}", "--bogus"]],
    "piper-launch": [
        ["sim", "--log-dir", "{file}"],
        ["sim", "--config", "{dir}"],
        ["sim", "--config", "{missing}"],
        ["moon"],
    ],
    "piper-validate": [["{file}"], ["{missing}"], ["{dir}", "--bogus"]],
    "piper-finalize": [["--root", "{file}"], ["--root", "{missing}"]],
    "piper-repair": [["{file}"], ["{missing}"]],
    "piper-bag2dataset": [
        ["{dir}", "--format", "lerobot", "--out", "{file}", "--config", "sim"],
        ["{dir}", "--format", "rgbd", "--out", "{dir}/x.hdf5", "--config", "{dir}"],
    ],
    "piper-view": [["{file}", "--out", "{dir}/r.html"], ["{missing}"]],
    "piper-export": [["{file}", "--to", "v3.0", "--out", "{dir}/out"], ["{dir}", "--to", "v9"]],
    "piper-recover": [["{file}", "--config", "sim"], ["{dir}", "--config", "{dir}"]],
    "piper-dataset": [
        ["delete", "{file}", "--episodes", "0"],
        ["label", "{missing}", "--episodes", "0", "--outcome", "success"],
        ["shuffle", "{dir}"],
    ],
    "piper-quest-web": [
        ["--report", "{dir}"],
        ["--report", "{file}/r.json"],
        ["--cert", "{dir}", "--key", "{dir}"],
        ["--port", "x"],
    ],
    "piper-sim-quest": [["--report", "{dir}"], ["--replay", "{dir}"], ["--rate", "fast"]],
    "piper-policy-server": [["--checkpoint", "{file}"], ["--checkpoint", "{missing}"]],
}


def test_scripts_with_bad_input_name_the_problem_in_one_line_and_exit_2(tmp_path, ros_domain):
    """Every console script: bad arguments, bad ``--ros-args``, a path of the wrong kind. Exit 2, no
    traceback, the last line names the program (argparse's usage may come before it); a node prints
    that one line only (no rcl log line), and none starts (a started node runs until the timeout).
    """
    assert set(NODES) | set(TOOL_CASES) == CONSOLE
    env = {**os.environ, **ros_domain.env(), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    (tmp_path / "a_file").write_text("not what anyone wants\n")
    (tmp_path / "a_dir").mkdir()
    paths = {"file": str(tmp_path / "a_file"), "dir": str(tmp_path / "a_dir"), "missing": str(tmp_path / "missing")}
    # (executable, arguments, whether it is a node, the name its message starts with)
    cases = [(name, args, True, name) for name in NODES for args in NODE_CASES]
    cases += [(name, args, True, name) for name, many in NODE_PATH_CASES.items() for args in many]
    cases += [(name, args, False, name) for name, many in TOOL_CASES.items() for args in many]
    for exe, (script, _) in NODE_EXECUTABLES.items():  # the same entry points under their ROS names
        node = script in NODES
        cases.append((exe, NODE_CASES[2] if node else TOOL_CASES[script][0], node, exe if node else script))

    def run(case: tuple[str, list[str], bool, str]) -> tuple[str, list[str], bool, str, int | None, str]:
        name, args, node, prog = case
        argv = [a.format(**paths) for a in args]
        try:
            p = subprocess.run(
                [str(BIN / name), *argv],
                cwd=tmp_path / "a_dir",
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            return name, argv, node, prog, p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            return name, argv, node, prog, None, str(e.stdout or "") + str(e.stderr or "")

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, cases))
    bad = []
    for name, argv, node, prog, rc, out in results:
        lines = [ln for ln in out.splitlines() if ln.strip()]
        one_line = len(lines) == 1 if node else bool(lines)
        if rc != 2 or "Traceback" in out or not one_line or not lines[-1].startswith(prog):
            bad.append((name, argv, rc, out[-400:]))
    assert not bad, "\n".join(map(repr, bad))
    assert sorted(x.name for x in (tmp_path / "a_dir").iterdir()) == []  # nothing created

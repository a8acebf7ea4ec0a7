"""`colcon build` of the package in a workspace of its own gives what `ros2 launch` and `ros2 run` need, and a
node starts from the install: the robot's route (docs/install.md), with colcon from PyPI in this venv.

The package is copied into ``src/`` (colcon writes its egg-info beside setup.py: never into this tree). Both a
plain and a ``--symlink-install`` build lay out share/ and lib/ alike (setup.cfg's script_dir and
install_scripts put the executables in lib/piper_recorder); the plain one, which the install guide uses, also
starts teleop from ``lib/piper_recorder/teleop`` with the install's setup.bash sourced. ~5 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piper_recorder.graph.executables import console_scripts

from support.paths import ROOT
from support.proc import Proc

pytestmark = pytest.mark.integration
pytest.importorskip("colcon_core")

PACKAGE = "piper_recorder"
SOURCES = ("package.xml", "setup.py", "setup.cfg", "resource", "launch", "config", "piper_recorder", "rgbd_writer")


def _executables() -> set[str]:
    """Every console script and ROS executable setup.py installs (graph.executables, which setup.py reads)."""
    out = set(console_scripts())
    assert {"teleop", "piper_arm", "lerobot_recorder", "rgbd_recorder", "piper-demo"} <= out
    return out


_built: dict[str, Path] = {}


def _install(mode: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The install/ of a workspace holding a copy of the package, built once per mode in this session."""
    if mode in _built:
        return _built[mode]
    ws = tmp_path_factory.mktemp(f"colcon-{mode}")
    src = ws / "src" / PACKAGE
    src.mkdir(parents=True)
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(p, src / name)
    env = {**os.environ, "COLCON_HOME": str(ws / ".colcon"), "COLCON_LOG_PATH": str(ws / "log")}
    args = ["--symlink-install"] if mode == "symlink" else []
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "colcon", "build", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"colcon build {' '.join(args)}: {time.monotonic() - t0:.1f} s")
    _built[mode] = ws / "install"
    return _built[mode]


@pytest.mark.parametrize("mode", ["plain", "symlink"])
def test_the_install_has_what_ros2_launch_and_ros2_run_need(mode, tmp_path_factory):
    prefix = _install(mode, tmp_path_factory) / PACKAGE
    share = prefix / "share" / PACKAGE
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE).is_file()
    assert (share / "package.xml").read_text() == (ROOT / "package.xml").read_text()
    assert sorted(p.name for p in (share / "launch").iterdir()) == sorted(
        p.name for p in ROOT.glob("launch/*.launch.py")
    )
    configs = [*ROOT.glob("config/*.yaml"), *ROOT.glob("config/*.xml")]
    assert sorted(p.name for p in (share / "config").iterdir()) == sorted(p.name for p in configs)
    lib = prefix / "lib" / PACKAGE
    missing = sorted(e for e in _executables() if not os.access(lib / e, os.X_OK))
    assert missing == [], f"not executable in lib/{PACKAGE}/ (ros2 run looks there)"
    # the interpreter that ran colcon runs the nodes: this venv's, with its packages
    assert (lib / "teleop").read_text().splitlines()[0] == f"#!{sys.executable}"


def _sourced(install: Path, *cmd: str) -> list[str]:
    return ["bash", "-c", 'source "$0/setup.bash" && exec "$@"', str(install), *cmd]


def test_a_node_starts_from_the_install(ros_domain, tmp_path, tmp_path_factory):
    install = _install("plain", tmp_path_factory)
    env = ros_domain.env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the bytecode it writes shows where it imported from
    env.pop("PYTHONPATH", None)
    # ros2 launch finds the launch files through the ament index the install's setup adds
    share = subprocess.run(
        _sourced(
            install,
            sys.executable,
            "-c",
            "from ament_index_python.packages import get_package_share_directory as g; print(g('piper_recorder'))",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert Path(share) == install / PACKAGE / "share" / PACKAGE
    teleop = install / PACKAGE / "lib" / PACKAGE / "teleop"
    p = Proc(_sourced(install, str(teleop), "--ros-args", "-r", "__node:=teleop"), env, tmp_path, "teleop")
    try:
        deadline = time.monotonic() + 30
        while "teleop: input=" not in p.output() and p.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "teleop: input=" in p.output(), p.output()
    finally:
        rc = p.stop()
    assert rc == 0, p.output()
    site = next((install / PACKAGE / "lib").glob("python3*/site-packages"))
    assert list(site.glob("piper_recorder/nodes/__pycache__/teleop.*.pyc")), "teleop was not imported from the install"

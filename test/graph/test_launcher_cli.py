"""piper-launch as a real process: the simulated graph comes up from config/sim.yaml (every node in
the ROS graph), and Ctrl-C stops every process cleanly (exit 0, recorders first).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]


def test_piper_launch_sim_up_and_clean_shutdown(tmp_path):
    logs = tmp_path / "logs"
    cmd = [
        str(Path(sys.executable).parent / "piper-launch"),
        "sim",
        "--quiet",
        "--log-dir",
        str(logs),
        "--cameras",
        "cam_front",
        "--root",
        str(tmp_path / "lerobot"),
        "--rgbd-path",
        str(tmp_path / "r.hdf5"),
        "--set",
        "piper_launch.sim_quest.port=0",
        "--set",
        "cam_front.width=160",
        "--set",
        "cam_front.height=120",
        "--set",
        "lerobot_recorder.camera_width=160",
        "--set",
        "lerobot_recorder.camera_height=120",
        "--set",
        "rgbd_recorder.camera_width=160",
        "--set",
        "rgbd_recorder.camera_height=120",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("piper-launch: ready:") or time.monotonic() > deadline:
                break
        assert any(line.startswith("piper-launch: ready:") for line in lines), "".join(lines)
        ready = next(line for line in lines if line.startswith("piper-launch: ready:"))
        for node in ("piper_arm", "quest_bridge", "teleop", "cam_front", "lerobot_recorder", "rgbd_recorder"):
            assert node in ready
        time.sleep(2.0)
        assert proc.poll() is None, "".join(lines)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert "piper-launch: stopped; exit codes" in out
    sets = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"]
    plan = plan_graph("sim", config_path("sim"), sets, tmp_path / "plan", cameras="cam_front")
    assert {f"{p.name}.log" for p in plan.processes} <= {f.name for f in logs.iterdir()}  # a log per process
    assert "[cam_front]: published" in (logs / "sim_cameras.log").read_text()  # the camera's clean-exit summary
    params = (logs / "params.yaml").read_text()
    assert str(tmp_path / "lerobot") in params and "width: 160" in params


def test_piper_launch_sim_refuses_a_set_it_would_overwrite(tmp_path):
    """--set quest_bridge.port=... would be replaced by the simulated headset's port: refused in one line, and
    the temp log dir made for the graph that never started is gone.
    """
    res = subprocess.run(
        [str(Path(sys.executable).parent / "piper-launch"), "sim", "--quiet", "--set", "quest_bridge.port=9911"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--set quest_bridge.port=9911 conflicts with the simulated headset's port" in res.stderr
    assert "--no-sim-headset" in res.stderr
    assert list(tmp_path.glob("piper-launch-*")) == []


def test_piper_launch_sim_with_an_external_headset(tmp_path):
    """--no-sim-headset: no piper-sim-quest; quest_bridge connects to the headset the user names (here
    the simulated headset's server run by the test, standing in for a real Quest on another port).
    """
    from piper_recorder.quest.sim_server import SimConfig, SimQuestServer

    headset = SimQuestServer(SimConfig(port=0, buttons=False, script="idle"))
    port = headset.start()
    logs = tmp_path / "logs"
    cmd = [
        str(Path(sys.executable).parent / "piper-launch"),
        "sim",
        "--quiet",
        "--no-sim-headset",
        "--log-dir",
        str(logs),
        "--cameras",
        "cam_front",
        "--root",
        str(tmp_path / "lerobot"),
        "--rgbd-path",
        str(tmp_path / "r.hdf5"),
        "--set",
        f"quest_bridge.port={port}",
        "--set",
        "piper_launch.headset_video=false",
        "--set",
        "cam_front.width=160",
        "--set",
        "cam_front.height=120",
        "--set",
        "lerobot_recorder.camera_width=160",
        "--set",
        "lerobot_recorder.camera_height=120",
        "--set",
        "rgbd_recorder.camera_width=160",
        "--set",
        "rgbd_recorder.camera_height=120",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("piper-launch: ready:") or time.monotonic() > deadline:
                break
        assert any(line.startswith("piper-launch: ready:") for line in lines), "".join(lines)
        end = time.monotonic() + 20
        while headset.connections < 1 and time.monotonic() < end:
            time.sleep(0.1)
        assert headset.connections >= 1, "".join(lines)  # the bridge found the headset it was given
        assert proc.poll() is None, "".join(lines)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        headset.stop()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert not (logs / "sim_quest.log").exists() and "sim_quest" not in out.split("ready:")[1].splitlines()[0]
    assert f"port: {port}" in (logs / "params.yaml").read_text()

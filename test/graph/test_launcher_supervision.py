"""No node outlives its launcher, however the launcher ends (SIGKILL included), and SIGTERM/SIGHUP do
what Ctrl-C does: the recorders save the episode in flight, then everything exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from piper_recorder.process.supervision import LAUNCHER_PID_ENV

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
BIN = Path(sys.executable).parent


def graph_pids(launcher_pid: int) -> list[int]:
    """Every live process started by that launcher (they carry its pid in their environment)."""
    mark = f"{LAUNCHER_PID_ENV}={launcher_pid}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark in (d / "environ").read_bytes().split(b"\0") and b"Z" not in (d / "stat").read_bytes().split()[2:3]:
                out.append(int(d.name))
        except OSError:
            continue
    return out


GRANDCHILD = """
import threading, time, sys
from pathlib import Path
from piper_recorder.process.supervision import watch_parent
done = threading.Event()
watch_parent(done.set, interval_s=0.05)
print("watching", flush=True)
assert done.wait(30)
Path(sys.argv[1]).write_text(str(time.monotonic()))
"""
CHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
print(g.stdout.readline().strip(), g.pid, flush=True)
time.sleep(60)
"""


def test_watch_parent_ends_a_grandchild_whose_parent_was_sigkilled(tmp_path):
    """ROS-free: the child's watch fires within a poll of its parent's SIGKILL."""
    flag = tmp_path / "gone"
    (tmp_path / "g.py").write_text(GRANDCHILD)
    (tmp_path / "c.py").write_text(CHILD)
    p = subprocess.Popen(
        [sys.executable, str(tmp_path / "c.py"), str(tmp_path / "g.py"), str(flag)], stdout=subprocess.PIPE, text=True
    )
    line = p.stdout.readline().split()
    assert line and line[0] == "watching", line
    p.kill()
    killed = time.monotonic()
    p.wait()
    deadline = killed + 5
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert flag.exists(), "the grandchild did not notice its parent's death"
    assert float(flag.read_text()) - killed < 1.0


def _launch(tmp_path: Path, domain: int) -> tuple[subprocess.Popen, list[str]]:
    cmd = [
        str(BIN / "piper-launch"),
        "sim",
        "--quiet",
        "--log-dir",
        str(tmp_path / "logs"),
        "--domain-id",
        str(domain),
        "--cameras",
        "cam_front",
        "--root",
        str(tmp_path / "lerobot"),
        "--rgbd-path",
        str(tmp_path / "r.hdf5"),
        "--set",
        "piper_launch.sim_quest.port=0",
        "--set",
        "piper_launch.sim_quest.script=continuous",
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
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("piper-launch: ready:") or time.monotonic() > deadline:
            break
    assert any(x.startswith("piper-launch: ready:") for x in lines), "".join(lines)
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # keep draining
    return proc, lines


def _start_episodes(lease) -> None:
    """Start both recorders through their services (a client in this process, the graph's domain)."""
    lease.apply()
    import rclpy
    from std_srvs.srv import Trigger

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("supervision_probe", context=ctx)
    from rclpy.executors import SingleThreadedExecutor

    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    try:
        for rec in ("lerobot_recorder", "rgbd_recorder"):
            client = node.create_client(Trigger, f"/{rec}/start_episode")
            assert client.wait_for_service(timeout_sec=30), rec
            end = time.monotonic() + 60
            while time.monotonic() < end:
                fut = client.call_async(Trigger.Request())
                ex.spin_until_future_complete(fut, timeout_sec=10)
                if fut.done() and fut.result().success:
                    break
                time.sleep(0.5)  # e.g. still waiting for the first arm feedback
            else:
                pytest.fail(f"{rec} did not start an episode")
    finally:
        ex.shutdown()
        node.destroy_node()
        ctx.try_shutdown()


def _episodes(root: Path) -> list[dict]:
    p = root / "meta" / "episodes.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGHUP"])
def test_no_node_outlives_its_launcher_and_the_episode_in_flight_is_saved(tmp_path, ros_domain, how):
    from piper_recorder.lerobot.validate import validate_root
    from rgbd_writer.validate import validate_file

    proc, lines = _launch(tmp_path, ros_domain.domain_id)
    try:
        pids = graph_pids(proc.pid)
        assert len(pids) >= 7, (pids, "".join(lines))  # sim_quest, arm, bridge, teleop, camera, 2 recorders
        _start_episodes(ros_domain)
        time.sleep(3.0)
        os.kill(proc.pid, getattr(signal, how))  # the launcher alone, as a crash or a `kill` would
        sent = time.monotonic()
        deadline = sent + 30
        while graph_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = graph_pids(proc.pid)
        gone_after = time.monotonic() - sent
        assert not left, f"{len(left)} processes of the graph outlived the launcher ({how})\n" + "".join(lines)
        assert gone_after < 20, gone_after
        proc.wait(10)
        if how != "SIGKILL":
            assert proc.returncode == 0, "".join(lines)  # a clean stop, as after Ctrl-C
    finally:
        for pid in graph_pids(proc.pid) + ([proc.pid] if proc.poll() is None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert validate_root(tmp_path / "lerobot") == []
    assert validate_file(str(tmp_path / "r.hdf5")) == []
    eps = _episodes(tmp_path / "lerobot")
    assert len(eps) == 1 and eps[0]["length"] >= 30, eps  # the episode in flight was saved, not lost


HUNG_TEARDOWN = """
import sys, time
from rclpy.node import Node
from piper_recorder.nodes.plumbing.run_node import run_node

class Hangs(Node):
    def __init__(self):
        super().__init__("hangs_in_teardown")
    def on_shutdown(self):
        print("work done", flush=True)
    def destroy_node(self):
        time.sleep(120)   # a middleware teardown that never returns (the race of ros2/rclpy#456)

print("up", flush=True)
sys.exit(run_node(Hangs, [sys.argv[0]]))
"""


def _spinning_script(tmp_path: Path, ros_domain, text: str) -> subprocess.Popen:
    """Run ``text`` as a node's script (it prints "up" before spinning); returned once it has spun 1 s."""
    (tmp_path / "n.py").write_text(text)
    p = subprocess.Popen(
        [sys.executable, str(tmp_path / "n.py")],
        env=ros_domain.env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "up"
        time.sleep(1.0)  # spinning
    except BaseException:
        p.kill()
        raise
    return p


def test_a_node_whose_teardown_hangs_still_exits_after_its_work(tmp_path, ros_domain):
    """run_node bounds the teardown after the node's work (``supervision.TeardownWatchdog``): a node whose
    destroy_node never returns exits 0 within the bound after SIGINT, and its stderr says where it hung.
    """
    from piper_recorder.process.supervision import TEARDOWN_TIMEOUT_S

    p = _spinning_script(tmp_path, ros_domain, HUNG_TEARDOWN)
    try:
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TEARDOWN_TIMEOUT_S + 10)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert "work done" in out
    assert TEARDOWN_TIMEOUT_S - 0.5 < took < TEARDOWN_TIMEOUT_S + 5, took
    assert "hangs_in_teardown: teardown still running" in err and "destroy_node" in err, err


HUNG_WORK = """
import sys, threading
from rclpy.node import Node
from piper_recorder.nodes.plumbing.run_node import run_node

class Hangs(Node):
    def __init__(self):
        super().__init__("hangs_in_its_work")
    def on_shutdown(self):
        print("stopping", flush=True)
        threading.Event().wait()   # the node's own stop never ends

print("up", flush=True)
sys.exit(run_node(Hangs, [sys.argv[0]]))
"""


def test_a_second_stop_signal_while_a_node_is_stuck_stopping_prints_where_it_is(tmp_path, ros_domain):
    """A node whose own stop hangs cannot be bounded (a recorder's save takes what it takes), but a second
    stop signal (a supervisor's SIGTERM after its grace) prints every thread's stack on stderr, so the log says
    where it hung before the SIGKILL.
    """
    p = _spinning_script(tmp_path, ros_domain, HUNG_WORK)
    try:
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline().strip() == "stopping"
        time.sleep(0.5)
        assert p.poll() is None  # stuck in on_shutdown
        p.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        p.kill()
        _, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert "n.py: still stopping; where each thread is:" in err, err
    assert "in on_shutdown" in err and 'File "' in err, err

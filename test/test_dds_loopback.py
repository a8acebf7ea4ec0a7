"""DDS stays on this machine: a node started the way the tests, the launcher and the demo start it
(``rosenv`` environment, config/fastdds_loopback.xml) binds UDP/TCP sockets on 127.0.0.1 only, and
discovery still works across processes (a probe in this process sees it and receives its topic)."""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import time

import pytest

from proc import ProcGroup

from piper_recorder.rosenv import loopback_env

rclpy = pytest.importorskip("rclpy")
pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def bound_addresses(pid: int) -> list[str]:
    """Local addresses of every UDP and TCP socket of ``pid`` (``ss -uanp`` / ``ss -tanp``)."""
    out = []
    for proto in ("-uanp", "-tanp"):
        text = subprocess.run(["ss", "-H", proto], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if f"pid={pid}," in line:
                local = line.split()[3]           # State Recv-Q Send-Q Local:Port Peer:Port Process
                out.append(local.rsplit(":", 1)[0].strip("[]"))
    return out


def test_profile_is_selected_for_fastdds():
    env = loopback_env({"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"})
    assert env["FASTDDS_DEFAULT_PROFILES_FILE"].endswith("config/fastdds_loopback.xml")
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"
    other = loopback_env({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"})   # the profile is Fast DDS only
    assert other["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST" and "FASTDDS_DEFAULT_PROFILES_FILE" not in other


def test_node_sockets_bind_loopback_only_and_discovery_works(ros_domain, tmp_path):
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import String

    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("loopback_probe", context=ctx)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    statuses: list[str] = []
    node.create_subscription(String, "/teleop/status", lambda m: statuses.append(m.data), 10)
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            teleop = procs.start("piper-teleop")
            end = time.monotonic() + 30
            while not statuses and time.monotonic() < end:     # discovered across processes and delivering
                executor.spin_once(timeout_sec=0.1)
            assert statuses, "no /teleop/status from the teleop process: discovery failed"
            addrs = bound_addresses(teleop.popen.pid)
            assert addrs, "the node has no UDP socket at all?"
            outside = [a for a in addrs if not ipaddress.ip_address(a).is_loopback]
            assert not outside, f"sockets bound beyond loopback: {addrs}"
            mine = bound_addresses(os.getpid())   # this process too (in-process rclpy after ros_domain.apply())
            assert mine and all(ipaddress.ip_address(a).is_loopback for a in mine), mine
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=ctx)

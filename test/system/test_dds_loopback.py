"""DDS stays on this machine, on whichever distro this venv runs: a node started the way the tests, the
launcher and the demo start it (``rosenv`` environment, config/fastdds_loopback.xml) binds UDP/TCP sockets
on 127.0.0.1 only, and discovery still works across processes (a probe in this process sees it and
receives its topic); the whole sim graph, run in a network namespace of its own that has a LAN interface
too, binds nothing beyond loopback and joins no multicast group.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piper_recorder.graph.rosenv import DISCOVERY_RANGE, dds_features, loopback_env

from support.proc import ProcGroup

rclpy = pytest.importorskip("rclpy")
pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def bound_addresses(pid: int) -> list[str]:
    """Local addresses of every UDP and TCP socket of ``pid`` (``ss -uanp`` / ``ss -tanp``)."""
    out = []
    for proto in ("-uanp", "-tanp"):
        text = subprocess.run(["ss", "-H", proto], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if f"pid={pid}," in line:
                local = line.split()[3]  # State Recv-Q Send-Q Local:Port Peer:Port Process
                out.append(local.rsplit(":", 1)[0].strip("[]"))
    return out


def test_profile_is_selected_for_fastdds():
    (var,) = dds_features().profile_vars  # this install's Fast DDS reads one of them (test_rosenv)
    env = loopback_env({"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"})
    assert env[var].endswith("config/fastdds_loopback.xml")
    assert env[DISCOVERY_RANGE] == "SYSTEM_DEFAULT"
    other = loopback_env({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"})  # the profile is Fast DDS only
    assert other[DISCOVERY_RANGE] == "LOCALHOST" and var not in other


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
            while not statuses and time.monotonic() < end:  # discovered across processes and delivering
                executor.spin_once(timeout_sec=0.1)
            assert statuses, "no /teleop/status from the teleop process: discovery failed"
            addrs = bound_addresses(teleop.popen.pid)
            assert addrs, "the node has no UDP socket at all?"
            outside = [a for a in addrs if not ipaddress.ip_address(a).is_loopback]
            assert not outside, f"sockets bound beyond loopback: {addrs}"
            mine = bound_addresses(os.getpid())  # this process too (in-process rclpy after ros_domain.apply())
            assert mine and all(ipaddress.ip_address(a).is_loopback for a in mine), mine
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=ctx)


LAN = "10.200.0.1"  # the namespace's LAN interface (a veth pair): what a robot's Ethernet would be
# groups the kernel itself joins on every interface: all-hosts, and IPv6's all-nodes and solicited-node ones
KERNEL_GROUPS_V4 = {"010000E0"}


def _netns_works() -> bool:
    return (
        shutil.which("unshare") is not None
        and shutil.which("nsenter") is not None
        and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    )


def _multicast_groups(pid: int) -> list[str]:
    """Multicast groups joined in ``pid``'s network namespace beyond the kernel's own (/proc/PID/net/igmp, igmp6)."""
    groups = []
    for line in Path(f"/proc/{pid}/net/igmp").read_text().splitlines()[1:]:
        fields = line.split()
        if line.startswith(("\t", " ")) and fields and fields[0] not in KERNEL_GROUPS_V4:
            groups.append(f"v4 {fields[0]}")
    for line in Path(f"/proc/{pid}/net/igmp6").read_text().splitlines():
        dev, group = line.split()[1], line.split()[2]
        if not (
            group in ("ff020000000000000000000000000001", "ff010000000000000000000000000001")
            or group.startswith("ff0200000000000000000001ff")
        ):
            groups.append(f"v6 {dev} {group}")
    return groups


def _namespace_pids(pid: int) -> list[int]:
    ns = os.readlink(f"/proc/{pid}/ns/net")
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "net") == ns:
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def _sockets(pid: int) -> dict[int, list[str]]:
    """Local addresses of every UDP and TCP socket in ``pid``'s namespace, per process."""
    out: dict[int, list[str]] = {}
    for proto in ("-uanp", "-tanp"):
        text = subprocess.run(
            ["nsenter", "-t", str(pid), "-n", "ss", "-H", proto], capture_output=True, text=True, check=True
        ).stdout
        for line in text.splitlines():
            local = line.split()[3].rsplit(":", 1)[0].strip("[]")
            for part in line.split("pid=")[1:]:
                out.setdefault(int(part.split(",")[0]), []).append(local)
    return out


@pytest.mark.timeout(180)
def test_sim_graph_binds_nothing_beyond_loopback_and_joins_no_multicast_group(ros_domain, tmp_path):
    """Every process of ``piper-launch sim`` (the launcher's own probe included), after the graph is up
    (all nodes discovered) and running: its sockets on loopback only, no multicast membership anywhere
    in its namespace, although a LAN interface with an address is there to be used.
    """
    if not _netns_works():
        if os.environ.get("CI"):
            pytest.fail("CI must run this test: unshare/nsenter (util-linux) with CAP_SYS_ADMIN are needed")
        pytest.skip("needs unshare -n (a private network namespace)")
    setup = (
        f"ip link set lo up && ip link add v0 type veth peer name v1 && ip addr add {LAN}/24 dev v0 && "
        'ip link set v0 up && ip link set v1 up && exec "$0" "$@"'
    )
    launcher = str(Path(sys.executable).parent / "piper-launch")
    log = (tmp_path / "launch.log").open("wb")
    proc = subprocess.Popen(
        [
            "unshare",
            "-n",
            "sh",
            "-c",
            setup,
            launcher,
            "sim",
            "--quiet",
            "--domain-id",
            str(ros_domain.domain_id),
            "--log-dir",
            str(tmp_path / "logs"),
            "--root",
            str(tmp_path / "lerobot"),
            "--rgbd-path",
            str(tmp_path / "rgbd.hdf5"),
        ],
        env=ros_domain.env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = lambda: (tmp_path / "launch.log").read_text(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 90
        while "piper-launch: ready" not in output():
            assert proc.poll() is None and time.monotonic() < deadline, f"the graph did not come up:\n{output()}"
            time.sleep(0.2)
        time.sleep(5.0)  # streaming: cameras, the headset, teleop driving the arm
        pids = _namespace_pids(proc.pid)
        sockets = _sockets(proc.pid)
        assert len(pids) >= 8 and not [p for p in pids if not sockets.get(p)], (pids, sockets)  # all speak
        outside = {
            p: [a for a in addrs if a == "*" or not ipaddress.ip_address(a).is_loopback] for p, addrs in sockets.items()
        }
        assert _multicast_groups(proc.pid) == []
        assert not any(outside.values()), f"sockets bound beyond loopback: {outside}"
        assert proc.poll() is None, output()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()

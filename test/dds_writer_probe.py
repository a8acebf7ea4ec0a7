"""A reliable ROS 2 writer or reader in a process of its own, for test_dds_writer_timers.

``python dds_writer_probe.py sub TOPIC``: a reliable depth-50 subscription that spins until killed.
``python dds_writer_probe.py pub TOPIC N HZ``: once a subscriber matched, publish ``N`` messages at
``HZ`` from a reliable depth-50 publisher (the arm topics' QoS) and print one JSON line: the messages
sent and how often this process's Fast DDS event threads (``dds.ev.*``) were woken meanwhile
(context switches: each is a wake-up, the threads block between events).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


def event_thread_switches() -> int:
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("dds.ev"):
                continue
            for line in (task / "status").read_text().splitlines():
                if line.endswith("ctxt_switches") or "ctxt_switches:" in line:
                    total += int(line.split()[1])
        except OSError:   # a thread that ended meanwhile
            continue
    return total


def main() -> None:
    role, topic = sys.argv[1], sys.argv[2]
    rclpy.init()
    node = rclpy.create_node(f"dds_writer_probe_{role}")
    if role == "sub":
        node.create_subscription(String, topic, lambda _m: None, QOS)
        try:
            rclpy.spin(node)
        finally:
            rclpy.try_shutdown()
        return
    n, hz = int(sys.argv[3]), float(sys.argv[4])
    pub = node.create_publisher(String, topic, QOS)
    deadline = time.monotonic() + 30
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)   # discovery traffic settles
    msg = String(data="x" * 100)
    before = event_thread_switches()
    next_t = time.monotonic()
    for _ in range(n):
        pub.publish(msg)
        next_t += 1.0 / hz
        time.sleep(max(0.0, next_t - time.monotonic()))
    woken = event_thread_switches() - before
    print(json.dumps({"matched": pub.get_subscription_count(), "sent": n, "event_thread_wakes": woken}), flush=True)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()

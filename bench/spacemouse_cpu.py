"""CPU of piper-teleop with the SpaceMouse input, beside the emulated arm, against the headset input.

Starts piper-arm (CAN emulator) and then, one after the other, ``--rounds`` times, piper-teleop with
``input: headset`` and nothing connected (its control loop and arm-feedback subscriptions), with
``input: headset`` and the simulated headset streaming at rest through quest_bridge (``idle`` script),
with ``input: spacemouse`` reading a fake hidraw device (a FIFO) that sends nothing (the cap at rest),
and with that device streaming a report every 8 ms (translation and rotation reports alternating)
with the clutch engaged, the arm moving forward and back. For each: the teleop process's CPU (cores,
utime + stime from /proc/<pid>/stat) over ``--seconds``, after ``--settle`` seconds.

  .venv/bin/python bench/spacemouse_cpu.py [--seconds 15] [--rounds 2]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import load, machine_line, tool  # noqa: E402
from graph_capacity import cpu_seconds  # noqa: E402

from piper_recorder.graph.ports import free_port  # noqa: E402
from piper_recorder.graph.rosenv import lease_domain  # noqa: E402

REPORT_PERIOD_S = 0.008


class Fifo:
    def __init__(self, path: Path):
        os.mkfifo(path)
        self.path = str(path)
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.sent = 0

    def send(self, report: bytes) -> None:
        buf = bytearray(4)
        end = time.monotonic() + 2.0
        while True:  # one report per read, as hidraw: the previous one was taken
            fcntl.ioctl(self.fd, termios.FIONREAD, buf)
            if not int.from_bytes(buf, "little") or time.monotonic() > end:
                break
            time.sleep(0.0005)
        os.write(self.fd, report)
        self.sent += 1


def stream(dev: Fifo, stop: threading.Event) -> None:
    """Forward for 1 s, back for 1 s, ... at full deflection; translation and rotation reports alternate."""
    t0 = time.monotonic()
    k = 0
    while not stop.is_set():
        y = -300 if int((time.monotonic() - t0) / 1.0) % 2 == 0 else 300
        dev.send(struct.pack("<B3h", 1, 0, y, 0) if k % 2 == 0 else struct.pack("<B3h", 2, 0, 0, 0))
        k += 1
        time.sleep(REPORT_PERIOD_S)
    dev.send(struct.pack("<B3h", 1, 0, 0, 0))


def measure(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--settle", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the configurations this many times")
    args = ap.parse_args()
    print(machine_line())
    tmp = Path(tempfile.mkdtemp(prefix="spacemouse-cpu-"))
    dev = Fifo(tmp / "hidraw0")
    sm = ["-p", "input:=spacemouse", "-p", f"spacemouse.device:={dev.path}"]
    configs = [
        ("headset input, nothing connected", [], None),
        ("headset input, sim headset streaming at rest (bridge running)", [], "headset"),
        ("spacemouse input, device open, no reports", sm, None),
        ("spacemouse input, 125 Hz reports, clutch engaged, arm moving", sm, "stream"),
    ]
    results: dict[str, list[float]] = {c[0]: [] for c in configs}
    with lease_domain() as lease:
        env = lease.env()
        logs = open(tmp / "log.txt", "wb")  # closed in the finally below  # noqa: SIM115
        arm = subprocess.Popen(
            [tool("piper-arm"), "--ros-args", "-p", "emulate:=true"], env=env, stdout=logs, stderr=subprocess.STDOUT
        )
        try:
            for _ in range(args.rounds):
                for label, extra, what in configs:
                    side: list[subprocess.Popen[bytes]] = []
                    if what == "headset":
                        port = free_port()
                        side.append(
                            subprocess.Popen(
                                [tool("piper-sim-quest"), "--port", str(port), "--no-buttons", "--script", "idle"],
                                env=env,
                                stdout=logs,
                                stderr=subprocess.STDOUT,
                            )
                        )
                        side.append(
                            subprocess.Popen(
                                [tool("piper-quest-bridge"), "--ros-args", "-p", f"port:={port}"],
                                env=env,
                                stdout=logs,
                                stderr=subprocess.STDOUT,
                            )
                        )
                    teleop = subprocess.Popen(
                        [tool("piper-teleop"), "--ros-args", *extra], env=env, stdout=logs, stderr=subprocess.STDOUT
                    )
                    time.sleep(args.settle)
                    stop = threading.Event()
                    th = None
                    if what == "stream":
                        dev.send(b"\x03\x01\x00")  # clutch button: engage
                        dev.send(b"\x03\x00\x00")
                        th = threading.Thread(target=stream, args=(dev, stop), daemon=True)
                        th.start()
                        time.sleep(1.0)
                    n0, t0 = dev.sent, time.monotonic()
                    results[label].append(measure(teleop.pid, args.seconds))
                    rate = (dev.sent - n0) / (time.monotonic() - t0)
                    stop.set()
                    if th is not None:
                        th.join(2)
                    note = f" ({rate:.0f} reports/s)" if what == "stream" else ""
                    print(f"{label}: {results[label][-1]:.4f} cores{note}; load {load()}", flush=True)
                    teleop.terminate()
                    teleop.wait(10)
                    for p in side:
                        p.terminate()
                        p.wait(10)
        finally:
            arm.terminate()
            arm.wait(10)
            logs.close()
    print("teleop process CPU, mean of the rounds:")
    for label, v in results.items():
        print(f"  {label}: {sum(v) / len(v):.4f} cores  ({', '.join(f'{x:.4f}' for x in v)})")
    print(f"machine after: load average {load()}")


if __name__ == "__main__":
    main()

"""A SpaceMouse without the device: its HID reports as bytes (the split layout's translation, rotation and
button reports, the wireless models' single report) and a FIFO the reader opens like /dev/hidrawN.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import time


def trans(x: int, y: int, z: int) -> bytes:  # split layout, report 1
    return struct.pack("<B3h", 1, x, y, z)


def rot(rx: int, ry: int, rz: int) -> bytes:  # split layout, report 2
    return struct.pack("<B3h", 2, rx, ry, rz)


def single(x: int, y: int, z: int, rx: int, ry: int, rz: int) -> bytes:  # SpaceMouse Wireless, report 1
    return struct.pack("<B6h", 1, x, y, z, rx, ry, rz)


def buttons(mask: int, nbytes: int = 2) -> bytes:
    return bytes([3]) + mask.to_bytes(nbytes, "little")


class FakeHidraw:
    """A FIFO the reader opens like /dev/hidrawN; each report is written once the previous one was read,
    so every read returns exactly one report, as hidraw's do.
    """

    def __init__(self, path):
        self.path = str(path)
        os.mkfifo(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)  # a writer that never blocks on open

    def pending(self) -> int:
        buf = bytearray(4)
        fcntl.ioctl(self.fd, termios.FIONREAD, buf)
        return int.from_bytes(buf, "little")

    def send(self, report: bytes, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while self.pending():
            assert time.monotonic() < end, "the reader did not take the previous report"
            time.sleep(0.0005)
        os.write(self.fd, report)

    def drain(self, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while self.pending() and time.monotonic() < end:
            time.sleep(0.001)

    def unplug(self) -> None:
        os.close(self.fd)

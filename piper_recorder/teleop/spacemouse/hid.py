"""3Dconnexion SpaceMouse HID input reports, decoded (no ROS), and the device found among /dev/hidraw*.

A hidraw read returns one input report: its report id, then the payload. 3Dconnexion devices use
two motion layouts (checked against pyspacemouse's device table and USB captures of a SpaceNavigator,
``01 00 00 00 00 00 00`` / ``02 00 00 e2 ff 00 00`` / ``03 01 00``):

- **split** (SpaceNavigator, SpaceExplorer, SpacePilot (Pro), SpaceMouse Pro, SpaceMouse Compact,
  SpaceMouse USB): report 1 = translation x, y, z; report 2 = rotation rx, ry, rz; 7 bytes each.
- **single** (SpaceMouse Wireless (cabled and receiver), Pro Wireless, Enterprise, the Universal
  Receiver): report 1 = x, y, z, rx, ry, rz in one 13-byte report.

Every value is a little-endian int16, about +-350 at full deflection. Report 3 is the buttons, a
little-endian bitmask (bit 0 = the left button of a two-button device, bit 1 the right one). Other
report ids (battery 0x17 of the wireless models, ...) are not motion and are only counted. The layout
needs no table: a hidraw read is exactly one report, so report 1's length says which one it is.

Device axes (as the reports give them; the HID usage tables' convention, as pyspacemouse documents
it): x to the right, y toward the user, z down, a right-handed frame (the cap pushed away from the
user is -y); rotations are right-handed about those axes (+rz = clockwise seen from above).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

TRANSLATION, ROTATION, BUTTONS = 1, 2, 3
SPLIT_LEN, SINGLE_LEN = 7, 13  # report id + 3 or 6 int16
MAX_BUTTON_BYTES = 8
GARBAGE_FACTOR = 4.0  # a raw value beyond this many full scales is not a deflection but garbage

# USB vendor ids: Logitech (3Dconnexion's devices before 2011) and 3Dconnexion
VENDOR_LOGITECH, VENDOR_3DCONNEXION = 0x046D, 0x256F
LOGITECH_3DX_PRODUCTS = frozenset(
    {0xC603, 0xC605, 0xC606, 0xC621, 0xC623, 0xC625, 0xC626, 0xC627, 0xC628, 0xC629, 0xC62B}
)  # Logitech also makes mice: only these are 3Dconnexion's
DROP_REASONS = ("empty", "bad_length", "out_of_range")


def is_3dconnexion(vendor: int, product: int) -> bool:
    """Whether a USB vendor/product pair is a 3Dconnexion device."""
    return vendor == VENDOR_3DCONNEXION or (vendor == VENDOR_LOGITECH and product in LOGITECH_3DX_PRODUCTS)


@dataclass
class HidState:
    """The device's latest values: raw axes (device frame) and the button bitmask."""

    translation: tuple[int, int, int] = (0, 0, 0)
    rotation: tuple[int, int, int] = (0, 0, 0)
    buttons: int = 0


@dataclass
class Decoded:
    """What one report was: motion, buttons, another report, or a drop and why."""

    kind: str  # "motion", "buttons", "other" (a report that is not input we use), "drop"
    reason: str = ""  # for "drop": one of DROP_REASONS


@dataclass
class HidDecoder:
    """Applies reports to ``state``; a malformed report changes nothing and is counted by reason."""

    full_scale: float = 350.0
    state: HidState = field(default_factory=HidState)
    drops: dict[str, int] = field(default_factory=dict)
    reports: int = 0
    layout: str = ""  # "split" or "single" once report 1 has been seen

    def decode(self, report: bytes) -> Decoded:
        """Decode one report into the decoder's state; a malformed one is a counted drop."""
        self.reports += 1
        if not report:
            return self._drop("empty")
        rid, n = report[0], len(report)
        if rid == TRANSLATION:
            if n not in (SPLIT_LEN, SINGLE_LEN):
                return self._drop("bad_length")
            values = struct.unpack_from(f"<{(n - 1) // 2}h", report, 1)
            if not self._in_range(values):
                return self._drop("out_of_range")
            self.layout = "split" if n == SPLIT_LEN else "single"
            self.state.translation = (values[0], values[1], values[2])
            if n == SINGLE_LEN:
                self.state.rotation = (values[3], values[4], values[5])
            return Decoded("motion")
        if rid == ROTATION:
            if n != SPLIT_LEN:
                return self._drop("bad_length")
            values = struct.unpack_from("<3h", report, 1)
            if not self._in_range(values):
                return self._drop("out_of_range")
            self.state.rotation = (values[0], values[1], values[2])
            return Decoded("motion")
        if rid == BUTTONS:
            if not 2 <= n <= 1 + MAX_BUTTON_BYTES:
                return self._drop("bad_length")
            self.state.buttons = int.from_bytes(report[1:], "little")
            return Decoded("buttons")
        return Decoded("other")

    def _in_range(self, values: tuple[int, ...]) -> bool:
        return all(abs(v) <= GARBAGE_FACTOR * self.full_scale for v in values)

    def _drop(self, reason: str) -> Decoded:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        return Decoded("drop", reason)


@dataclass(frozen=True)
class HidrawDevice:
    """One hidraw node of a 3Dconnexion device."""

    path: str  # /dev/hidrawN
    vendor: int
    product: int
    name: str


_HID_ID = re.compile(r"^HID_ID=([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)$", re.M)
_HID_NAME = re.compile(r"^HID_NAME=(.*)$", re.M)


def hidraw_devices(sysfs: str | Path = "/sys/class/hidraw", dev: str | Path = "/dev") -> list[HidrawDevice]:
    """The 3Dconnexion devices among the hidraw nodes, by name.

    Found by ``HID_ID=bus:vendor:product`` in each node's ``device/uevent``, the kernel's own record: no
    ioctl, no extra dependency.
    """
    out = []
    root = Path(sysfs)
    try:
        nodes = sorted(os.listdir(root), key=lambda s: (len(s), s))
    except OSError:
        return []
    for node in nodes:
        try:
            text = (root / node / "device" / "uevent").read_text()
        except OSError:
            continue
        m = _HID_ID.search(text)
        if m is None:
            continue
        vendor, product = int(m.group(2), 16), int(m.group(3), 16)
        if is_3dconnexion(vendor, product):
            name = _HID_NAME.search(text)
            out.append(HidrawDevice(str(Path(dev) / node), vendor, product, name.group(1) if name else ""))
    return out

"""What a Piper firmware release makes of a JointMitCtrl frame (CAN 0x15A-0x15F), by version band.

piper_sdk 0.6.2 encodes one MIT frame for every firmware: 16-bit position, 12-bit velocity, kp, kd,
an 8-bit torque over [-8, 8] N m and a 4-bit XOR check in the low nibble of byte 7. Public reports
say the firmware does not read it the same way in every release, so the impedance backend must know
which one it talks to. The bands, and where each fact comes from (none of it was
checked on hardware here; the CAN emulator models each band so the backend is tested against it):

- before S-V1.7-3: joints 1, 2, 4 and 6 run reversed in MIT mode (Reimagine-Robotics/piper_control,
  ``_PRE_V1_7_3_MIT_JOINT_FLIP``). Not adapted: the backend refuses.
- S-V1.7-3 .. S-V1.8-2: the 8-bit frame, but the firmware applies 4x the commanded torque on joints
  1-3 and the SDK's effort of joints 1-3 reads 4x the true torque (AgileX on piper_sdk issue #73 for
  1.5-8: "send 1 N m, the motor executes 4"; piper_control ``direct_scaling_factors``: 0.25 on
  joints 1-3 up to 1.8-2). Adapted: the torque sent to joints 1-3 is divided by 4, their effort too.
- S-V1.8-3 .. S-V1.8-7: the SDK's frame means what it says (what this project's backend was built
  and tested against).
- S-V1.8-8 and later: a 12-bit torque over [-16, 16] N m in place of the 8-bit torque and the check
  (byte 6: kd's low 4 bits, torque bits 11-8; byte 7: torque bits 7-0), and MotionCtrl_2 move mode
  0x06 for MIT (Reimagine-Robotics/piper_sdk "feat(mit): support v188 torque frames", piper_control
  PR #85, both unmerged when read). The SDK's 8-bit frame is misread there: its torque nibbles and
  check land in the 12-bit torque. Adapted: the backend encodes the 12-bit frame itself.
- unknown (no 0x4AF reply, an unparsed string): refused.

Version strings: "S-V<major>.<minor>-<patch>", possibly with a 6-digit build date glued on (the same
report). piper_sdk 0.6.2's ``GetPiperFirmwareVersion`` returns the first 8 characters, so "S-V1.8-10"
reads "S-V1.8-1": ``parse_version`` reads the raw 0x4AF bytes instead (``PiperLink.firmware``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]

FLIP_FIXED = (1, 7, 3)  # MIT joint directions as the SDK documents them from here on
X4_FIXED = (1, 8, 3)  # no 4x torque on joints 1-3 from here on
MIT12 = (1, 8, 8)  # the 12-bit, no-check MIT frame and move mode 0x06 from here on

_VERSION = re.compile(rb"S-V(\d+)\.(\d+)-(\d+)")


def parse_version(raw: bytes | str | None, complete: bool = True) -> Version | None:
    """(major, minor, patch) of the first "S-V<a>.<b>-<c>" in ``raw``.

    A patch run of more than 2 digits ends in a glued 6-digit build date (YYMMDD), which is not the
    patch. None if none parses, or (``complete`` False: more bytes may follow) if the digits run to the
    end of ``raw``.
    """
    if raw is None:
        return None
    data = raw.encode(errors="ignore") if isinstance(raw, str) else bytes(raw)
    m = _VERSION.search(data)
    if m is None or (not complete and m.end() == len(data)):
        return None
    patch = m.group(3)
    if len(patch) > 2:
        patch = patch[:-6] if len(patch) in (7, 8) else b""
    if not patch:
        return None
    return int(m.group(1)), int(m.group(2)), int(patch)


def version_string(v: Version) -> str:
    """The firmware's own spelling of a version: ``S-V1.8-3``."""
    return f"S-V{v[0]}.{v[1]}-{v[2]}"


@dataclass(frozen=True)
class MitDialect:
    """How one firmware reads JointMitCtrl, and whether the impedance backend may drive it."""

    firmware: str  # as read ("" when nothing was read)
    version: Version | None
    frame: str  # "crc8": the SDK's frame; "raw12": 12-bit torque, no check
    t_range: tuple[float, float]  # N m the torque field spans
    move_mode: int  # MotionCtrl_2 move mode that enters MIT
    torque_gain: tuple[float, ...]  # the firmware applies gain x the torque field, per joint
    effort_gain: tuple[float, ...]  # the SDK's effort reads gain x the true torque, per joint
    refusal: str | None = None  # why the impedance backend must not run (None: it may)

    def describe(self) -> str:
        """One line for the log: the firmware, its MIT frame, torque range, move mode and gains."""
        gains = "" if set(self.torque_gain) == {1.0} else f", firmware torque x{list(self.torque_gain)}"
        return (
            f"{self.firmware or 'unknown firmware'}: MIT frame {self.frame} over {list(self.t_range)} N m, "
            f"move mode 0x{self.move_mode:02X}{gains}"
        )


ONES = (1.0,) * 6
X4 = (4.0, 4.0, 4.0, 1.0, 1.0, 1.0)


def _sdk_frame(name: str, v: Version | None, gain: tuple[float, ...] = ONES, refusal: str | None = None) -> MitDialect:
    """A band that reads the SDK's 8-bit + check frame, entered with move mode 0x04."""
    return MitDialect(name, v, "crc8", (-8.0, 8.0), 0x04, gain, gain, refusal)


def mit_dialect(firmware: str | bytes | None) -> MitDialect:
    """The band ``firmware`` falls in (module docstring); ``refusal`` set for the ones not driven."""
    v = parse_version(firmware)
    if v is not None:
        name = version_string(v)
    else:
        name = firmware.decode(errors="replace") if isinstance(firmware, bytes) else (firmware or "")
    advice = "use backend: position, or update the arm firmware (S-V1.8-3 or later)"
    if v is None:
        why = "no firmware reply" if not name else f"unrecognised firmware string {name!r}"
        return _sdk_frame(
            name,
            None,
            refusal=f"impedance backend refused: {why}; firmware releases read "
            f"JointMitCtrl differently (torque scale, frame layout), so it "
            f"will not command MIT torques blind; {advice}",
        )
    if v < FLIP_FIXED:
        return _sdk_frame(
            name,
            v,
            X4,
            refusal=f"impedance backend refused on {name}: before S-V1.7-3 the "
            f"firmware runs joints 1, 2, 4 and 6 reversed in MIT mode (and "
            f"applies 4x the torque on joints 1-3); this backend is not "
            f"verified there; {advice}",
        )
    if v < X4_FIXED:
        return _sdk_frame(name, v, X4)
    if v < MIT12:
        return _sdk_frame(name, v)
    return MitDialect(name, v, "raw12", (-16.0, 16.0), 0x06, ONES, ONES)

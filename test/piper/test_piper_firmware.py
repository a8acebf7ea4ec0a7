"""The impedance backend knows the firmware it talks to (real piper_sdk over python-can's
virtual bus, the CAN emulator reporting and decoding as each firmware band does, piper_recorder.piper
.firmware for the bands and where their facts come from).

- S-V1.8-8+: the SDK's 8-bit MIT frame is misread (its torque nibbles and check land in a 12-bit
  torque); the backend sends the 12-bit frame (move mode 0x06), which the emulated firmware decodes.
- S-V1.7-3..1.8-2: the firmware applies 4x the torque on joints 1-3; the backend divides it.
- before S-V1.7-3, or no firmware reply: refused with a message naming the firmware and the way out.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

from piper_recorder.piper.backends import ArmConfig, FirmwareRefused
from piper_recorder.piper.controller import ArmController
from piper_recorder.piper.emulator import EmulatorConfig, PiperEmulator
from piper_recorder.piper.firmware import mit_dialect, parse_version
from piper_recorder.piper.link import PiperLink
from piper_recorder.piper.wire import ID_MIT_CTRL, MOVE_M, MOVE_MIT, decode_mit, encode_mit_raw12

from support.waiting import wait_for

pytestmark = pytest.mark.slow  # the arm's control loops run against wall-clock time on the emulated bus

START = [0.0, 0.9, -0.9, 0.0, 0.5, 0.0]


class Arm:
    """An emulated arm reporting ``firmware`` and the real SDK link to it."""

    def __init__(self, firmware: str):
        self.channel = f"piper_emu_{uuid.uuid4().hex[:10]}"
        self.emu = PiperEmulator(self.channel, EmulatorConfig(firmware=firmware, q_init=START)).start()
        self.link = PiperLink(self.channel, "virtual")
        wait_for(lambda: self.link.feedback().stamp > 0, 3.0, step=0.01)

    def close(self) -> None:
        self.link.close()
        self.emu.stop()


@pytest.fixture
def arms():
    made: list[Arm] = []

    def make(firmware: str) -> Arm:
        made.append(Arm(firmware))
        return made[-1]

    yield make
    for a in made:
        a.close()


def test_version_strings_parse_past_the_sdks_eight_characters():
    assert parse_version("S-V1.8-8") == (1, 8, 8) and parse_version(b"S-V1.6-5\x00\x00") == (1, 6, 5)
    assert parse_version(b"S-V1.8-10\x00") == (1, 8, 10)
    assert parse_version(b"S-V1.8-5230101") == (1, 8, 5)  # a glued YYMMDD build date is not the patch
    assert parse_version(b"S-V1.8-1", complete=False) is None  # the next frame may carry more digits
    assert parse_version("") is None and parse_version("V1.8") is None and parse_version(None) is None
    bands = {
        f: (d.frame, d.torque_gain[0], d.move_mode, d.refusal is None)
        for f in ("S-V1.6-5", "S-V1.7-3", "S-V1.8-2", "S-V1.8-3", "S-V1.8-7", "S-V1.8-8", "S-V1.9-0")
        for d in [mit_dialect(f)]
    }
    assert bands == {
        "S-V1.6-5": ("crc8", 4.0, 0x04, False),
        "S-V1.7-3": ("crc8", 4.0, 0x04, True),
        "S-V1.8-2": ("crc8", 4.0, 0x04, True),
        "S-V1.8-3": ("crc8", 1.0, 0x04, True),
        "S-V1.8-7": ("crc8", 1.0, 0x04, True),
        "S-V1.8-8": ("raw12", 1.0, 0x06, True),
        "S-V1.9-0": ("raw12", 1.0, 0x06, True),
    }


def test_link_reads_a_two_digit_patch_the_sdk_truncates(arms):
    arm = arms("S-V1.8-10")
    assert arm.link.firmware() == "S-V1.8-10" and arm.link.dialect.frame == "raw12"
    assert arm.link.sdk.GetPiperFirmwareVersion() == "S-V1.8-1"  # piper_sdk 0.6.2: another band


def test_on_1_8_8_the_sdk_frame_is_misread_and_the_12_bit_frame_is_not(arms):
    arm = arms("S-V1.8-8")
    emu, link = arm.emu, arm.link
    emu.log_rx = True
    # the old behaviour: piper_sdk's own JointMitCtrl (8-bit torque + check) for 2 N m on joint 2
    link.sdk.JointMitCtrl(2, 0.9, 0.0, 10.0, 0.8, 2.0)
    wait_for(lambda: any(m.arbitration_id == ID_MIT_CTRL[1] for m in emu.rx_log), 3.0, step=0.01)
    old = [m for m in emu.rx_log if m.arbitration_id == ID_MIT_CTRL[1]][-1]
    misread = decode_mit(bytes(old.data), "raw12", (-16.0, 16.0))
    assert misread is not None and abs(misread.t_ff - 2.0) > 1.5, misread  # read as ~4 N m: twice the torque
    assert abs(decode_mit(bytes(old.data)).t_ff - 2.0) < 0.07  # what the SDK meant
    # the fixed path: the link (dialect read from the firmware) encodes the 12-bit frame
    assert link.firmware() == "S-V1.8-8"
    n = len(emu.rx_log)
    link.mit(2, 0.9, 0.0, 10.0, 0.8, 2.0)
    wait_for(lambda: any(m.arbitration_id == ID_MIT_CTRL[1] for m in emu.rx_log[n:]), 3.0, step=0.01)
    new = [m for m in emu.rx_log[n:] if m.arbitration_id == ID_MIT_CTRL[1]][-1]
    cmd = decode_mit(bytes(new.data), "raw12", (-16.0, 16.0))
    assert cmd is not None and abs(cmd.t_ff - 2.0) <= 16.0 / 4095 + 1e-9
    assert abs(cmd.pos - 0.9) < 1e-3 and abs(cmd.kp - 10.0) < 0.07 and abs(cmd.kd - 0.8) < 2e-3
    assert bytes(new.data) == encode_mit_raw12(0.9, 0.0, 10.0, 0.8, 2.0, (-16.0, 16.0))


def run_impedance(arm: Arm, seconds: float = 2.5) -> ArmController:
    cfg = ArmConfig(backend="impedance", can_channel=arm.channel, can_interface="virtual", can_silence_s=1.0)
    ctl = ArmController(cfg, arm.link)
    ctl.start()
    wait_for(lambda: arm.emu.mit, 3.0, logs=lambda: str(ctl.status()), step=0.01)
    time.sleep(seconds)
    return ctl


@pytest.mark.parametrize("firmware", ["S-V1.8-8", "S-V1.7-5"])
def test_impedance_backend_adapts_and_holds_the_arm_against_gravity(arms, firmware):
    """On each band the backend drives, the torque the emulated firmware applies is the gravity the
    backend meant, and the arm holds its pose (it sagged or was thrown before: 4x torque on joints 1-3
    on 1.7-5, a misread 12-bit torque on 1.8-8).
    """
    arm = arms(firmware)
    ctl = run_impedance(arm)
    try:
        emu = arm.emu
        assert emu.move_mode == (MOVE_MIT if firmware == "S-V1.8-8" else MOVE_M)
        assert all(c is not None for c in emu.mit_cmd)
        applied = np.array([c.t_ff for c in emu.mit_cmd]) * np.array(emu.dialect.torque_gain)
        meant = np.array(ctl.status()["gravity_ff"])
        step = 16.0 / 4095 if firmware == "S-V1.8-8" else 4 * 16.0 / 255  # one torque code, x4 on 1-3
        assert np.allclose(applied, meant, atol=step), (applied, meant)
        assert abs(meant[1]) > 0.2 and abs(meant[2]) > 0.2  # shoulder and elbow carry load
        # the link reports true torques: the holding torque the emulator computes, not 4x it
        assert np.allclose(arm.link.feedback().effort[:3], emu.tau_out[:3], atol=0.05)
        assert np.allclose(emu.joints(), START, atol=0.05), emu.joints()
    finally:
        ctl.stop()


def test_old_behaviour_on_1_7_5_applies_four_times_the_torque(arms):
    """Without the division the firmware of S-V1.7-3..1.8-2 executes 4x the torque field on joints 1-3."""
    arm = arms("S-V1.7-5")
    link, emu = arm.link, arm.emu
    link.firmware()
    link.enable()
    wait_for(lambda: emu.enabled, 3.0, step=0.01)
    link.mode_mit(100)
    wait_for(lambda: emu.mit, 3.0, step=0.01)
    link.sdk.JointMitCtrl(1, 0.0, 0.0, 0.0, 0.0, 1.0)  # 1 N m asked of joint 1, no PD
    wait_for(lambda: emu.mit_cmd[0] is not None, 3.0, step=0.01)
    assert abs(emu.mit_cmd[0].t_ff * emu.dialect.torque_gain[0] - 4.0) < 0.2


@pytest.mark.parametrize("firmware,why", [("S-V1.6-5", "joints 1, 2, 4 and 6 reversed"), ("", "no firmware reply")])
def test_impedance_backend_refuses_firmware_it_does_not_drive(arms, firmware, why):
    arm = arms(firmware)
    cfg = ArmConfig(backend="impedance", can_channel=arm.channel, can_interface="virtual")
    ctl = ArmController(cfg, arm.link)
    with pytest.raises(FirmwareRefused) as err:
        ctl.start()
    msg = str(err.value)
    assert why in msg and "backend: position" in msg and (firmware in msg)
    assert not arm.emu.enabled and arm.emu.rx_counts.get(ID_MIT_CTRL[0], 0) == 0  # never enabled nor commanded
    # the position backend does not use MIT frames: it runs on the same firmware
    pos = ArmController(ArmConfig(backend="position", can_channel=arm.channel, can_interface="virtual"), arm.link)
    pos.start()
    pos.stop()

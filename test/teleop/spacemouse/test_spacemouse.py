"""SpaceMouse input without ROS: 3Dconnexion HID reports (byte fixtures written from the documented
layouts, piper_recorder.teleop.spacemouse.hid) decoded, read through a fake device the reader opens exactly
like /dev/hidraw (a FIFO, one report per read), found in a fake sysfs tree, and mapped through the real
TeleopCore (clutch, limits, recorder actions) with an ideal arm that follows its targets.
"""

from __future__ import annotations

import math
import struct
import threading
import time

import numpy as np
import pytest

from piper_recorder.teleop.clutch import ClutchEvent
from piper_recorder.teleop.mapper import Action, TeleopConfig, TeleopCore
from piper_recorder.teleop.rotations import angle_between
from piper_recorder.teleop.spacemouse.hid import HidDecoder, hidraw_devices
from piper_recorder.teleop.spacemouse.input import SpaceMouseConfig, SpaceMouseInput
from piper_recorder.teleop.spacemouse.reader import HidrawReader

from support.spacemouse import FakeHidraw, buttons, rot, single, trans


# ---- decoder ---------------------------------------------------------------------------------------
def test_split_layout_as_a_spacenavigator_sends_it():
    d = HidDecoder()
    # the USB capture of a SpaceNavigator: rest, a rotation about the second axis (-30), button 1 down/up
    assert d.decode(bytes.fromhex("01000000000000")).kind == "motion"
    assert d.decode(bytes.fromhex("020000e2ff0000")).kind == "motion"
    assert d.state.rotation == (0, -30, 0) and d.layout == "split"
    assert d.decode(bytes.fromhex("030100")).kind == "buttons" and d.state.buttons == 1
    d.decode(bytes.fromhex("030300"))
    assert d.state.buttons == 3
    d.decode(trans(350, -200, 12))
    assert d.state.translation == (350, -200, 12) and d.state.rotation == (0, -30, 0)
    assert d.drops == {}


def test_single_report_layout_carries_both():
    d = HidDecoder()
    assert d.decode(single(1, -2, 3, -4, 5, -6)).kind == "motion"
    assert d.state.translation == (1, -2, 3) and d.state.rotation == (-4, 5, -6) and d.layout == "single"
    assert d.decode(bytes([0x17, 100])).kind == "other"  # the wireless models' battery report


def test_malformed_reports_change_nothing_and_are_counted():
    d = HidDecoder()
    d.decode(trans(10, 20, 30))
    for bad in (
        b"",
        trans(1, 2, 3)[:5],
        rot(1, 2, 3) + b"\x00",
        struct.pack("<B3h", 1, 32767, 0, 0),
        struct.pack("<B3h", 2, 0, -32768, 0),
        bytes([3]),
        bytes([3]) + bytes(9),
    ):
        assert d.decode(bad).kind == "drop"
    assert d.state.translation == (10, 20, 30) and d.state.rotation == (0, 0, 0) and d.state.buttons == 0
    assert d.drops == {"empty": 1, "bad_length": 4, "out_of_range": 2}


def test_devices_found_by_the_kernels_hid_id(tmp_path):
    sysfs = tmp_path / "sys"
    for node, hid_id, name in [
        ("hidraw0", "0003:0000046D:0000C52B", "Logitech USB Receiver"),  # a mouse
        ("hidraw10", "0003:0000256F:0000C62E", "3Dconnexion SpaceMouse Wireless"),
        ("hidraw2", "0003:0000046D:0000C626", "3Dconnexion SpaceNavigator"),
        ("hidraw3", "0003:00001234:00005678", "other"),
    ]:
        (sysfs / node / "device").mkdir(parents=True)
        (sysfs / node / "device" / "uevent").write_text(
            f"DRIVER=hid-generic\nHID_ID={hid_id}\nHID_NAME={name}\nHID_PHYS=usb-0000:00:14.0-1/input0\n"
        )
    found = hidraw_devices(sysfs, "/dev")
    assert [(f.path, f.vendor, f.product) for f in found] == [
        ("/dev/hidraw2", 0x046D, 0xC626),
        ("/dev/hidraw10", 0x256F, 0xC62E),
    ]
    assert found[0].name == "3Dconnexion SpaceNavigator"
    assert hidraw_devices(tmp_path / "missing") == []


# ---- reader over a fake device ---------------------------------------------------------------------
def test_reader_delivers_each_report_and_notices_an_unplug(tmp_path):
    dev = FakeHidraw(tmp_path / "hidraw7")
    got: list[bytes] = []
    states: list[str] = []
    opened = threading.Event()

    def on_state(state, detail):
        states.append(state)
        if state == "open":
            opened.set()

    reader = HidrawReader(dev.path, lambda t, r: got.append(r), on_state, reopen_s=0.05).start()
    try:
        assert opened.wait(5)
        stream = [trans(i, -i, 2 * i) if i % 3 else rot(i, 0, -i) for i in range(1, 60)] + [buttons(1), buttons(0)]
        for r in stream:
            dev.send(r)
        dev.drain()
        end = time.monotonic() + 5
        while len(got) < len(stream) and time.monotonic() < end:
            time.sleep(0.005)
        assert got == stream
        dev.unplug()
        end = time.monotonic() + 5
        while "lost" not in states and time.monotonic() < end:
            time.sleep(0.005)
        assert "lost" in states
    finally:
        reader.stop()
    assert not reader._thread.is_alive()


def test_reader_reports_an_absent_device_and_retries(tmp_path):
    states: list[tuple[str, str]] = []
    reader = HidrawReader(
        str(tmp_path / "hidraw9"), lambda t, r: None, lambda s, d: states.append((s, d)), reopen_s=0.02
    ).start()
    time.sleep(0.2)
    dev = FakeHidraw(tmp_path / "hidraw9")  # plugged in later
    end = time.monotonic() + 5
    while not any(s == "open" for s, _ in states) and time.monotonic() < end:
        time.sleep(0.005)
    reader.stop()
    dev.unplug()
    assert states[0][0] == "absent" and "No such file" in states[0][1]
    assert any(s == "open" for s, _ in states)


def test_a_device_that_never_blocks_is_closed_as_bad_not_spun_on():
    """/dev/zero as the device: every read returns at once. The reader stops after a second's worth of
    reports at most, reports why ("bad"), and waits before trying again: the process stays idle.
    """
    states: list[tuple[str, str]] = []
    reads = [0]

    def on_report(t, r):
        reads[0] += 1

    reader = HidrawReader(
        "/dev/zero", on_report, lambda s, d: states.append((s, d)), reopen_s=0.01, bad_retry_s=30.0
    ).start()
    try:
        end = time.monotonic() + 5
        while not any(s == "bad" for s, _ in states) and time.monotonic() < end:
            time.sleep(0.01)
        cpu0, n0 = time.process_time(), reads[0]
        time.sleep(1.0)
        cpu = time.process_time() - cpu0
    finally:
        reader.stop()
    bad = [d for s, d in states if s == "bad"]
    assert bad and "more than 1000 reports a second" in bad[0], states
    assert reads[0] == n0 <= 1001 and cpu < 0.2, (reads[0], n0, cpu)


def test_a_device_sending_only_malformed_reports_is_closed_as_bad_and_counted(tmp_path):
    dev = FakeHidraw(tmp_path / "hidraw5")
    sm = SpaceMouseInput(SpaceMouseConfig())
    states: list[tuple[str, str]] = []

    def on_state(state, detail):
        states.append((state, detail))
        sm.on_state(time.monotonic(), state, detail)

    reader = HidrawReader(dev.path, sm.on_report, on_state, reopen_s=0.01, bad_retry_s=30.0).start()
    try:
        end = time.monotonic() + 5
        while sm.device_state != "open" and time.monotonic() < end:
            time.sleep(0.005)
        for _ in range(20):  # a few refused reports between good ones: still the device
            dev.send(b"\x01\x00\x00")
        dev.send(trans(1, 2, 3))
        for _ in range(60):
            if any(s == "bad" for s, _ in states):
                break
            dev.send(b"\x01\x00\x00")  # a report 1 of no known length
        end = time.monotonic() + 5
        while sm.device_state != "bad" and time.monotonic() < end:
            time.sleep(0.005)
    finally:
        reader.stop()
        dev.unplug()
    assert [s for s, _ in states] == ["open", "bad"], states
    assert "50 malformed reports in a row" in states[1][1] and states[1][1].startswith(dev.path)
    assert sm.counters.bad_devices == 1 and sm.counters.drops["bad_length"] == 70
    assert sm.status()["device"] == "bad"


# ---- mapping through TeleopCore -------------------------------------------------------------------
ARM_P = np.array([0.3, 0.0, 0.25])
ARM_Q = np.array([0.0, 1.0, 0.0, 0.0])  # pointing down
DT = 0.01


class Rig:
    """SpaceMouseInput + TeleopCore at 100 Hz, an arm that reaches each target by the next tick."""

    def __init__(self, **sm):
        self.core = TeleopCore(TeleopConfig(), remap=np.eye(3))
        self.sm = SpaceMouseInput(SpaceMouseConfig(**sm))
        self.t = 100.0
        self.arm_p, self.arm_q = ARM_P.copy(), ARM_Q.copy()
        self.arm_alive = True
        self.sm.on_state(self.t, "open", "fake")
        self.results = []

    def report(self, r: bytes) -> None:
        self.sm.on_report(self.t, r)

    def run(self, seconds: float, every: bytes | None = None, report_period: float = 0.008):
        next_report = self.t
        for _ in range(round(seconds / DT)):
            while every is not None and next_report <= self.t:
                self.sm.on_report(next_report, every)
                next_report += report_period
            if self.arm_alive:
                self.core.on_arm_pose(self.t, self.arm_p, self.arm_q)
                self.core.on_joint_states(self.t, [0.0] * 7)
            res = self.sm.step(self.core, self.t)
            self.results.append(res)
            if res.target is not None:
                self.arm_p, self.arm_q = res.target.p.copy(), res.target.q.copy()
            self.t += DT

    def press(self, mask: int, hold_s: float = 0.05) -> None:
        self.report(buttons(mask))
        self.run(hold_s)
        self.report(buttons(0))
        self.run(0.02)


def test_pushing_the_cap_away_moves_the_flange_forward_at_the_configured_speed():
    rig = Rig()
    rig.report(trans(0, 0, 0))
    rig.run(0.1)
    rig.press(1)  # clutch button: engage
    assert rig.core.engaged
    start = rig.arm_p.copy()
    rig.run(1.0, every=trans(0, -350, 0))  # full deflection away from the user for 1 s
    rig.report(trans(0, 0, 0))
    rig.run(0.5)  # settle the one-euro filter
    moved = rig.arm_p - start
    assert moved[0] == pytest.approx(0.1, abs=0.01)  # 0.1 m/s for 1 s, forward (+x)
    assert abs(moved[1]) < 1e-6 and abs(moved[2]) < 1e-6
    assert angle_between(rig.arm_q, ARM_Q) < 1e-6


@pytest.mark.parametrize(
    "report,axis,sign",
    [
        (trans(350, 0, 0), 1, -1),  # right -> -y (the arm's right)
        (trans(0, 0, -350), 2, +1),  # lift -> up
        (trans(0, 350, 0), 0, -1),
    ],
)  # pull -> back
def test_each_axis_maps_into_the_arm_base(report, axis, sign):
    rig = Rig()
    rig.press(1)
    start = rig.arm_p.copy()
    rig.run(0.5, every=report)
    rig.report(trans(0, 0, 0))
    rig.run(0.5)
    moved = rig.arm_p - start
    assert sign * moved[axis] == pytest.approx(0.05, abs=0.008)
    assert np.abs(np.delete(moved, axis)).max() < 1e-6


def test_twisting_the_cap_yaws_the_flange_and_single_layout_works():
    rig = Rig()
    rig.press(1)
    rig.run(0.5, every=single(0, 0, 0, 0, 0, -350))  # counter-clockwise seen from above: right-handed about -z
    rig.report(single(0, 0, 0, 0, 0, 0))
    rig.run(0.5)
    assert angle_between(rig.arm_q, ARM_Q) == pytest.approx(0.4, abs=0.05)  # 0.8 rad/s for 0.5 s
    r = rig.core.M @ np.eye(3)  # identity remap: the flange's rotation is about the base z axis
    assert np.allclose(r, np.eye(3))
    from piper_recorder.teleop.rotations import quat_conj, quat_mul

    d = quat_mul(rig.arm_q, quat_conj(ARM_Q))  # base-frame delta
    assert d[2] * np.sign(d[3]) > 0 and abs(d[0]) < 1e-6 and abs(d[1]) < 1e-6
    assert np.allclose(rig.arm_p, ARM_P, atol=1e-9)


def test_released_clutch_means_no_motion_and_deadband_holds_still():
    rig = Rig()
    rig.run(0.5, every=trans(0, -350, 0))  # pushed, clutch never engaged
    assert all(r.target is None for r in rig.results)
    rig.report(trans(0, 0, 0))  # let go of the cap, then engage
    rig.press(1)
    start = rig.arm_p.copy()
    rig.run(0.5, every=trans(20, -30, 15))  # a resting cap's few counts: inside the deadband
    assert np.allclose(rig.arm_p, start, atol=1e-9)
    rig.press(1)  # clutch off
    assert not rig.core.engaged
    n = len(rig.results)
    rig.run(0.5, every=trans(0, -350, 0))
    assert all(r.target is None for r in rig.results[n:])


def test_garbage_reports_are_dropped_and_counted_and_a_silent_device_stops():
    rig = Rig()
    rig.press(1)
    start = rig.arm_p.copy()
    for bad in (struct.pack("<B3h", 1, 0, -32767, 0), b"\x01\x00", rot(0, 0, 0) + b"\xff"):
        rig.report(bad)
    rig.run(0.3)
    assert np.allclose(rig.arm_p, start, atol=1e-9)
    assert rig.sm.counters.drops == {"out_of_range": 1, "bad_length": 2}
    # one deflection report, then silence: taken as rest after report_timeout_s (0.25 s)
    rig.report(trans(0, -350, 0))
    rig.run(1.0)
    assert rig.sm.counters.stalls == 1
    assert rig.arm_p[0] - start[0] == pytest.approx(0.025, abs=0.004)  # 0.1 m/s for 0.25 s only


def test_gripper_toggles_on_a_short_press_and_a_hold_starts_and_stops_an_episode():
    rig = Rig()
    rig.press(1)
    rig.press(2)  # short press of the right button: close
    assert [r.gripper for r in rig.results if r.target is not None][-1] == 0.0
    rig.press(1)
    rig.press(1)  # a clutch cycle keeps the gripper closed
    assert [r.gripper for r in rig.results if r.target is not None][-1] == 0.0
    rig.press(2)  # open again
    assert [r.gripper for r in rig.results if r.target is not None][-1] == pytest.approx(0.07)
    assert not any(r.actions for r in rig.results)
    n = len(rig.results)
    rig.press(2, hold_s=1.2)  # hold: start, and no gripper toggle
    assert [a for r in rig.results[n:] for a in r.actions] == [Action.START]
    assert rig.sm.counters.gripper_toggles == 2 and not rig.sm.gripper_closed  # the hold toggled nothing
    rig.core.on_recording(True)
    n = len(rig.results)
    rig.press(2, hold_s=1.2)
    assert [a for r in rig.results[n:] for a in r.actions] == [Action.STOP]


def test_discard_button_when_configured():
    rig = Rig(discard_button=2)
    rig.press(4)
    assert [a for r in rig.results for a in r.actions] == [Action.DISCARD]


def test_lost_arm_feedback_or_device_releases_and_needs_a_new_press():
    rig = Rig()
    rig.press(1)
    rig.arm_alive = False
    rig.run(1.0, every=trans(0, -350, 0))
    assert any(r.clutch is ClutchEvent.FORCED_RELEASE for r in rig.results)
    assert not rig.core.engaged and not rig.sm.clutch_on
    rig.arm_alive = True
    rig.run(0.3)
    assert not rig.core.engaged  # never re-engages by itself
    rig.press(1)
    assert rig.core.engaged
    rig.sm.on_state(rig.t, "lost", "unplugged")  # unplugged: the core goes stale and releases
    n = len(rig.results)
    rig.run(0.5)
    assert not rig.core.engaged
    assert any(r.clutch is ClutchEvent.FORCED_RELEASE and "stale" in (r.reason or "") for r in rig.results[n:])
    assert rig.sm.counters.disconnects == 1
    rig.sm.on_state(rig.t, "open", "plugged in again")
    rig.run(0.3, every=trans(0, -350, 0))
    assert not rig.core.engaged  # not by itself after a reconnect either
    rig.press(1)  # one press engages again
    assert rig.core.engaged


def test_pushing_into_the_workspace_wall_winds_nothing_up():
    rig = Rig()
    rig.arm_p = np.array([0.5, 0.0, 0.25])  # 5 cm from the +x wall (0.55)
    rig.press(1)
    rig.run(3.0, every=trans(0, -350, 0))  # 30 cm of push against the wall
    assert rig.arm_p[0] == pytest.approx(0.55, abs=1e-6)
    rig.run(1.0, every=trans(0, 350, 0))  # pull back for 1 s: 10 cm at once, not after 25 cm
    rig.report(trans(0, 0, 0))
    rig.run(0.5)
    assert rig.arm_p[0] == pytest.approx(0.45, abs=0.015)
    assert math.isfinite(float(np.linalg.norm(rig.sm.p))) and np.linalg.norm(rig.sm.p) < 0.2


def test_config_is_validated():
    for bad in (
        {"deadband": 1.0},
        {"linear_speed": 0.0},
        {"gripper_button": 0},
        {"discard_button": 1},
        {"report_timeout_s": float("nan")},
        {"clutch_button": 64},
    ):
        with pytest.raises(ValueError):
            SpaceMouseConfig(**bad).validate()
    with pytest.raises(ValueError):
        TeleopCore(TeleopConfig(), remap=np.diag([1.0, 1.0, -1.0]))


# ---- launch --------------------------------------------------------------------------------------
def test_teleop_input_spacemouse_starts_no_headset_node(tmp_path):
    from piper_recorder.graph.errors import LaunchError
    from piper_recorder.graph.graph_node import launch_graph
    from piper_recorder.graph.install import config_path
    from piper_recorder.graph.plan import plan_graph
    from piper_recorder.params.params_file import read_params_file

    plan = plan_graph(
        "sim", config_path("sim"), ["teleop.spacemouse.device=/dev/hidraw3"], tmp_path, teleop_input="spacemouse"
    )
    names = [p.name for p in plan.processes]
    assert "teleop" in names and "piper_arm" in names and "lerobot_recorder" in names
    assert not {"sim_quest", "quest_bridge", "quest_video"} & set(names)
    params = read_params_file(plan.params_file)["teleop"]
    assert params["input"] == "spacemouse" and params["spacemouse.device"] == "/dev/hidraw3"
    # the same through --set alone, and through the launch files' entry point
    via_set = plan_graph("robot", config_path("robot"), ["teleop.input=spacemouse"], tmp_path / "r")
    assert not {"quest_bridge", "quest_video"} & {p.name for p in via_set.processes}
    nodes = launch_graph("sim", config_path("sim"), teleop_input="spacemouse")
    assert not {"sim_quest", "quest_bridge", "quest_video"} & {n.name for n in nodes}
    assert next(n for n in nodes if n.name == "teleop").parameters["input"] == "spacemouse"
    assert {"sim_quest", "quest_bridge"} <= {n.name for n in launch_graph("sim", config_path("sim"))}
    with pytest.raises(LaunchError, match="teleop_input"):
        launch_graph("sim", config_path("sim"), teleop_input="joystick")


def test_unplugging_the_device_releases_at_once_through_the_session():
    """A device lost or plugged in again is a change of input source: the session releases the clutch
    at that moment (not a stale stream later) and the next engage needs a fresh press.
    """
    from piper_recorder.teleop.haptics import HapticConfig
    from piper_recorder.teleop.session import TeleopNodeConfig, TeleopSession

    now = [100.0]
    sm = SpaceMouseInput(SpaceMouseConfig())
    session = TeleopSession(
        TeleopConfig(), TeleopNodeConfig(input="spacemouse"), HapticConfig(), sm, clock=lambda: now[0]
    )
    session.on_spacemouse_state("open", "fake")

    def tick(n: int = 1):
        out = []
        for _ in range(n):
            session.on_arm_pose(list(ARM_P), list(ARM_Q))
            session.on_joints([0.0] * 7)
            out.append(session.tick().result)
            now[0] += DT
        return out

    tick(5)
    for mask in (1, 0):
        session.on_spacemouse_report(now[0], buttons(mask))
        tick(3)
    assert session.core.engaged
    session.on_spacemouse_state("lost", "unplugged")
    (res,) = tick()
    assert res.clutch is ClutchEvent.FORCED_RELEASE and res.reason == "spacemouse lost", res
    assert session.core.counters.source_changes == 2  # plugged in (at start), then unplugged
    session.on_spacemouse_state("absent", "retrying")  # no change of source: nothing more
    assert session.core.counters.source_changes == 2

"""The emulator's tick without its thread (no ROS, no wall clock): the scalar dynamics and gravity against
their numpy formulation, and the feedback frames of a tick as one ordered hand-over on the direct virtual
bus (vbus.DirectVirtualBus: SimpleQueue receivers, send_frames, recv).
"""

from __future__ import annotations

import queue
import struct
import threading
import uuid

import can
import numpy as np
from can.interfaces.virtual import VirtualBus

from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.emulator import EmulatorConfig, PiperEmulator
from piper_recorder.piper.vbus import DirectVirtualBus, make_direct
from piper_recorder.piper.wire import (
    ID_GRIPPER,
    ID_HIGH_SPD,
    ID_JOINTS,
    ID_LOW_SPD,
    ID_POSE,
    ID_STATUS,
    MOVE_J,
    MitCommand,
)

RNG = np.random.default_rng(11)


def ref_gravity(emu: PiperEmulator, q: np.ndarray) -> np.ndarray:
    f = kin.frames_array(q)
    p, z = f[:, :2, 3], f[:, :2, 2]
    m = np.array(emu.cfg.link_masses)
    mass_from = np.cumsum(m[::-1])[::-1]
    moment_from = np.cumsum((m[:, None] * p)[::-1], axis=0)[::-1]
    c = moment_from - mass_from[:, None] * p
    return 9.81 * (z[:, 0] * c[:, 1] - z[:, 1] * c[:, 0])


def ref_step(
    emu: PiperEmulator, q: np.ndarray, dq: np.ndarray, q_target: np.ndarray, dt: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The vectorised dynamics: (q, dq, tau_out) after one tick of dt."""
    cfg, lo, hi = emu.cfg, emu.q_min, emu.q_max
    grav = ref_gravity(emu, q)
    if emu.enabled and emu.mit:
        inertia, fric, gain = np.array(cfg.inertia), np.array(cfg.friction), np.array(emu.dialect.torque_gain)
        h, tau = dt / cfg.substeps, np.zeros(6)
        q, dq = q.copy(), dq.copy()
        for _ in range(cfg.substeps):
            tau = grav - 2.0 * dq
            for i, c in enumerate(emu.mit_cmd):
                if c is not None:
                    tau[i] = c.kp * (c.pos - q[i]) + c.kd * (c.vel - dq[i]) + c.t_ff * gain[i]
            dq += (tau - grav - fric * dq) / inertia * h
            q += dq * h
            hit = (q < lo) | (q > hi)
            q = np.clip(q, lo, hi)
            dq[hit] = 0.0
        return q, dq, tau
    vmax = cfg.max_joint_speed * emu.speed_pct / 100.0
    v = np.clip((q_target - q) / max(cfg.tau, dt), -vmax, vmax)
    return np.clip(q + v * dt, lo, hi), v, grav


def test_gravity_equals_the_vectorised_sum():
    emu = PiperEmulator("unused")
    for q in RNG.uniform(kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX, size=(200, 6)):
        assert np.abs(emu.gravity(q) - ref_gravity(emu, q)).max() < 1e-12


def test_position_and_mit_steps_equal_the_vectorised_dynamics():
    for mit in (False, True):
        emu = PiperEmulator("unused", EmulatorConfig(q_init=[0.0, 0.9, -0.9, 0.0, 0.5, 0.0]))
        emu.enabled, emu.ctrl_mode, emu.move_mode, emu.mit, emu.speed_pct = True, 0x01, MOVE_J, mit, 70
        for k in range(300):
            if k % 20 == 0:  # new targets / MIT frames, some beyond the joint limits; one joint without a frame
                emu.q_target = np.clip(emu.q + RNG.normal(0, 0.5, 6), emu.q_min, emu.q_max)
                emu.mit_cmd = [
                    None
                    if i == 4 and k < 100
                    else MitCommand(
                        float(emu.q[i] + RNG.normal(0, 1.0)),
                        float(RNG.normal(0, 0.5)),
                        float(RNG.uniform(0, 30)),
                        float(RNG.uniform(0, 2)),
                        float(RNG.normal(0, 1)),
                    )
                    for i in range(6)
                ]
            dt = 0.005 + float(RNG.uniform(-0.002, 0.003))
            want = ref_step(emu, emu.q, emu.dq, emu.q_target, dt)
            emu._step(dt)
            for got, ref in zip((emu.q, emu.dq, emu.tau_out), want):
                assert isinstance(got, np.ndarray) and np.abs(got - ref).max() < 1e-12, (mit, k)


def _tick_frames(emu: PiperEmulator, rx: VirtualBus) -> list[can.Message]:
    emu._send_feedback()
    emu.ticks += 1
    out = []
    while (m := rx.recv(0.0)) is not None:
        out.append(m)
    return out


def test_a_tick_sends_its_frame_set_in_order_with_one_stamp_to_each_reader():
    ch = f"tick-{uuid.uuid4().hex[:8]}"
    emu = PiperEmulator(ch, EmulatorConfig(q_init=[0.1, 0.9, -0.9, 0.2, 0.5, -0.3]))
    emu._bus = DirectVirtualBus(channel=ch)
    rx1, rx2 = VirtualBus(channel=ch), VirtualBus(channel=ch)  # a plain python-can reader too
    make_direct(rx1)
    try:
        emu.enabled, emu.gripper = True, 0.0321
        sets = [_tick_frames(emu, rx1) for _ in range(10)]
        assert [m.arbitration_id for m in sets[0]] == [
            ID_STATUS,
            *ID_POSE,
            *ID_JOINTS,
            ID_GRIPPER,
            *ID_HIGH_SPD,
            *ID_LOW_SPD,
        ]  # tick 0: every kind
        assert [m.arbitration_id for m in sets[1]] == [ID_STATUS, *ID_POSE, *ID_JOINTS, ID_GRIPPER]
        assert [len(s) for s in sets] == [20, 8, 14, 8, 14, 8, 14, 8, 14, 8]  # motor 100 Hz, low speed 20 Hz
        for s in sets:
            assert len({m.timestamp for m in s}) == 1 and all(m.is_rx and not m.is_extended_id for m in s)
        first = sets[-1]
        second = [rx2.recv(0.0) for _ in range(sum(len(s) for s in sets))][-len(first) :]
        assert [(m.arbitration_id, bytes(m.data)) for m in second] == [(m.arbitration_id, bytes(m.data)) for m in first]
        assert all(a is not b for a, b in zip(first, second))  # each reader its own messages
        # the values: joints in 0.001 deg, the flange pose of their FK
        q = emu.q.tolist()
        by_id = {m.arbitration_id: bytes(m.data) for m in first}
        joints = [v for fid in ID_JOINTS for v in struct.unpack(">ii", by_id[fid])]
        assert joints == [round(np.degrees(v) * 1000) for v in q]
        x, y = struct.unpack(">ii", by_id[ID_POSE[0]])
        assert (x, y) == tuple(round(v * 1e6) for v in kin.fk(np.array(q))[:2, 3])
        assert struct.unpack(">ihBB", by_id[ID_GRIPPER])[0] == 32100
    finally:
        for b in (emu._bus, rx1, rx2):
            b.shutdown()


def test_direct_bus_receive_queue_keeps_what_was_pending_and_times_out():
    ch = f"q-{uuid.uuid4().hex[:8]}"
    tx, rx = DirectVirtualBus(channel=ch), VirtualBus(channel=ch)
    try:
        tx.send_frames([(0x2A1, bytes(8)), (0x2A2, bytes(range(8)))])  # queued before rx becomes direct
        assert isinstance(rx.queue, queue.Queue) and make_direct(rx) and isinstance(rx.queue, queue.SimpleQueue)
        tx.send_frames([(0x2A3, b"\x01" * 8)])
        got = [rx.recv(0.5) for _ in range(3)]
        assert [m.arbitration_id for m in got] == [0x2A1, 0x2A2, 0x2A3] and bytes(got[1].data) == bytes(range(8))
        assert rx.recv(0.01) is None and tx.recv(0.0) is None  # a timeout; never its own frames
        rx.set_filters([{"can_id": 0x2A5, "can_mask": 0x7FF}])  # with filters: python-can's own loop
        tx.send_frames([(0x2A4, bytes(8)), (0x2A5, bytes(8))])
        m = rx.recv(0.5)
        assert m is not None and m.arbitration_id == 0x2A5
    finally:
        tx.shutdown()
        rx.shutdown()


def test_direct_bus_polls_an_emptied_queue_without_hanging():
    """A poll (timeout 0) right after the queue was emptied: Python 3.10's SimpleQueue.get(True, 0)
    hung there in most such runs; busy threads make the interpreter's pauses that expose it. The
    polling runs in a daemon thread so that a hang fails the test instead of stopping the suite.
    """
    ch = f"drain-{uuid.uuid4().hex[:8]}"
    tx, rx = DirectVirtualBus(channel=ch), DirectVirtualBus(channel=ch)
    stop, polled = threading.Event(), []

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    def drain() -> None:
        for _ in range(100_000):
            tx.send_frames([(0x2A1, bytes(8))])
            if rx.recv(0.0) is None or rx.recv(0.0) is not None:
                return
        polled.append(True)

    workers = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
    poller = threading.Thread(target=drain, daemon=True)
    try:
        for t in [*workers, poller]:
            t.start()
        poller.join(30.0)
        assert not poller.is_alive(), "recv(0.0) blocked"
        assert polled == [True]
    finally:
        stop.set()
        if not poller.is_alive():
            tx.shutdown()
            rx.shutdown()

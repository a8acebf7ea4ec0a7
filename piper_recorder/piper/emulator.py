"""CAN-level emulator of the Piper arm firmware: a python-can ``virtual`` bus peer for piper_sdk.

It speaks the V2 protocol byte for byte (its own encoder/decoder, so tests where piper_sdk decodes
our frames and we decode piper_sdk's frames prove the frame ids and scaling independently):

feedback (sent)   0x2A1 status, 0x2A2-0x2A4 end pose, 0x2A5-0x2A7 joints, 0x2A8 gripper: ~200 Hz;
                  0x251-0x256 motor high-speed (speed, current, position): ~100 Hz;
                  0x261-0x266 motor low-speed (voltage, temps, driver status): ~20 Hz;
                  0x4AF firmware string in reply to a 0x4AF query.
commands (parsed) 0x471 enable/disable, 0x151 MotionCtrl_2, 0x152-0x154 EndPoseCtrl (own IK: closed form, as AgileX
                  describes the firmware's, ``kinematics.ik``),
                  0x155-0x157 JointCtrl, 0x159 GripperCtrl, 0x15A-0x15F JointMitCtrl.

Dynamics: in position modes (P/J) each joint moves first-order toward its target, rate-limited by the
speed percentage; in MIT mode each joint is a rigid body driven by the sent PD law
``kp (p_ref - q) + kd (v_ref - dq) + t_ref`` against a point-mass gravity model, so a host-side
gravity feed-forward measurably matters. Joint limits always clamp. Reported motor currents are
the holding torques (gravity in position mode, the PD torque in MIT mode), converted with the
SDK's torque coefficients.

Firmware: ``EmulatorConfig.firmware`` is the version string it reports, and it reads MIT frames the
way that release does (``firmware.mit_dialect``): the SDK's 8-bit frame with its check, or from
S-V1.8-8 the 12-bit torque without one (MIT entered with move mode 0x06, 0x04 accepted too: whether
1.8-8 still honours 0x04 is not reported); S-V1.7-3..1.8-2 apply 4x the torque field on joints 1-3
and report 4x their torque. An empty string: no reply to the version query.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from dataclasses import dataclass, field

import can
import numpy as np

from . import kinematics as kin
from .firmware import mit_dialect
from .vbus import DirectVirtualBus
from .wire import (
    ID_ENABLE,
    ID_FIRMWARE,
    ID_GRIPPER,
    ID_GRIPPER_CTRL,
    ID_HIGH_SPD,
    ID_JOINT_CTRL,
    ID_JOINTS,
    ID_LOW_SPD,
    ID_MIT_CTRL,
    ID_MOTION_CTRL_2,
    ID_POSE,
    ID_POSE_CTRL,
    ID_STATUS,
    MIT_FLAG,
    MOVE_J,
    MOVE_L,
    MOVE_M,
    MOVE_MIT,
    MOVE_P,
    TORQUE_COEF,
    MitCommand,
    decode_mit,
)


@dataclass
class EmulatorConfig:
    """The emulated arm: firmware release, feedback rates, servo and rigid-body model (SI units)."""

    # a release whose MIT frame is the SDK's as documented (firmware.py); set another to emulate its dialect
    firmware: str = "S-V1.8-5"
    feedback_hz: float = 200.0
    high_spd_every: int = 2  # motor high-speed frames every N feedback ticks (100 Hz)
    low_spd_every: int = 10  # low-speed every N ticks (20 Hz)
    q_init: list[float] = field(default_factory=lambda: [0.0] * 6)
    q_min: list[float] = field(default_factory=lambda: kin.SDK_JOINT_MIN.tolist())
    q_max: list[float] = field(default_factory=lambda: kin.SDK_JOINT_MAX.tolist())
    max_joint_speed: float = 3.0  # rad/s at speed 100 %
    tau: float = 0.02  # s, first-order time constant of the position servo
    gripper_speed: float = 0.15  # m/s
    inertia: list[float] = field(default_factory=lambda: [0.06, 0.20, 0.08, 0.01, 0.01, 0.005])
    friction: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.1, 0.02, 0.02, 0.01])  # N m s/rad
    # point masses (kg) at the origins of frames 3..6 (elbow, forearm, wrist, flange)
    link_masses: list[float] = field(default_factory=lambda: [0.0, 0.0, 1.0, 0.4, 0.25, 0.15])
    substeps: int = 4


class PiperEmulator:
    """Firmware stand-in on ``can.Bus(interface="virtual", channel=channel)``; ``start()``/``stop()``."""

    def __init__(self, channel: str, config: EmulatorConfig | None = None):
        self.cfg = config or EmulatorConfig()
        self.channel = channel
        self.dialect = mit_dialect(self.cfg.firmware)  # how this firmware reads JointMitCtrl
        self._lock = threading.Lock()
        self.q = np.array(self.cfg.q_init, dtype=float)
        self.dq: np.ndarray = np.zeros(6)
        self.q_min, self.q_max = np.array(self.cfg.q_min), np.array(self.cfg.q_max)
        self._q_lo, self._q_hi = self.q_min.tolist(), self.q_max.tolist()  # for the tick's scalar math
        self.q_target = self.q.copy()
        self.tau_out: np.ndarray = np.zeros(6)
        self.enabled = False
        self.ctrl_mode = 0x00  # 0 standby, 1 CAN command
        self.move_mode = MOVE_P
        self.mit = False
        self.speed_pct = 50
        self.arm_status = 0x00  # 0 normal, 2 no IK solution
        self.gripper = 0.0
        self.gripper_target = 0.0
        self.gripper_effort = 0.0
        self.gripper_enabled = False
        self.mit_cmd: list[MitCommand | None] = [None] * 6
        self._pose_cmd = [0, 0, 0, 0, 0, 0]
        self.rx_counts: dict[int, int] = {}
        self.rx_log: list[can.Message] = []  # every frame received, for round-trip tests
        self.log_rx = False
        self.bad_crc = 0
        self.ik_failures = 0
        self.silent = False  # True: neither send nor answer (cable pulled)
        self._pending: list[tuple[float, int, bytes]] = []
        self._bus: DirectVirtualBus | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.ticks = 0
        self._masses = [float(m) for m in self.cfg.link_masses]
        self._fk_cache: tuple[list[float], list[kin.Frame]] | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> PiperEmulator:
        """Open the virtual bus and run the firmware loop on a daemon thread; returns the emulator."""
        self._bus = DirectVirtualBus(channel=self.channel, receive_own_messages=False)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"piper-emu-{self.channel}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop and close the bus."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._bus is not None:
            self._bus.shutdown()
            self._bus = None

    def __enter__(self) -> PiperEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_silent(self, silent: bool) -> None:
        """Simulate a dead link: no feedback out; commands are still counted but not acted on."""
        self.silent = silent

    def joints(self) -> np.ndarray:
        """The emulated joint positions now (rad), a copy."""
        with self._lock:
            return self.q.copy()

    # ------------------------------------------------------------ loop
    def _run(self) -> None:
        period = 1.0 / self.cfg.feedback_hz
        next_t = time.monotonic()
        last = next_t
        while not self._stop.is_set():
            self._drain()
            now = time.monotonic()
            dt = min(now - last, 0.05)
            last = now
            with self._lock:
                self._step(dt)
            if not self.silent:
                self._send_feedback()
            self.ticks += 1
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -0.1:  # overloaded machine: do not try to catch up with a burst
                next_t = time.monotonic()
            elif delay > 0:
                # time.sleep, not Event.wait: at most one period (the loop then sees the stop flag), and
                # without the Python-level Condition/lock per tick that Event.wait costs 200 times a second
                time.sleep(delay)

    def _drain(self) -> None:
        assert self._bus is not None
        # python-can's own recv(timeout=0) raises and catches queue.Empty per call; this thread is the
        # queue's only reader, so a queue that is not empty has a frame for get_nowait
        inbox, counts = self._bus.queue, self.rx_counts
        if not inbox.empty():
            with self._lock:
                while not inbox.empty():
                    msg = inbox.get_nowait()
                    fid = msg.arbitration_id
                    counts[fid] = counts.get(fid, 0) + 1
                    if self.log_rx:
                        self.rx_log.append(msg)
                    if not self.silent:
                        self._handle(fid, bytes(msg.data))
        if self._pending:
            now = time.monotonic()
            due = [p for p in self._pending if p[0] <= now]
            self._pending = [p for p in self._pending if p[0] > now]
            for _, fid, data in due:
                self._send(fid, data)

    # ------------------------------------------------------------ command decoding
    def _handle(self, fid: int, d: bytes) -> None:
        if fid == ID_ENABLE:
            motor, flag = d[0], d[1]
            if motor in (7, 0xFF):  # 7 = all joints (+gripper on 0xFF)
                self.enabled = flag == 0x02
                if self.enabled:
                    self.q_target = self.q.copy()
                    self.dq[:] = 0.0
        elif fid == ID_MOTION_CTRL_2:
            self.ctrl_mode, self.move_mode, self.speed_pct = d[0], d[1], max(1, min(100, d[2]))
            mit_modes = (MOVE_M, MOVE_MIT) if self.dialect.frame == "raw12" else (MOVE_M,)
            mit = d[3] == MIT_FLAG and self.move_mode in mit_modes
            if mit and not self.mit:
                self.mit_cmd = [None] * 6
            if not mit and self.mit:
                self.q_target = self.q.copy()  # leaving MIT: hold where we are
                self.dq[:] = 0.0
            self.mit = mit
        elif fid in ID_POSE_CTRL:
            i = ID_POSE_CTRL.index(fid)
            a, b = struct.unpack(">ii", d)
            self._pose_cmd[2 * i], self._pose_cmd[2 * i + 1] = a, b
            if fid == ID_POSE_CTRL[-1] and self._accepts(MOVE_P, MOVE_L):
                self._pose_target()
        elif fid in ID_JOINT_CTRL:
            i = ID_JOINT_CTRL.index(fid)
            a, b = struct.unpack(">ii", d)
            if self._accepts(MOVE_J):
                self.q_target[2 * i] = np.radians(a / 1000.0)
                self.q_target[2 * i + 1] = np.radians(b / 1000.0)
                self.q_target = np.clip(self.q_target, self.q_min, self.q_max)
        elif fid == ID_GRIPPER_CTRL:
            width, effort = struct.unpack(">iH", d[:6])
            code = d[6]
            self.gripper_enabled = code in (0x01, 0x03)
            if self.gripper_enabled:
                self.gripper_target = float(np.clip(width / 1e6, 0.0, 0.08))
                self.gripper_effort = effort / 1000.0
        elif fid in ID_MIT_CTRL:
            cmd = decode_mit(d, self.dialect.frame, self.dialect.t_range)
            if cmd is None:
                self.bad_crc += 1
            elif self.mit:
                self.mit_cmd[ID_MIT_CTRL.index(fid)] = cmd
        elif fid == ID_FIRMWARE and d[0] == 0x01:
            # answer after a few ms like the real controller (the SDK clears its buffer after sending)
            due = time.monotonic() + 0.01
            blob = self.cfg.firmware.encode()
            blob += b"\x00" * (-len(blob) % 8)
            for k in range(0, len(blob), 8):
                self._pending.append((due, ID_FIRMWARE, blob[k : k + 8]))

    def _accepts(self, *modes: int) -> bool:
        return self.enabled and self.ctrl_mode == 0x01 and not self.mit and self.move_mode in modes

    def _pose_target(self) -> None:
        x, y, z, rx, ry, rz = self._pose_cmd
        rad = math.radians
        t = kin.frame_matrix(
            kin.euler_rot(rad(rx / 1000.0), rad(ry / 1000.0), rad(rz / 1000.0)) + (x / 1e6, y / 1e6, z / 1e6)
        )
        res = kin.ik(t, self.q_target, self.q_min, self.q_max, max_iter=40)
        if not res.ok(1e-3, 1e-2):
            res = kin.ik(t, self.q, self.q_min, self.q_max, max_iter=60)
        if res.ok(1e-3, 1e-2):
            self.q_target = res.q
            self.arm_status = 0x00
        else:
            self.ik_failures += 1
            self.arm_status = 0x02  # "no solution"; keep the previous target

    # ------------------------------------------------------------ dynamics
    # Scalar float math on the six joints (state kept in the public ndarrays): numpy's per-call dispatch
    # cost more than the arithmetic, 200 times a second; each joint's update is the same IEEE operations.
    def gravity(self, q: np.ndarray) -> np.ndarray:
        """Joint torques needed to hold q against gravity (point masses at frame origins), N m."""
        return np.array(self._gravity(self._frames([float(v) for v in np.asarray(q, dtype=float)[:6].tolist()])))

    def _gravity(self, frames: list[kin.Frame]) -> list[float]:
        """Holding torques from the link frames, accumulated from the flange inwards.

        tau_i = z_i . (c_i x (-g)) with c_i = sum_{k >= i} m_k (p_k - o_i); for g along -z this is
        9.81 (z_ix c_iy - z_iy c_ix).
        """
        tau = [0.0] * 6
        mass = mx = my = 0.0
        for i in range(5, -1, -1):
            f, m = frames[i], self._masses[i]
            px, py = f[9], f[10]
            mass += m
            mx += m * px
            my += m * py
            cx, cy = mx - mass * px, my - mass * py
            tau[i] = 9.81 * (f[2] * cy - f[5] * cx)
        return tau

    def _frames(self, q: list[float]) -> list[kin.Frame]:
        """``kin.chain(q)``, kept for the newest q.

        A tick's feedback FK and the next tick's gravity see the same joints, so each tick builds the link
        frames once instead of twice.
        """
        cached = self._fk_cache
        if cached is None or cached[0] != q:
            cached = self._fk_cache = (list(q), kin.chain(q))  # a copy: callers go on to change q
        return cached[1]

    def _step(self, dt: float) -> None:
        if dt <= 0.0:
            return
        q = self.q.tolist()
        grav = self._gravity(self._frames(q))
        lo, hi = self._q_lo, self._q_hi
        if self.enabled and self.mit:
            inertia, fric, gain = self.cfg.inertia, self.cfg.friction, self.dialect.torque_gain
            n = self.cfg.substeps
            h = dt / n
            dq = self.dq.tolist()
            tau = [0.0] * 6
            for i in range(6):  # the joints are independent within a step (gravity is held for it)
                c, g, qi, vi = self.mit_cmd[i], grav[i], q[i], dq[i]
                t = 0.0
                for _ in range(n):
                    if c is not None:
                        t = c.kp * (c.pos - qi) + c.kd * (c.vel - vi) + c.t_ff * gain[i]
                    else:
                        t = g - 2.0 * vi  # a joint without an MIT frame yet keeps holding itself
                    vi += (t - g - fric[i] * vi) / inertia[i] * h
                    qi += vi * h
                    if qi < lo[i] or qi > hi[i]:
                        vi = 0.0
                    qi = min(max(qi, lo[i]), hi[i])
                q[i], dq[i], tau[i] = qi, vi, t
            self.q, self.dq, self.tau_out = np.array(q), np.array(dq), np.array(tau)
        elif self.enabled and self.ctrl_mode == 0x01:
            vmax = self.cfg.max_joint_speed * self.speed_pct / 100.0
            k = max(self.cfg.tau, dt)
            v = [min(max((t - x) / k, -vmax), vmax) for t, x in zip(self.q_target.tolist(), q)]
            self.q = np.array([min(max(x + vi * dt, a), b) for x, vi, a, b in zip(q, v, lo, hi)])
            self.dq = np.array(v)
            self.tau_out = np.array(grav)
        else:
            self.dq[:] = 0.0
            self.tau_out = np.array(grav) if self.enabled else np.zeros(6)
        if self.gripper_enabled and self.enabled:
            step = self.cfg.gripper_speed * dt
            self.gripper += min(max(self.gripper_target - self.gripper, -step), step)

    # ------------------------------------------------------------ feedback encoding
    def _send(self, fid: int, data: bytes) -> None:
        self._send_all([(fid, data)])

    def _send_all(self, frames: list[tuple[int, bytes]]) -> None:
        """One tick's frames in order, as one hand-over to each reader (``DirectVirtualBus.send_frames``)."""
        if self._bus is None:
            return
        try:
            self._bus.send_frames(frames)
        except can.CanError:
            pass

    def _send_feedback(self) -> None:
        with self._lock:
            q, dq, tau = self.q.tolist(), self.dq.tolist(), self.tau_out.tolist()
            if self.mit:
                moving = max(abs(v) for v in dq) > 1e-3
            else:
                moving = max(abs(t - x) for t, x in zip(self.q_target.tolist(), q)) > 1e-3
            status = _STATUS.pack(
                self.ctrl_mode if self.enabled else 0x00,
                self.arm_status,
                self.move_mode,
                0,
                int(moving),
                0,
                self._limit_bits(q),
            )
            gripper = _GRIPPER.pack(
                round(self.gripper * 1e6),
                int(min(max(self.gripper_effort * 1000, -32768), 32767)),
                0x40 * (self.gripper_enabled and self.enabled) | 0x80,
                0,
            )
            enabled = self.enabled
        t = self._frames(q)[-1]
        x, y, z = (round(v * 1e6) for v in t[9:12])
        rx, ry, rz = (round(math.degrees(v) * 1000) for v in kin.rot_euler(t))
        j = [round(math.degrees(v) * 1000) for v in q]
        pack = _I2.pack
        frames = [
            (ID_STATUS, status),
            (ID_POSE[0], pack(x, y)),
            (ID_POSE[1], pack(z, rx)),
            (ID_POSE[2], pack(ry, rz)),
            (ID_JOINTS[0], pack(j[0], j[1])),
            (ID_JOINTS[1], pack(j[2], j[3])),
            (ID_JOINTS[2], pack(j[4], j[5])),
            (ID_GRIPPER, gripper),
        ]
        if self.ticks % self.cfg.high_spd_every == 0:
            gain = self.dialect.effort_gain
            for i, fid in enumerate(ID_HIGH_SPD):
                current = max(-32768, min(32767, round(tau[i] * gain[i] * 1000.0 / _TORQUE_COEF[i])))
                speed = max(-32768, min(32767, round(dq[i] * 1000.0)))
                frames.append((fid, _HHI.pack(speed, current, round(q[i] * 1000.0))))
        if self.ticks % self.cfg.low_spd_every == 0:
            low = _LOW_SPD_ON if enabled else _LOW_SPD_OFF
            frames.extend((fid, low) for fid in ID_LOW_SPD)
        self._send_all(frames)

    def _limit_bits(self, q: list[float]) -> int:
        bits = 0
        for i, (v, lo, hi) in enumerate(zip(q, self._q_lo, self._q_hi)):
            if v < lo - 1e-3 or v > hi + 1e-3:
                bits |= 1 << (8 + i)
        return bits


_STATUS, _GRIPPER, _I2, _HHI = (
    struct.Struct(">BBBBBBH"),
    struct.Struct(">ihBB"),
    struct.Struct(">ii"),
    struct.Struct(">hhi"),
)
_TORQUE_COEF = TORQUE_COEF.tolist()
# motor low-speed frame (voltage 24.0 V, driver 38 C, motor 36 C, FOC status, bus current): constant here
_LOW_SPD_ON, _LOW_SPD_OFF = struct.pack(">HhbBH", 240, 38, 36, 0x40, 800), struct.pack(">HhbBH", 240, 38, 36, 0x00, 0)

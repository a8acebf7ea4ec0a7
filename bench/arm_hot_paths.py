"""Per-call CPU (``time.thread_time``) of the piper_arm process's hot paths, single-threaded and paced.

The sim graph's piper_arm process runs four busy threads; this bench drives one call of each, in the
order they interleave live, on one thread at the arm's 200 Hz (a streamed target every other tick,
as teleop sends at 100 Hz), and reports the CPU of each call:

* ``emulator tick``  the firmware stand-in's 200 Hz tick: drain the commands the controller sent (its
                     EndPoseCtrl IK included), ``_step`` the dynamics, encode and send ~8-20 frames;
* ``sdk frames``     piper_sdk's reader for every frame a tick sent (``ReadCanMessage`` until the queue is
                     empty: recv + the link's parse + a feedback listener doing what the node's does, less
                     the ROS publish);
* ``target check``   ``ArmController.set_target`` (finite / quaternion / workspace / IK reachability);
* ``control tick``   ``ArmController.tick`` (feedback snapshot, goal, the position backend's frames).

The threads of the SDK, emulator and controller are stopped after start-up, so each path runs only
here. It uses only APIs that older trees have too: run it with ``PYTHONPATH`` pointing at another
checkout for a before/after comparison. Last, kinematics alone (numpy reference FK / Jacobian vs
what ``kinematics`` has now) on random joints.

Usage: .venv/bin/python bench/arm_hot_paths.py [--ticks 1000]
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.backends import ArmConfig
from piper_recorder.piper.controller import ArmController
from piper_recorder.piper.emulator import EmulatorConfig, PiperEmulator
from piper_recorder.piper.link import PiperLink
from piper_recorder.piper.wire import ID_JOINTS, ID_POSE


def numpy_frames(q: np.ndarray) -> np.ndarray:
    """The vectorised numpy FK (``kinematics.frames_array`` before its scalar rewrite): the reference."""
    ca, sa = np.cos(kin.DH_ALPHA), np.sin(kin.DH_ALPHA)
    tmpl = np.zeros((6, 4, 4))
    tmpl[:, 0, 3] = kin.DH_A
    tmpl[:, 1, 2], tmpl[:, 1, 3] = -sa, -sa * kin.DH_D
    tmpl[:, 2, 2], tmpl[:, 2, 3] = ca, ca * kin.DH_D
    tmpl[:, 3, 3] = 1.0
    th = np.asarray(q, dtype=float)[:6] + kin.DH_THETA_OFFSET
    ct, st = np.cos(th), np.sin(th)
    lk = tmpl
    lk[:, 0, 0], lk[:, 0, 1] = ct, -st
    lk[:, 1, 0], lk[:, 1, 1] = st * ca, ct * ca
    lk[:, 2, 0], lk[:, 2, 1] = st * sa, ct * sa
    for i in range(1, 6):
        np.matmul(lk[i - 1], lk[i], out=lk[i])
    return lk


def numpy_jacobian(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = numpy_frames(q)
    z, d = f[:, :3, 2], f[-1, :3, 3] - f[:, :3, 3]
    jac = np.empty((6, 6))
    jac[0] = z[:, 1] * d[:, 2] - z[:, 2] * d[:, 1]
    jac[1] = z[:, 2] * d[:, 0] - z[:, 0] * d[:, 2]
    jac[2] = z[:, 0] * d[:, 1] - z[:, 1] * d[:, 0]
    jac[3:] = z.T
    return jac, f[-1].copy()


class Timer:
    def __init__(self) -> None:
        self.samples: list[float] = []

    def __call__(self, fn: Callable[[], Any]) -> Any:
        t0 = time.thread_time()
        out = fn()
        self.samples.append(time.thread_time() - t0)
        return out

    def line(self, name: str, per: str, calls_per_s: float) -> str:
        s = np.array(self.samples) * 1e6
        return (
            f"{name:14s} {per:10s} mean {s.mean():7.1f} us  p50 {np.percentile(s, 50):7.1f}  "
            f"p90 {np.percentile(s, 90):7.1f}  x {calls_per_s:5.0f}/s = {s.mean() * calls_per_s / 1e6:.3f} cores"
        )


def stop_threads(emu: PiperEmulator, link: PiperLink, ctl: ArmController) -> None:
    ctl._stop.set()
    assert ctl._thread is not None
    ctl._thread.join(2.0)
    emu._stop.set()
    assert emu._thread is not None
    emu._thread.join(2.0)
    sdk = link.sdk
    sdk._C_PiperInterface_V2__read_can_stop_event.set()
    sdk._C_PiperInterface_V2__can_monitor_stop_event.set()
    emu._send(ID_POSE[0], bytes(8))  # wakes the reader so it sees its stop event
    reader = sdk._C_PiperInterface_V2__can_deal_th
    reader.join(2.0)
    assert not reader.is_alive() and not emu._thread.is_alive() and not ctl._thread.is_alive()
    while link.sdk.GetCanBus().recv_bus.recv(0.0) is not None:
        pass


def run(ticks: int) -> None:
    channel = f"bench_hot_{uuid.uuid4().hex[:8]}"
    cfg = ArmConfig(can_channel=channel, can_interface="virtual", emulate=True)
    cfg.can_silence_s = cfg.emulator_can_silence_s
    emu = PiperEmulator(channel, EmulatorConfig(q_init=cfg.emulator_start_joints)).start()
    link = PiperLink(channel, "virtual", feedback_hz=cfg.feedback_publish_hz)
    ctl = ArmController(cfg, link)
    published = [0]

    def on_frame(fid: int, _stamp: float) -> None:  # the node's _on_frame without the ROS messages
        if fid == ID_JOINTS[-1]:
            if hasattr(link, "joint_state"):  # this tree: the published values straight from the frames
                link.joint_state()
            else:  # older trees: from a feedback snapshot
                fb = link.feedback()
                _ = [float(v) for v in fb.joints] + [float(fb.gripper)]
                _ = [float(v) for v in fb.velocity] + [0.0]
                _ = [float(v) for v in fb.effort] + [float(fb.gripper_effort)]
            published[0] += 1
        elif fid == ID_POSE[-1]:
            if hasattr(link, "flange_pose"):
                link.flange_pose()
            else:
                fb = link.feedback()
                _ = [float(v) for v in fb.pose[:3, 3]], kin.matrix_to_quat(fb.pose[:3, :3])
            published[0] += 1

    link.set_frame_listener(on_frame)
    try:
        ctl.start(enable=True)
        time.sleep(0.3)
        stop_threads(emu, link, ctl)
        port = link.sdk.GetCanBus()
        inbox = port.recv_bus.queue
        base = kin.fk(np.array(cfg.emulator_start_joints))
        quat = kin.matrix_to_quat(base[:3, :3])
        t_emu, t_sdk, t_check, t_ctl = Timer(), Timer(), Timer(), Timer()
        frames = 0
        period = 1.0 / emu.cfg.feedback_hz
        next_t = time.monotonic()
        for k in range(ticks):
            if k % 2 == 0:  # teleop's ~100 Hz stream: a small lissajous about the ready pose
                w = 2 * math.pi * 0.25 * k * period
                pos = base[:3, 3] + np.array([0.05 * math.sin(w), 0.025 * math.sin(2 * w), 0.03 * (1 - math.cos(w))])
                ok = t_check(lambda: ctl.set_target(pos, quat))
                assert ok, ctl.last_refusal
            t_ctl(ctl.tick)

            def emu_tick() -> None:
                emu._drain()
                with emu._lock:
                    emu._step(period)
                emu._send_feedback()
                emu.ticks += 1

            t_emu(emu_tick)
            frames += inbox.qsize()
            t0 = time.thread_time()
            while inbox.qsize():  # the SDK's reader loop: one frame a call, or (newer link) a burst a call
                port.ReadCanMessage()
            t_sdk.samples.append(time.thread_time() - t0)
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()
        hz = emu.cfg.feedback_hz
        print(
            f"{ticks} ticks at {hz:.0f} Hz; {frames / ticks:.1f} frames a tick, {published[0] / ticks * hz:.0f} "
            f"feedback sets published/s, state {ctl.state}, {ctl.accepted} targets, "
            f"emulator IK failures {emu.ik_failures}"
        )
        print(t_emu.line("emulator tick", "per tick", hz))
        print(t_sdk.line("sdk frames", "per tick", hz))
        print(f"{'  one frame':14s} {'per frame':10s} mean {np.sum(t_sdk.samples) / frames * 1e6:7.1f} us")
        print(t_check.line("target check", "per target", hz / 2))
        print(t_ctl.line("control tick", "per tick", cfg.control_rate_hz))
        total = (
            (np.mean(t_emu.samples) + np.mean(t_sdk.samples)) * hz
            + np.mean(t_check.samples) * hz / 2
            + np.mean(t_ctl.samples) * cfg.control_rate_hz
        )
        print(f"{'sum':14s} {'':10s} {total:.3f} cores (plus the node's ROS publishing and executor)")
    finally:
        link.set_frame_listener(None)
        emu.stop()
        try:
            port.recv_bus.shutdown()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def kinematics(n: int) -> None:
    rng = np.random.default_rng(0)
    qs = [rng.uniform(kin.SDK_JOINT_MIN, kin.SDK_JOINT_MAX) for _ in range(n)]
    rows: list[tuple[str, Callable[[np.ndarray], Any]]] = [
        ("fk numpy ref", numpy_frames),
        ("fk now", kin.frames_array),
        ("jacobian numpy ref", numpy_jacobian),
        ("jacobian now", kin.jacobian),
    ]
    for name, fn in rows:
        t0 = time.thread_time()
        for q in qs:
            fn(q)
        print(f"{name:20s} {(time.thread_time() - t0) / n * 1e6:6.1f} us/call")
    ready = np.array(ArmConfig().emulator_start_joints)
    targets = [kin.fk(ready + rng.normal(0, 0.02, 6)) for _ in range(n // 10)]
    t0 = time.thread_time()
    for t in targets:
        kin.solve_ik(t, ready, max_iter=40)
    print(f"{'solve_ik (streamed)':20s} {(time.thread_time() - t0) / len(targets) * 1e6:6.1f} us/call")
    # a 100 Hz teleop-like stream (figure-eight, wrist swing), each solve seeded with the last solution (what the
    # controller's reachability check and the emulator's firmware IK do): the damped steps alone, and kin.ik
    t_ready, stream = kin.fk(ready), []
    for k in range(n // 2):
        t = k * 0.01
        target = t_ready.copy()
        target[:3, 3] += [0.05 * math.sin(t), 0.08 * math.sin(0.7 * t), 0.04 * math.sin(1.3 * t)]
        target[:3, :3] = t_ready[:3, :3] @ kin.euler_to_matrix(
            0.2 * math.sin(0.5 * t), 0.1 * math.sin(0.9 * t), 0.2 * math.sin(1.1 * t)
        )
        stream.append(target)
    for name, solve in (("solve_ik", kin.solve_ik), ("ik", kin.ik)):
        q, steps, closed = ready, 0, 0
        t0 = time.thread_time()
        for target in stream:
            res = solve(target, q, max_iter=40)
            q = res.q
            steps += res.iterations
            closed += res.closed_form
        print(
            f"{name + ' 100 Hz stream':20s} {(time.thread_time() - t0) / len(stream) * 1e6:6.1f} us/call, "
            f"{steps / len(stream):.2f} damped steps, {closed / len(stream):.0%} in closed form"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--ticks", type=int, default=1000, help="200 Hz ticks to run (default 1000: 5 s)")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())}; "
        f"threads {threading.active_count()}"
    )
    run(args.ticks)
    kinematics(2000)


if __name__ == "__main__":
    main()

"""Arm backend tracking error and CPU cost on the CAN-level emulator (in-process, no ROS).

For each backend: the controller runs over piper_sdk on a python-can virtual bus with the emulator
as firmware, starting at the ready pose, and follows a moving target streamed at ~100 Hz like teleop:
``lissajous`` (x 5 cm, y 2.5 cm, z 3 cm at 0.25 Hz, fixed orientation) or ``figure8`` (the sim
headset's ``demo`` figure-eight with its +-10 deg yaw swing, from 0.5 s into the motion of a cycle,
mapped as teleop maps it: p = e0.p + M dp, R = M dR M^T e0.R). Prints the RMS and max flange position and orientation error
(measured end pose vs the target current at the feedback's capture stamp) after 1 s of settling,
the controller's loop overruns, and the process CPU share (emulator + SDK reader + control loop).
The machine is shared: note the load average.

Usage: .venv/bin/python bench/arm_tracking.py [--seconds 8] [--motion lissajous|figure8] [--speed 1..100]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import numpy as np

from piper_recorder.piper import kinematics as kin
from piper_recorder.piper.backends import ArmConfig
from piper_recorder.piper.controller import ArmController
from piper_recorder.piper.emulator import EmulatorConfig, PiperEmulator
from piper_recorder.piper.link import PiperLink
from piper_recorder.quest.scripts import LEAD_S, ScriptedHeadset
from piper_recorder.teleop.frames import FrameConfig, remap_matrix


def lissajous(base: np.ndarray, t: float) -> np.ndarray:
    w = 2 * np.pi * 0.25 * t
    target = base.copy()
    target[:3, 3] += np.array([0.05 * np.sin(w), 0.025 * np.sin(2 * w), 0.03 * (1 - np.cos(w))])
    return target


def figure8(base: np.ndarray, t: float) -> np.ndarray:
    """The sim headset's ``demo`` cycle (engaged at 1.0 s, moving from 1.0 s), as teleop maps it."""
    head = ScriptedHeadset("demo", buttons=False)
    m, c0, c = remap_matrix(FrameConfig()), head.right(LEAD_S + 1.0), head.right(LEAD_S + 1.5 + t)
    d_rot = kin.quat_to_matrix(np.array(c.quat)) @ kin.quat_to_matrix(np.array(c0.quat)).T
    target = base.copy()
    target[:3, 3] += m @ (np.array(c.pos) - np.array(c0.pos))
    target[:3, :3] = m @ d_rot @ m.T @ base[:3, :3]
    return target


MOTIONS = {"lissajous": lissajous, "figure8": figure8}


def run(backend: str, seconds: float, motion: str = "lissajous", speed: int | None = None) -> None:
    channel = f"piper_bench_{uuid.uuid4().hex[:8]}"
    cfg = ArmConfig(backend=backend, can_channel=channel, can_interface="virtual")
    if speed is not None:
        cfg.speed = speed
    emu = PiperEmulator(channel, EmulatorConfig(q_init=cfg.emulator_start_joints)).start()
    link = PiperLink(channel, "virtual")
    ctl = ArmController(cfg, link)
    try:
        ctl.start()
        time.sleep(1.5 if backend == "impedance" else 0.3)  # gravity sampling + gain ramp
        base = ctl.feedback().pose.copy()
        sent: list[tuple[float, np.ndarray]] = []
        seen: dict[float, np.ndarray] = {}
        cpu0, t0 = time.process_time(), time.monotonic()
        while (t := time.monotonic() - t0) < seconds:
            target = MOTIONS[motion](base, t)
            ctl.set_target(target[:3, 3], kin.matrix_to_quat(target[:3, :3]))
            sent.append((time.time(), target))
            time.sleep(0.01)
            fb = link.feedback()
            seen[fb.stamp] = fb.pose.copy()
        cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
        # error of each measured pose vs the target current at its capture stamp; "steady" drops
        # samples where this shared machine starved a thread (feedback or target gaps > 30 ms)
        times = np.array([a for a, _ in sent])
        errs, rot_errs, steady, prev = [], [], [], None
        for stamp in sorted(seen):
            k = int(np.searchsorted(times, stamp)) - 1
            gap, prev = (stamp - prev if prev else 1.0), stamp
            if k < 1 or stamp - times[0] < 1.0:
                continue
            measured, target = seen[stamp], sent[k][1]
            e = float(np.linalg.norm(measured[:3, 3] - target[:3, 3])) * 1000.0
            errs.append(e)
            rot_errs.append(np.degrees(np.linalg.norm(kin.rotation_error(target[:3, :3], measured[:3, :3]))))
            if gap < 0.03 and stamp - times[k] < 0.03 and times[k] - times[k - 1] < 0.03:
                steady.append(e)
        e, es, er = np.array(errs), np.array(steady), np.array(rot_errs)
        st = ctl.status()
        print(
            f"{backend:9s} {motion} speed {cfg.speed}%: RMS {np.sqrt(np.mean(es**2)):6.2f} mm steady "
            f"(n={len(es)}), {np.sqrt(np.mean(e**2)):6.2f} mm all (max {e.max():.1f}, n={len(e)}), "
            f"{np.sqrt(np.mean(er**2)):5.2f} deg (max {er.max():.1f}); overruns {st['loop_overruns']}, "
            f"refused {st['targets_refused']}, CPU {cpu * 100:.0f}% of a core"
        )
    finally:
        ctl.stop()
        link.close()
        emu.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--motion", choices=sorted(MOTIONS), default="lissajous")
    ap.add_argument("--speed", type=int, help="MotionCtrl_2 speed percentage (default: ArmConfig's)")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()}")
    for backend in ("position", "impedance"):
        run(backend, args.seconds, args.motion, args.speed)


if __name__ == "__main__":
    main()

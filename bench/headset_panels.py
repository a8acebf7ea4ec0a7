"""Headset panel stream, in one process and without ROS: CPU per panel and HUD frame, and the latency
from a frame being ready to its last byte handed to the socket, through the real sender and the
simulated headset's receiver (which decodes every frame).

Complements ``bench/teleop_latency.py --panels N`` (the whole chain across processes, whose figures
need a quiet machine): CPU time (``time.thread_time``) barely depends on the machine's load, so the
per-frame costs here hold on a shared box; the latency percentiles do not (the load is printed).
The frames are synthetic 640x480 camera-like images (smooth shading, edges, sensor noise), the
stream loop is quest_video's: ``--fps`` per camera, the HUD at 5 Hz.
Usage: .venv/bin/python bench/headset_panels.py [--cameras 2] [--fps 15] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from piper_recorder.quest.hud import HudState, encode_panel, render_hud
from piper_recorder.quest.sim_video import SimVideoServer
from piper_recorder.quest.video import HUD_PANEL, PanelSender, SenderConfig


def camera_frames(n: int, w: int = 640, h: int = 480, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for i in range(n):
        base = np.stack(
            [80 + 60 * np.sin(x / 90 + i / 7), 90 + 50 * np.cos(y / 70), 120 + 40 * np.sin((x + y) / 150)], -1
        )
        base[200:320, 250 + i % 40 : 390 + i % 40] = (200, 40, 40)  # a moving cube
        base += rng.normal(0, 4, base.shape)  # sensor noise
        out.append(np.clip(base, 0, 255).astype(np.uint8))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--fps", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    frames = camera_frames(30)
    server = SimVideoServer("127.0.0.1", 0)
    sender = PanelSender(SenderConfig(port=server.start()))
    lat_ms: list[float] = []
    enc_cpu: list[float] = []
    hud_cpu: list[float] = []
    period, next_t, next_hud = 1.0 / args.fps, time.monotonic(), time.monotonic()
    end = time.monotonic() + args.seconds
    cpu0, wall0 = time.process_time(), time.monotonic()
    k = 0
    while time.monotonic() < end:
        for cam in range(args.cameras):
            ready = time.perf_counter()
            c0 = time.thread_time()
            jpeg = encode_panel(frames[k % len(frames)], 70, 640, f"cam{cam}")
            enc_cpu.append(time.thread_time() - c0)
            if sender.send(cam, jpeg):
                lat_ms.append((time.perf_counter() - ready) * 1e3)
        if time.monotonic() >= next_hud:
            next_hud += 0.2
            c0 = time.thread_time()
            sender.send(
                HUD_PANEL,
                render_hud(
                    HudState(
                        recording=True,
                        episode_index=k,
                        elapsed_s=k / args.fps,
                        saved_count=3,
                        engaged=True,
                        input_hz=90.0,
                        arm="OK",
                    )
                ),
            )
            hud_cpu.append(time.thread_time() - c0)
        k += 1
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    time.sleep(0.5)
    rep = server.report()
    sender.close()
    server.stop()
    lat = np.asarray(lat_ms)
    load = os.getloadavg()
    print(
        f"headset panels: {args.cameras} cameras 640x480 at {args.fps:g} fps + HUD 5 Hz for {wall:.1f} s; "
        f"load average {load[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"panel encode CPU per frame: p50 {np.median(enc_cpu) * 1e3:.2f} ms  (quality 70, with the name banner)")
    print(f"HUD render + encode CPU per frame: p50 {np.median(hud_cpu) * 1e3:.2f} ms")
    per_cam = (cpu - len(hud_cpu) * float(np.median(hud_cpu))) / wall / args.cameras
    print(
        f"stream process CPU (sender side; the receiver thread too): {cpu / wall * 100:.1f} % of a core, "
        f"~{per_cam * 100:.1f} % per camera"
    )
    print(
        f"frame ready -> last byte on the socket: p50 {np.percentile(lat, 50):.2f} ms  p99 {np.percentile(lat, 99):.2f} ms"
        f"  (n={lat.size}; add the camera's capture -> this node's delivery for the ROS path)"
    )
    print(
        f"received by the sim headset: { ({p: v['frames'] for p, v in rep['panels'].items()}) }, "
        f"decode errors {sum(v['decode_errors'] for v in rep['panels'].values())}, sender drops {sender.stats.dropped}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

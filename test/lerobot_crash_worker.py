"""Crash-test worker: records, saves, discards and deletes episodes in a loop until killed.

Usage: python lerobot_crash_worker.py ROOT SEED. Prints "ready" once the root is open (repaired),
"saving"/"deleting" just before those calls so the test can aim kills at them.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig  # noqa: E402
from test_lerobot_writer_helpers import H, W, index_frame, row_values  # noqa: E402

FPS = 30


def config() -> WriterConfig:
    return WriterConfig(fps=FPS, cameras={"cam_front": CameraSpec(H, W), "cam_wrist": CameraSpec(H, W)})


def main() -> None:
    root, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    w = LeRobotWriter(root, config())
    print("ready", flush=True)
    w.begin_session({"control": {"backend": "impedance"}, "recording": {"fps": FPS}})
    while True:
        w.start_episode(rng.choice(["pick", "place", f"task {seed}"]))
        for k in range(rng.randint(3, 30)):
            t = k / FPS
            w.add_row(t, row_values(t, seed * 100 + w.total_episodes))
            for cam in ("cam_front", "cam_wrist"):
                w.add_frame(cam, index_frame(k), t)
            w.add_raw_quest('{"k": %d}' % k)
        r = rng.random()
        if r < 0.15:
            w.discard_episode()
            continue
        print("saving", flush=True)
        rec = w.save_episode({"seed": seed})
        print("saved", rec["episode_index"], flush=True)
        if r > 0.85:
            print("deleting", flush=True)
            w.delete_last_episode()
            print("deleted", rec["episode_index"], flush=True)


if __name__ == "__main__":
    main()

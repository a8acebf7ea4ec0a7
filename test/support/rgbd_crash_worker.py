"""Deterministic RGB-D episodes for the rgbd tests, and the writer loop the SIGKILL test kills.

Run: ``python test/support/rgbd_crash_worker.py FILE START_EPISODE`` - keeps committing episodes, deleting
the last one now and then, closing and reopening the writer; prints ``OP commit|delete <episode>``
before each operation and ``OK`` after it.
"""

from __future__ import annotations

import sys

import numpy as np

H, W = 48, 64


def episode_length(e: int) -> int:
    return 2 + (e * 7) % 5


def frame(e: int, t: int, h: int = H, w: int = W):
    """Textured RGB and noisy float depth with invalid holes, NaN, inf, too near and too far pixels."""
    rng = np.random.default_rng(1000 * e + t)
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = (
        (128 + 60 * np.sin(xx[..., None] / 7.0 + yy[..., None] / 11.0 + np.arange(3) + t) + rng.normal(0, 8, (h, w, 3)))
        .clip(0, 255)
        .astype(np.uint8)
    )
    depth = (1.5 + 0.8 * np.sin(xx / 9.0 + e) + yy / h + rng.normal(0, 0.004, (h, w))).astype(np.float32)
    depth[rng.random((h, w)) < 0.05] = np.nan
    depth[0, :4] = [np.inf, -np.inf, 0.05, 7.5]
    depth[h // 3 : h // 3 + 5, w // 4 : w // 4 + 9] = 0.0
    state = {"joint": rng.normal(size=6), "gripper": np.float32(t * 0.01)}
    return rgb, depth, state


def action(e: int, t: int) -> np.ndarray:
    return np.random.default_rng(7 + 1000 * e + t).normal(size=7).astype(np.float32)


def write_episode(w, e: int, h: int = H, wd: int = W, success: bool = True) -> dict:
    T = episode_length(e)
    assert w.start_episode(seed=e, meta={"task": f"task {e}"}) == e
    for t in range(T + 1):
        rgb, depth, state = frame(e, t, h, wd)
        w.add_observation(rgb, depth, state)
        if t < T:
            w.add_transition(
                action(e, t), float(t), terminal=(t == T - 1 and e % 2 == 0), extras={"progress": np.float32(t / T)}
            )
    return w.end_episode(success=success)


def main(path: str, start: int) -> None:
    from rgbd_writer import RgbdConfig, RgbdWriter

    cfg = RgbdConfig(width=W, height=H, rgb_source="/cam/color", depth_source="/cam/depth", workers=2)
    e = start
    print("READY", flush=True)
    while True:
        w = RgbdWriter(path, cfg)
        assert w.total_episodes == e, (w.total_episodes, e)
        for _ in range(3):
            print(f"OP commit {e}", flush=True)
            write_episode(w, e)
            print("OK", flush=True)
            e += 1
        e -= 1
        print(f"OP delete {e}", flush=True)  # re-recorded identically by the next commit
        assert w.delete_last_episode() == e
        print("OK", flush=True)
        w.start_episode()  # an episode left in flight when close() discards it
        rgb, depth, state = frame(e, 0)
        w.add_observation(rgb, depth, state)
        w.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

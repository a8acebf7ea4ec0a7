"""Episodes recorded through the recorders' own episode controller and a real writer (LeRobot or RGB-D), fed
like the node: arm inputs at 100 Hz and 30 fps frames, optionally with a camera stall (a ``bad`` verdict by
construction, whatever the machine's load).
"""

from __future__ import annotations

import time

import numpy as np

from piper_recorder.recording.config import session_record
from piper_recorder.recording.controller import EpisodeController

MS = 1_000_000


def controller(target, cfg, events):
    """The recorders' episode controller over ``target`` (a real writer's), its events appended to ``events``."""
    return EpisodeController(
        target,
        cfg.assembly(),
        recorder="rec",
        max_episode_s=0,
        publish_event=events.append,
        session_record=lambda: session_record(cfg, "rec", None, None),
        log=lambda m: None,
    )


CLOCK = [0]  # where the last episode's fed inputs ended (ns): the next one starts 2 s later


def record_episode(
    c: EpisodeController, seconds: float, stall: tuple[float, float] | None = None, px: int = 16
) -> None:
    """Feed ``seconds`` of arm inputs (100 Hz) and 30 fps frames; ``stall``: (from, to) s without frames.
    Each episode starts 2 s after the previous one's fed end (its samples are not a later one's pre-roll).
    """
    t = CLOCK[0] = max(time.time_ns(), CLOCK[0] + 2_000 * MS)
    assert c.start("pick", lambda: t).ok
    n = int(seconds * 300)
    for i in range(n):
        s = t + i * MS * 10 // 3
        if i % 3 == 0:
            c.add_joint_state(s, [0.1] * 6 + [0.04])
            c.add_eef_pose(s, (0.2, 0, 0.2), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0.2, 0, 0.2), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.02)
        if i % 10 == 0 and not (stall and stall[0] * 1e9 <= s - t < stall[1] * 1e9):
            c.add_frame(
                "cam_front",
                s,
                np.full((px, px, 3), i % 250, np.uint8),
                np.full((px, px), 500, np.uint16) if c.target.depth else None,
            )
        c.tick(s)
    CLOCK[0] = t + n * MS * 10 // 3
    ans = c.stop(CLOCK[0])
    assert ans.ok, ans.message

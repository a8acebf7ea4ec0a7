"""The recorders' episode controller on its own: a fake LeRobot writer that keeps what it is given (and fails
a test that calls it from two threads), a settable wall clock, and synthetic arm and camera inputs.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.recording.controller import EpisodeController

MS = 1_000_000


class FakeLeRobotWriter:
    """Records sessions, episodes, rows and frames; ``fail_rows`` makes every row a schema error."""

    def __init__(self, fail_rows: bool = False):
        self.sessions, self.episodes, self.current, self.closed = [], [], None, False
        self.fail_rows = fail_rows
        self.writer_thread = None

    def _thread(self):
        t = threading.current_thread().name
        assert self.writer_thread in (None, t), "writer called from two threads"
        self.writer_thread = t

    def begin_session(self, record):
        self._thread()
        self.sessions.append(record)

    def start_episode(self, task):
        self._thread()
        assert self.current is None
        self.current = {"task": task, "rows": [], "frames": {}, "raw": []}
        return len(self.episodes)

    def add_row(self, t, values):
        self._thread()
        if self.fail_rows:
            raise ValueError("schema: observation.arm_joint has NaN")
        self.current["rows"].append(t)

    def add_frame(self, cam, rgb, t):
        self.current["frames"].setdefault(cam, []).append(t)
        return True

    def add_raw_quest(self, line):
        self.current["raw"].append(line)

    def save_episode(self, counters=None, annotate=None):
        self._thread()
        ep, self.current = self.current, None
        ep["counters"] = dict(counters or {})
        self.episodes.append(ep)
        return {"episode_index": len(self.episodes) - 1, "length": len(ep["rows"])}

    def discard_episode(self):
        assert self.current is not None
        self.current = None

    def delete_last_episode(self):
        self.episodes.pop()

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.t = time.time_ns()

    def __call__(self):
        return self.t


def make(target, cams=("cam_front",), max_s=0.0, lateness=0.0, reach=0.0):
    """A controller over ``target`` at 30 fps and the list its events go to."""
    events = []
    cfg = AssemblyConfig(fps=30, cameras=cams, lateness_s=lateness)
    c = EpisodeController(
        target,
        cfg,
        recorder="lerobot_recorder",
        max_episode_s=max_s,
        publish_event=events.append,
        session_record=lambda: {"recording": {"fps": 30}},
        log=lambda m: None,
        stop_reach_s=reach,
    )
    return c, events


def feed(c, t0, seconds, cams=("cam_front",), depth=False, step_ms=10, size=(4, 4)):
    """``seconds`` of arm inputs every ``step_ms`` from ``t0`` (ns), a frame every third, a tick after each."""
    for i in range(int(seconds * 1000 / step_ms)):
        s = t0 + i * step_ms * MS
        c.add_joint_state(s, [0.1] * 6 + [0.04])
        c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_gripper(s, 0.02)
        if i % 3 == 0:
            for cam in cams:
                c.add_frame(cam, s, np.zeros((*size, 3), np.uint8), np.zeros(size, np.uint16) if depth else None)
        c.tick(s)
